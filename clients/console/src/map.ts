// The Map tab: the zones to watch, the live map of the one watched (an observer connection over
// the real protocol), its walls, the players' views on it, the selected entity's panel, the
// history scrubber, the charts and the players' table.
import { socketUrl, type Handshake } from "../../typescript/src/index.js";
import { OverworldHttpError, type Api, type HistoryState, type Obstacles, type SessionInfo, type ZoneInfo } from "./api.js";
import { Camera, wheelFactor, type Rect } from "./camera.js";
import { ChartsPanel } from "./charts.js";
import { ColourTable } from "./colors.js";
import { fill, h } from "./dom.js";
import { legendItems, swatchColours, zoneItems } from "./map-side.js";
import { EntityPanel } from "./entity-panel.js";
import { PlayersPanel } from "./players-panel.js";
import { borders, targets, zoneAt, type Target } from "./layout.js";
import { InlineSource, WorkerSource, type LiveEvents, type LiveSource } from "./live.js";
import { Renderer, cellOf, type Overlays, type ZoneBorder } from "./render.js";
import type { StatusHistory } from "./ring.js";
import { Scene, fromHistory, nearest } from "./scene.js";
import { Scrubber } from "./scrubber.js";
import { FpsMeter, stats } from "./stats.js";
import { PlayerViews, type ViewsInfo } from "./views.js";
import type { WallsDrawn } from "./walls.js";

export interface MapOptions {
  api: Api;
  token: () => string | null;
  history: StatusHistory;
  /** The page's URL (the observer connects to the same server). */
  base: string;
  /** A failure that is not the map's to show (a 401: back to the login). */
  failed: (e: unknown) => void;
  /** Cap on frames drawn per second (0: every animation frame). */
  maxFps?: number;
  /** The decoding worker's script (null: decode on the page's thread). */
  workerUrl: string | null;
}

export class MapTab {
  readonly root: HTMLElement;
  private readonly o: MapOptions;
  private readonly camera = new Camera();
  private readonly renderer: Renderer;
  private readonly canvas = h("canvas", { class: "map", testid: "map-canvas" });
  private readonly zoneList = h("ul", { class: "zones", testid: "zone-list" });
  private readonly status = h("div", { class: "map-status mono", testid: "map-status" });
  private readonly legend = h("div", { class: "legend", testid: "legend" });
  private readonly panel = new EntityPanel({ close: () => this.select(null), refresh: () => void this.loadState() });
  private readonly gridBox = h("input", { type: "checkbox", testid: "grid-toggle", checked: true });
  private readonly viewsBox = h("input", { type: "checkbox", testid: "views-toggle", checked: true });
  private readonly message = h("div", { class: "message", testid: "map-message" });
  private readonly scrubber: Scrubber;
  readonly charts: ChartsPanel;
  private readonly players: PlayersPanel;
  private readonly playerViews: PlayerViews;

  private target: Target | null = null;
  private source: LiveSource | null = null;
  private hs: Handshake | undefined;
  private colours = new ColourTable([]);
  private zoneBorders: ZoneBorder[] = [];
  /** The walls of the target watched (null: none, or not fetched yet). */
  private obstacles: Obstacles | null = null;
  /** Whether they were asked for the target watched (once: they do not change). */
  private wallsAsked = false;
  /** What the last frame drew of them. */
  private wallsDrawn: WallsDrawn = { boxes: 0, circles: 0 };
  /** The newest live scene taken from the source (empty before the first). */
  private live = new Scene();
  private hasLive = false;
  private readonly past = new Scene();
  private history: { state: HistoryState; zone: ZoneInfo } | null = null;
  private selectedId: number | null = null;
  private selected = -1;
  private fitted = false;
  private visible = true;
  private readonly meter = new FpsMeter();
  private lastDraw = -Infinity;
  private lastPanel = 0;
  private sessionTimer: ReturnType<typeof setInterval> | undefined;
  private heldTimer: ReturnType<typeof setInterval> | undefined;
  private drag: { x: number; y: number; moved: boolean; id: number } | null = null;
  private disposed = false;
  private zoneTimer: ReturnType<typeof setInterval> | undefined;

