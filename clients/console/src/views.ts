// The players' views on the map: a circle of each player's view radius around its entity, and
// the cells the selected player's view holds, shaded (the operator API's
// `sessions/:user_id/interest`). The radii are asked once per player (again after a while); the
// selected player's held cells about every second (the map's timer). Each frame gets an overlay
// of a few numbers per player (src/render.ts draws it as vectors over the entities' pixels): the
// players' entities are found in a scene once per scene, not per frame.
import { OverworldHttpError, heldCells, type Api, type HeldRun, type SessionInfo } from "./api.js";
import type { ViewsOverlay } from "./render.js";
import type { Scene } from "./scene.js";

/** A player's radii are asked again after this long (ms): they change only with a new session. */
const RADIUS_TTL = 30_000;
/** At most this many interest calls for radii per poll (a poll every 2 s). */
const PER_POLL = 8;

interface Radius {
  radius: number;
  leave: number | null;
  at: number;
}

interface Held {
  user: string;
  runs: HeldRun[];
  cells: number;
}

export interface ViewsInfo {
  /** Whether the views are drawn (the toggle). */
  on: boolean;
  /** The selected player's user id. */
  selected: string | null;
  /** Cells of the selected player's held runs drawn in the last frame. */
  heldCells: number;
  /** View circles drawn in the last frame (players on the map whose radius is known). */
  circles: number;
}

export class PlayerViews {
  private readonly api: Api;
  private readonly failed: (e: unknown) => void;
  private players: SessionInfo[] = [];
  private readonly radii = new Map<string, Radius>();
  private readonly asking = new Set<string>();
  private selectedUser: string | null = null;
  private held: Held | null = null;
  private loadingHeld = false;
  /** Bumped on reset: answers of an earlier target are dropped. */
  private generation = 0;
  /** Bumped when the players change: the index cache is stale. */
  private version = 0;
  private idxScene: Scene | null = null;
  private idxTick = -1;
  private idxCount = -1;
  private idxVersion = -1;
  /** Per player (in `players`' order): its entity's index in the scene, or -1. */
  private idx = new Int32Array(0);
  private readonly out: ViewsOverlay = { circles: new Float64Array(0), count: 0, selected: -1, leave: NaN, held: [], cellSize: 0 };
  /** What the last frame drew. */
  readonly drawn: ViewsInfo = { on: true, selected: null, heldCells: 0, circles: 0 };

  constructor(api: Api, failed: (e: unknown) => void) {
    this.api = api;
    this.failed = failed;
  }

  get selected(): string | null {
    return this.selectedUser;
  }

  /** A new target: nothing known. */
  reset(): void {
    this.generation++;
    this.players = [];
    this.version++;
    this.radii.clear();
    this.asking.clear();
    this.selectedUser = null;
    this.held = null;
    this.loadingHeld = false;
    this.idxScene = null;
  }

  /** The players of a poll of the sessions. */
  setPlayers(sessions: SessionInfo[]): void {
    this.players = sessions;
    this.version++;
    const users = new Set(sessions.map((s) => s.userId));
    for (const u of [...this.radii.keys()]) if (!users.has(u)) this.radii.delete(u);
  }

  /** The user whose avatar an entity is (null: none of the players'). */
  userOf(entity: number | null): string | null {
    if (entity === null) return null;
    for (const p of this.players) if (p.entity === entity) return p.userId;
    return null;
  }

  entityOf(user: string): number | null {
    return this.players.find((p) => p.userId === user)?.entity ?? null;
  }

  select(user: string | null): void {
    if (user === this.selectedUser) return;
    this.selectedUser = user;
    this.held = null;
  }