  constructor(o: MapOptions) {
    this.o = o;
    this.renderer = new Renderer(this.canvas);
    this.charts = new ChartsPanel(o.history);
    this.players = new PlayersPanel((user) => this.selectPlayer(user));
    this.playerViews = new PlayerViews(o.api, (e) => this.failed(e));
    this.scrubber = new Scrubber(o.api, {
      showHistory: (state, zone) => this.showHistory(state, zone),
      failed: (e) => this.failed(e),
    });
    this.canvasEvents();
    this.root = h(
      "div",
      { class: "map-tab" },
      h(
        "aside",
        { class: "side" },
        h("div", { class: "row" }, h("h3", {}, "Zones"), h("button", { testid: "zones-refresh", onclick: () => void this.loadZones() }, "Refresh")),
        this.zoneList,
        h("h3", {}, "Legend"),
        this.legend,
        this.panel.root,
      ),
      h(
        "main",
        { class: "map-main" },
        h(
          "div",
          { class: "toolbar" },
          h("button", { testid: "fit-button", onclick: () => this.fit() }, "Fit"),
          h("label", {}, this.gridBox, " grid"),
          h("label", { title: "each player's view radius; the selected player's held cells" }, this.viewsBox, " views"),
          this.status,
        ),
        this.message,
        this.canvas,
        this.scrubber.root,
        this.charts.root,
        this.players.root,
      ),
    );
    requestAnimationFrame(this.frame);
    // The zone list's figures (and zones started or stopped) follow while the tab is open.
    this.zoneTimer = setInterval(() => this.visible && void this.loadZones(), 5000);
  }

  /**
   * For browser tests: the on-screen entities of the scene drawn (ids and canvas CSS pixel
   * positions, at most `max`), to click one.
   */
  onScreen(max = 100): Array<{ id: number; x: number; y: number }> {
    const scene = this.scene();
    const out: Array<{ id: number; x: number; y: number }> = [];
    for (let i = 0; i < scene.count && out.length < max; i++) {
      const x = this.camera.screenX(scene.xs[i]!);
      const y = this.camera.screenY(scene.ys[i]!);
      if (x >= 0 && y >= 0 && x < this.camera.width && y < this.camera.height) out.push({ id: scene.ids[i]!, x, y });
    }
    return out;
  }

  /** For browser tests: the players' views the last frame drew (the selected player, its held cells, the view circles). */
  views(): ViewsInfo {
    return { ...this.playerViews.drawn };
  }

  /** For browser tests: the walls the last frame drew (boxes and circles with a pixel on the canvas). */
  walls(): WallsDrawn {
    return { ...this.wallsDrawn };
  }

  /** For browser tests: the camera's centre (metres) and zoom (pixels per metre). */
  view(): { cx: number; cy: number; zoom: number } {
    return { cx: this.camera.cx, cy: this.camera.cy, zoom: this.camera.zoom };
  }

  setVisible(v: boolean): void {
    this.visible = v;
    if (v) {
      this.charts.draw();
      this.players.draw();
    }
  }

  /** Stops watching and drawing for good (logout). */
  dispose(): void {
    this.stop();
    clearInterval(this.zoneTimer);
    this.disposed = true;
  }

  /** Stops watching. */
  stop(): void {
    this.source?.close();
    this.source = null;
    this.target = null;
    this.scrubber.stop();
    clearInterval(this.sessionTimer);
    clearInterval(this.heldTimer);
    stats.mode = "idle";
    stats.zone = "";
  }

  async loadZones(): Promise<void> {
    let zones: ZoneInfo[];
    try {
      ({ zones } = await this.o.api.zones());
    } catch (e) {
      return this.failed(e);
    }
    const ts = targets(zones);
    fill(this.zoneList, ...zoneItems(ts, this.target?.name ?? null, (t) => this.watch(t)));
    // The target watched gets its zones' new details (history, regions).
    const same = this.target === null ? undefined : ts.find((t) => t.name === this.target!.name);
    if (same !== undefined) {
      this.target = same;
      // (Watched by name before the list knew it: its walls now, unless already asked.)
      void this.loadWalls(same);
    }
  }

  /** Watches a zone or world: a new observer connection. */
  watch(t: Target): void {
    this.stop();
    this.target = t;
    this.hs = undefined;
    this.fitted = false;
    this.select(null);
    this.playerViews.reset();
    this.players.clear();
    this.live = new Scene();
    this.hasLive = false;
    this.obstacles = null;
    this.wallsAsked = false;
    void this.loadWalls(t);
    stats.zone = t.name;
    this.message.textContent = `connecting to ${t.name}…`;
    for (const li of this.zoneList.querySelectorAll("li")) li.classList.toggle("current", li.querySelector("button")?.dataset.zone === t.name);
    const events: LiveEvents = {
      onHandshake: (hs) => this.handshake(hs),
      onError: (e) => (this.message.textContent = e.code === 0 ? e.message : `server: ${e.message} (error ${e.code})`),
      onClose: (e) => {
        if (e.code === 4003) return this.failed(new OverworldHttpError(401, "invalid_token", e.reason || "the server refused the operator token"));
        if (e.final && e.code !== 1000) this.message.textContent = `connection closed: ${e.reason || "no reason"} (${e.code})`;
        else if (!e.final) this.message.textContent = `connection lost (${e.code}); reconnecting…`;
      },
    };
    // (The page's own server.)
    const url = socketUrl(new URL(this.o.base).origin, t.name);
    // (No token: HELLO is refused with 4003, and the app shows the login.)
    const token = this.o.token() ?? "";
    this.source = null;
    if (this.o.workerUrl !== null && typeof Worker !== "undefined")
      try {
        this.source = new WorkerSource(this.o.workerUrl, url, token, events);
      } catch {
        // A worker cannot start here (a policy, an old browser): decode on this thread.
      }
    this.source ??= new InlineSource(url, token, events);
    stats.decoder = this.source instanceof WorkerSource ? "worker" : "page";
    this.scrubber.setZones(t.zones);
    this.charts.watch(t.name);
    void this.loadSessions();
    this.sessionTimer = setInterval(() => this.visible && void this.loadSessions(), 2000);
    // The selected player's held cells, about every second.
    this.heldTimer = setInterval(() => this.visible && void this.playerViews.loadHeld(), 1000);
  }

  private handshake(hs: Handshake): void {
    this.hs = hs;
    this.colours = new ColourTable(hs.templates);
    // (The legend's swatches: their colours change only with the templates.)
    swatchColours(this.colours);
    this.zoneBorders = this.target === null ? [] : borders(this.target, hs);
    this.message.textContent = "";
    // (The first frame drawn fits the world: the canvas has its size only while shown.)
  }

  private world(): Rect | null {
    return this.hs === undefined ? null : { x0: 0, y0: 0, x1: this.hs.width, y1: this.hs.height };
  }

  /** The Fit button: the whole world in view. */
  fit(): void {
    const { width, height } = this.renderer.fit();
    this.camera.resize(width, height);
    this.fitWorld();
  }

  /** The camera on the whole world (at the canvas's size the camera has). */
  private fitWorld(): void {
    const w = this.world();
    if (w === null) return;
    this.camera.fit(w);
    this.fitted = true;
  }

  private showHistory(state: HistoryState | null, zone: ZoneInfo | null): void {
    this.history = state === null || zone === null ? null : { state, zone };
    if (this.history !== null && this.hs !== undefined) fromHistory(this.past, state!.tick, state!.entities, this.hs.templates, this.colours);
    this.reselect();
  }