  /** Asks the radii of the players without one (or an old one), a few per call. */
  async loadRadii(now = performance.now()): Promise<void> {
    const gen = this.generation;
    const due = this.players
      .filter((p) => !this.asking.has(p.userId) && now - (this.radii.get(p.userId)?.at ?? -Infinity) > RADIUS_TTL)
      .slice(0, PER_POLL);
    await Promise.all(
      due.map(async (p) => {
        this.asking.add(p.userId);
        try {
          const v = await this.api.interest(p.userId);
          if (gen === this.generation && v.radiusM !== null) this.radii.set(p.userId, { radius: v.radiusM, leave: v.leaveM, at: now });
        } catch (e) {
          // (Gone, or no frame sent yet: asked again at the next poll. A 401 is the app's.)
          if (!(e instanceof OverworldHttpError) || e.status === 401) this.failed(e);
        } finally {
          if (gen === this.generation) this.asking.delete(p.userId);
        }
      }),
    );
  }

  /** Asks what the selected player's view holds (one call at a time). */
  async loadHeld(): Promise<void> {
    const user = this.selectedUser;
    if (user === null || this.loadingHeld) return;
    const gen = this.generation;
    this.loadingHeld = true;
    try {
      const v = await this.api.interest(user);
      if (gen !== this.generation || this.selectedUser !== user) return;
      this.held = { user, runs: v.held, cells: heldCells(v.held) };
      if (v.radiusM !== null) this.radii.set(user, { radius: v.radiusM, leave: v.leaveM, at: performance.now() });
    } catch (e) {
      if (!(e instanceof OverworldHttpError) || e.status === 401) return this.failed(e);
      // The player left (404) or has no view yet (409): nothing shaded.
      if (gen === this.generation && this.selectedUser === user) this.held = null;
    } finally {
      if (gen === this.generation) {
        this.loadingHeld = false;
        // (Another player selected meanwhile: its cells now, not at the next timer's turn.)
        if (this.selectedUser !== null && this.selectedUser !== user) void this.loadHeld();
      }
    }
  }

  /**
   * The overlay of a frame drawing `scene` (null: views off, or nothing to draw); what it holds
   * is counted in `drawn`. Its arrays are reused from frame to frame.
   */
  overlay(scene: Scene, cellSize: number, on: boolean): ViewsOverlay | null {
    const d = this.drawn;
    d.on = on;
    d.selected = this.selectedUser;
    d.circles = 0;
    d.heldCells = 0;
    if (!on) return null;
    const o = this.out;
    const n = this.players.length;
    this.indexes(scene);
    if (o.circles.length < n * 3) o.circles = new Float64Array(n * 3);
    o.count = 0;
    o.selected = -1;
    o.leave = NaN;
    for (let k = 0; k < n; k++) {
      const i = this.idx[k]!;
      if (i < 0) continue;
      const user = this.players[k]!.userId;
      const r = this.radii.get(user);
      if (r === undefined) continue;
      if (user === this.selectedUser) {
        o.selected = o.count;
        o.leave = r.leave ?? NaN;
      }
      const c = o.count++ * 3;
      o.circles[c] = scene.xs[i]!;
      o.circles[c + 1] = scene.ys[i]!;
      o.circles[c + 2] = r.radius;
    }
    const held = this.held !== null && this.held.user === this.selectedUser && cellSize > 0 ? this.held : null;
    o.held = held?.runs ?? [];
    o.cellSize = cellSize;
    d.circles = o.count;
    d.heldCells = held?.cells ?? 0;
    return o.count === 0 && o.held.length === 0 ? null : o;
  }

  /** The players' entities' indexes in a scene: one pass over it per scene (or players' change). */
  private indexes(scene: Scene): void {
    if (scene === this.idxScene && scene.tick === this.idxTick && scene.count === this.idxCount && this.version === this.idxVersion) return;
    this.idxScene = scene;
    this.idxTick = scene.tick;
    this.idxCount = scene.count;
    this.idxVersion = this.version;
    const n = this.players.length;
    if (this.idx.length < n) this.idx = new Int32Array(n);
    this.idx.fill(-1);
    const want = new Map<number, number>();
    this.players.forEach((p, k) => p.entity !== null && want.set(p.entity, k));
    if (want.size === 0) return;
    const ids = scene.ids;
    let left = want.size;
    for (let i = 0, c = scene.count; i < c && left > 0; i++) {
      const k = want.get(ids[i]!);
      if (k !== undefined && this.idx[k] === -1) {
        this.idx[k] = i;
        left--;
      }
    }
  }
}