  /** The frame loop: rebuild the scene when a snapshot came, draw, count. */
  private readonly frame = (now: number): void => {
    if (this.disposed) return;
    requestAnimationFrame(this.frame);
    if (!this.visible) return;
    const cap = this.o.maxFps ?? 0;
    if (cap > 0 && now - this.lastDraw < 1000 / cap - 2) return;
    this.lastDraw = now;
    const { width, height } = this.renderer.fit();
    this.camera.resize(width, height);
    if (!this.fitted && this.hs !== undefined && width > 1 && height > 1) this.fitWorld();
    const src = this.source;
    if (src !== null) {
      const fresh = src.take();
      if (fresh !== null) {
        this.live = fresh;
        this.hasLive = true;
        if (this.history === null) this.reselect();
      }
      const st = src.status;
      stats.lastSnapshotTick = st.tick;
      stats.snapshots = st.snapshots;
      stats.applyMs = st.applyMs;
      stats.sceneMs = st.sceneMs;
    }
    let scene = this.live;
    let full = false;
    if (this.history !== null) {
      scene = this.past;
      stats.mode = "history";
    } else if (this.hasLive && this.hs !== undefined) {
      full = true;
      stats.mode = "live";
      stats.sceneTick = scene.tick;
    }
    if (this.panel.following && this.selected >= 0) this.camera.centreOn(scene.xs[this.selected]!, scene.ys[this.selected]!);
    const info = this.renderer.draw(scene, this.camera, this.colours, this.overlays());
    stats.frames++;
    if (full && info.processed === scene.count) stats.fullFrames++;
    stats.entitiesDrawn = info.processed;
    stats.entitiesVisible = info.drawn;
    stats.frameMs = info.ms;
    this.wallsDrawn = info.walls;
    if (this.meter.frame(now, full)) this.showStatus(scene);
    if (now - this.lastPanel > 250) {
      this.lastPanel = now;
      this.updateFields(scene);
    }
  };

  private overlays(): Overlays {
    const hs = this.hs;
    return {
      world: this.world(),
      grid: hs === undefined ? null : { cols: hs.cols, rows: hs.rows, cellSize: hs.cellSize },
      zones: this.zoneBorders,
      selected: this.selected,
      showGrid: this.gridBox.checked,
      views: this.playerViews.overlay(this.scene(), hs?.cellSize ?? 0, this.viewsBox.checked),
      walls: this.obstacles,
    };
  }

  /**
   * The target's walls, asked once when the map starts watching it: its first zone's with
   * obstacles (the zones of a world share its coordinates and its map); none without.
   */
  private async loadWalls(t: Target): Promise<void> {
    const zone = t.zones.find((z) => z.obstacles > 0);
    if (zone === undefined || this.wallsAsked) return;
    this.wallsAsked = true;
    try {
      const walls = await this.o.api.obstacles(zone.ref);
      if (this.target?.name === t.name) this.obstacles = walls;
    } catch (e) {
      // (A zone stopped meanwhile: no walls. A 401 is the app's.)
      if (!(e instanceof OverworldHttpError) || e.status === 401) this.failed(e);
    }
  }

  private showStatus(scene: Scene): void {
    const st = this.source?.status;
    const mode = this.history !== null ? `history tick ${this.history.state.tick}` : st === undefined ? "not watching" : `${st.state} tick ${this.live.tick}`;
    const rtt = st?.rtt === null || st?.rtt === undefined ? "" : ` · RTT ${st.rtt.toFixed(0)} ms`;
    this.status.textContent = `${mode} · ${scene.count} entities · ${stats.fps} fps (${stats.fullFps} full) · frame ${stats.frameMs.toFixed(1)} ms · decode ${stats.applyMs.toFixed(1)} ms (${stats.decoder})${rtt}`;
    fill(this.legend, ...legendItems(this.colours, scene.perSlot));
  }

  // ---- selection ----

  private canvasEvents(): void {
    const c = this.canvas;
    c.addEventListener("pointerdown", (e) => {
      this.drag = { x: e.offsetX, y: e.offsetY, moved: false, id: e.pointerId };
      c.setPointerCapture?.(e.pointerId);
    });
    c.addEventListener("pointermove", (e) => {
      const d = this.drag;
      if (d === null || d.id !== e.pointerId) return;
      const dx = e.offsetX - d.x;
      const dy = e.offsetY - d.y;
      if (!d.moved && Math.hypot(dx, dy) < 4) return;
      d.moved = true;
      this.panel.stopFollowing();
      this.camera.panBy(dx, dy);
      d.x = e.offsetX;
      d.y = e.offsetY;
    });
    c.addEventListener("pointerup", (e) => {
      const d = this.drag;
      this.drag = null;
      if (d !== null && !d.moved) this.click(e.offsetX, e.offsetY);
    });
    c.addEventListener("pointercancel", () => (this.drag = null));
    c.addEventListener(
      "wheel",
      (e) => {
        e.preventDefault();
        this.camera.zoomAt(e.offsetX, e.offsetY, wheelFactor(e.deltaY, e.deltaMode));
      },
      { passive: false },
    );
  }

  private scene(): Scene {
    return this.history !== null ? this.past : this.live;
  }

  /** A click at a canvas point: the nearest entity within 8 pixels, or nothing. */
  click(sx: number, sy: number): void {
    const scene = this.scene();
    const i = nearest(scene, this.camera.worldX(sx), this.camera.worldY(sy), 8 / this.camera.zoom);
    this.select(i < 0 ? null : scene.ids[i]!);
  }

  select(id: number | null): void {
    this.selectedId = id;
    // (A player's avatar selects the player: its view's cells are shaded.)
    this.selectPlayerOnly(this.playerViews.userOf(id));
    this.panel.select(id);
    this.reselect();
    this.lastPanel = 0;
    if (id !== null) void this.loadState();
  }

  /** A row of the players' table: the player, and its avatar on the map. */
  selectPlayer(user: string): void {
    const entity = this.playerViews.entityOf(user);
    if (entity !== null) this.select(entity);
    this.selectPlayerOnly(user);
  }

  private selectPlayerOnly(user: string | null): void {
    if (user === this.playerViews.selected) return;
    this.playerViews.select(user);
    this.players.select(user);
    void this.playerViews.loadHeld();
  }

  /** After a new scene: the selected entity's index in it. */
  private reselect(): void {
    this.selected = this.selectedId === null ? -1 : this.scene().indexOf(this.selectedId);
  }

  /** The selected entity's fields as the template decodes them (live), or its history record. */
  private updateFields(scene: Scene): void {
    const id = this.selectedId;
    if (id === null) return;
    const i = this.selected;
    const hs = this.hs;
    if (i < 0 || hs === undefined) return this.panel.missing(id);
    const key = scene.cells[i]!;
    this.panel.summary({
      id,
      template: hs.templates[scene.templates[i]!]?.name ?? "?",
      key,
      cell: key < 0 ? null : cellOf(key, hs.cols, hs.rows),
      zone: this.zoneOf(scene, i),
    });
    if (scene !== this.live || this.source === null)
      return this.panel.fields([
        ["x", scene.xs[i]],
        ["y", scene.ys[i]],
      ]);
    // The fields as the template decodes them, from the SDK's entry (in the decoding worker).
    void this.source.entity(id, i).then((d) => {
      if (d !== null && this.selectedId === id && this.history === null) this.panel.fields(Object.entries(d.values));
    });
  }

  /** The selected entity's full server-side state (operator API). */
  private async loadState(): Promise<void> {
    const id = this.selectedId;
    const zone = this.zoneOf(this.scene(), this.selected);
    if (id === null || zone === undefined) return;
    this.panel.state("loading…");
    try {
      const d = await this.o.api.entity(zone.ref, id);
      if (this.selectedId === id) this.panel.state({ owner: d.owner, cell: d.cell, zone: d.zone, template: d.template, kind: d.kind, state: d.state });
    } catch (e) {
      if (!(e instanceof OverworldHttpError) || e.status === 401) this.failed(e);
      else if (this.selectedId === id) this.panel.state(`${e.message} (${e.status})`);
    }
  }

  /** The zone of an entity of a scene (index -1: the target's first): the history's, else by the borders. */
  private zoneOf(scene: Scene, i: number): ZoneInfo | undefined {
    if (this.history !== null) return this.history.zone;
    const t = this.target;
    if (t === null) return undefined;
    return i >= 0 ? zoneAt(t, this.zoneBorders, scene.xs[i]!, scene.ys[i]!) : t.zones[0];
  }

  private async loadSessions(): Promise<void> {
    const t = this.target;
    if (t === null) return;
    const all: SessionInfo[] = [];
    try {
      for (const z of t.zones) all.push(...(await this.o.api.sessions(z.ref)));
    } catch (e) {
      if (e instanceof OverworldHttpError && e.status !== 401) return this.players.setSessions(null, `sessions: ${e.message}`);
      return this.failed(e);
    }
    if (this.target !== t) return;
    this.playerViews.setPlayers(all);
    this.players.setSessions(all);
    await this.playerViews.loadRadii();
  }

  private failed(e: unknown): void {
    if (e instanceof OverworldHttpError && e.status !== 401) this.message.textContent = e.message;
    else this.o.failed(e);
  }
}
