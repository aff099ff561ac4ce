// What one frame of the map draws: every entity of the latest snapshot as flat typed arrays
// (positions in metres, colour slots, flags), rebuilt once per snapshot, not per frame, so
// drawing 40,000 entities is a loop over numbers. The entities are the SDK's WorldView's, resolved
// exactly as `WorldView.entities()` resolves them (test/scene.test.ts checks it on the shared
// vectors), without building a Map of every entity per snapshot.
import type { Entry, TemplateSchema, WorldView } from "../../typescript/src/index.js";
import type { ColourTable } from "./colors.js";

/** Flags of an entity of the scene. */
export const BAND = 1; // published in a band cell: past its zone's border, not handed over yet
export const HANDED = 2; // handed to another zone, not published by it yet (shown as it was)
export const STALE = 4; // in a cell the server's byte budget held back (an older tick)

/** Where a template's position is: field indexes and their dequantization (metres = (min + q * step) / 1024). */
export interface PositionLayout {
  x: number;
  y: number;
  xMin: number;
  xStep: number;
  yMin: number;
  yStep: number;
}

/** The position fields of each template (`x` and `y` of type `fixed`), or null when it has none. */
export function positionLayouts(templates: readonly TemplateSchema[]): Array<PositionLayout | null> {
  return templates.map((t) => {
    const x = t.fields.findIndex((f) => f.name === "x");
    const y = t.fields.findIndex((f) => f.name === "y");
    if (x < 0 || y < 0) return null;
    const fx = t.fields[x]!;
    const fy = t.fields[y]!;
    const step = (f: typeof fx) => (f.type === "fixed" ? f.step / 1024 : f.step);
    const min = (f: typeof fx) => (f.type === "fixed" ? f.min / 1024 : f.min);
    return { x, y, xMin: min(fx), xStep: step(fx), yMin: min(fy), yStep: step(fy) };
  });
}

/** The typed arrays of a scene: what goes from the decoding worker to the page (transferred, not copied). */
export interface SceneArrays {
  ids: Float64Array;
  xs: Float32Array;
  ys: Float32Array;
  templates: Uint16Array;
  slots: Uint16Array;
  flags: Uint8Array;
  cells: Float64Array;
}

/** A scene as a message: its numbers and its arrays (their buffers in the transfer list). */
export interface SceneMessage {
  serial: number;
  count: number;
  tick: number;
  perSlot: number[];
  arrays: SceneArrays;
}

export class Scene {
  /** Which build this is (the decoding worker numbers them, to find a build's entries again). */
  serial = 0;
  count = 0;
  /** The snapshot (or history) tick the scene shows. */
  tick = 0;
  ids = new Float64Array(0);
  xs = new Float32Array(0);
  ys = new Float32Array(0);
  /** Template index (in the handshake's list; 65535 when unknown). */
  templates = new Uint16Array(0);
  /** Colour slot (ColourTable). */
  slots = new Uint16Array(0);
  flags = new Uint8Array(0);
  /** The key of the cell holding the entity (-1: a handed entity, or not known). */
  cells = new Float64Array(0);
  /** The SDK's entries, for decoding a selected entity's fields (empty for history scenes). */
  entries: Entry[] = [];
  /** Counts of each colour slot. */
  perSlot: number[] = [];

  /** Room for `n` entities (contents kept up to `count`). */
  reserve(n: number): void {
    if (n <= this.ids.length) return;
    const size = Math.max(n, Math.ceil(this.ids.length * 1.5), 1024);
    const grow = <T extends Float64Array | Float32Array | Uint16Array | Uint8Array>(a: T, make: (n: number) => T): T => {
      const b = make(size);
      // (Arrays sent to the page are detached: nothing to keep then, count is 0.)
      if (this.count > 0) b.set(a.subarray(0, this.count) as never);
      return b;
    };
    this.ids = grow(this.ids, (k) => new Float64Array(k));
    this.xs = grow(this.xs, (k) => new Float32Array(k));
    this.ys = grow(this.ys, (k) => new Float32Array(k));
    this.templates = grow(this.templates, (k) => new Uint16Array(k));
    this.slots = grow(this.slots, (k) => new Uint16Array(k));
    this.flags = grow(this.flags, (k) => new Uint8Array(k));
    this.cells = grow(this.cells, (k) => new Float64Array(k));
  }

  clear(): void {
    this.count = 0;
    this.entries = [];
    this.perSlot = [];
  }

  get arrays(): SceneArrays {
    const { ids, xs, ys, templates, slots, flags, cells } = this;
    return { ids, xs, ys, templates, slots, flags, cells };
  }

  /** Takes arrays (returned by the page) to fill next: their contents are not kept. */
  adopt(a: SceneArrays): void {
    const n = a.ids.length;
    if (n === 0 || [a.xs, a.ys, a.templates, a.slots, a.flags, a.cells].some((x) => x.length !== n)) return;
    Object.assign(this, a);
    this.count = 0;
  }

  /** The scene as a message, and the buffers to transfer with it (this scene's arrays are then unusable). */
  toMessage(): { message: SceneMessage; transfer: ArrayBuffer[] } {
    const arrays = this.arrays;
    const transfer = transferList(arrays);
    return { message: { serial: this.serial, count: this.count, tick: this.tick, perSlot: this.perSlot, arrays }, transfer };
  }

  static fromMessage(m: SceneMessage): Scene {
    const s = new Scene();
    Object.assign(s, m.arrays);
    s.serial = m.serial;
    s.count = m.count;
    s.tick = m.tick;
    s.perSlot = m.perSlot;
    return s;
  }

  /** The index of an entity id, or -1. */
  indexOf(id: number): number {
    const ids = this.ids;
    for (let i = 0, n = this.count; i < n; i++) if (ids[i] === id) return i;
    return -1;
  }
}

/** The buffers of a scene's arrays: the transfer list of a message carrying them. */
export function transferList(arrays: SceneArrays): ArrayBuffer[] {
  return Object.values(arrays).map((a) => (a as Float64Array).buffer as ArrayBuffer);
}

interface Candidate {
  entry: Entry;
  rank: number;
  key: number;
  flags: number;
}

/**
 * Fills `scene` with every entity of `view` (WorldView.entities() resolution) that has a
 * position. The cells a snapshot fully updated (region keys, not held back) are at the view's
 * tick, the newest: their copy of an id always wins. Only band cells, held-back cells and
 * handed entities can hold a copy that another replaces; those few are resolved first, by the
 * SDK's rule (newest tick; at the same tick a region cell over a band cell, then the larger key;
 * a handed entity last).
 */
export function fromView(
  scene: Scene,
  view: WorldView,
  layouts: ReadonlyArray<PositionLayout | null>,
  colours: ColourTable,
): Scene {
  scene.clear();
  scene.tick = view.tick;
  const space = view.space ?? 0;
  const anyHeld = view.heldBack.length > 0;
  const special = new Map<number, Candidate>();
  const offer = (c: Candidate) => {
    const old = special.get(c.entry.id);
    if (old === undefined || c.rank > old.rank || (c.rank === old.rank && c.key > old.key)) special.set(c.entry.id, c);
  };
  // (WorldView drops a handed entity once a cell holds its id: these are never in a cell.)
  for (const h of view.handed.values()) offer({ entry: h.entry, rank: -1, key: -1, flags: HANDED });
  let total = 0;
  for (const [key, entries] of view.cells) {
    total += entries.length;
    const band = space > 0 && key >= space;
    const held = anyHeld && view.isHeldBack(key);
    if (!band && !held) continue;
    const rank = (view.cellTick(key) ?? 0) * 2 + (band ? 0 : 1);
    const flags = (band ? BAND : 0) | (held ? STALE : 0);
    for (const e of entries) offer({ entry: e, rank, key, flags });
  }
  scene.reserve(total + view.handed.size);
  const perSlot = new Array<number>(colours.size).fill(0);
  const any = special.size > 0;
  for (const [key, entries] of view.cells) {
    if ((space > 0 && key >= space) || (anyHeld && view.isHeldBack(key))) continue;
    for (const e of entries) {
      if (any) special.delete(e.id);
      add(scene, e, key, 0, layouts, colours, perSlot);
    }
  }
  for (const c of special.values()) add(scene, c.entry, c.key, c.flags, layouts, colours, perSlot);
  scene.perSlot = perSlot;
  return scene;
}

function add(
  scene: Scene,
  e: Entry,
  key: number,
  flags: number,
  layouts: ReadonlyArray<PositionLayout | null>,
  colours: ColourTable,
  perSlot: number[],
): void {
  // (An entity without a position is not drawn.)
  const l = layouts[e.template];
  if (l === undefined || l === null) return;
  const k = colours.kind[e.template] ?? -1;
  const slot = colours.slot(e.template, k < 0 ? 0 : e.q[k]!);
  const i = put(scene, e.id, l.xMin + e.q[l.x]! * l.xStep, l.yMin + e.q[l.y]! * l.yStep, e.template, slot, flags, key, perSlot);
  scene.entries[i] = e;
}

/** Appends an entity to a scene (room reserved), counting its colour slot: its index. */
function put(scene: Scene, id: number, x: number, y: number, template: number, slot: number, flags: number, key: number, perSlot: number[]): number {
  const i = scene.count++;
  scene.ids[i] = id;
  scene.xs[i] = x;
  scene.ys[i] = y;
  scene.templates[i] = template;
  scene.slots[i] = slot;
  perSlot[slot] = (perSlot[slot] ?? 0) + 1;
  scene.flags[i] = flags;
  scene.cells[i] = key;
  return i;
}

/** An entity of a zone's history (the operator API's `history/state`): metres. */
export interface HistoryEntity {
  id: number;
  template: string | number;
  x: number;
  y: number;
  kind?: string | number | null;
}

/**
 * Fills `scene` with a tick of a zone's history. Templates may be given by name or by index
 * (in the handshake's list); a kind by its value or index.
 */
export function fromHistory(
  scene: Scene,
  tick: number,
  entities: readonly HistoryEntity[],
  templates: readonly TemplateSchema[],
  colours: ColourTable,
): Scene {
  scene.clear();
  scene.tick = tick;
  scene.reserve(entities.length);
  const byName = new Map(templates.map((t, i) => [t.name, i]));
  const perSlot = new Array<number>(colours.size).fill(0);
  for (const e of entities) {
    if (typeof e.x !== "number" || typeof e.y !== "number") continue;
    const t = typeof e.template === "number" ? e.template : (byName.get(e.template) ?? -1);
    let slot = colours.unknown;
    if (t >= 0 && t < templates.length) {
      const k = colours.kind[t] ?? -1;
      slot = colours.slot(t, k < 0 ? 0 : kindIndex(templates[t]!.fields[k]!.values ?? [], e.kind));
    }
    put(scene, e.id, e.x, e.y, t >= 0 ? t : 65535, slot, 0, -1, perSlot);
  }
  scene.perSlot = perSlot;
  return scene;
}

/** The index of a kind among an enum's values: the value itself, else an index, else 0. */
function kindIndex(values: ReadonlyArray<string | number | boolean>, kind: unknown): number {
  if (kind === undefined || kind === null) return 0;
  const i = values.findIndex((v) => v === kind || String(v) === String(kind));
  if (i >= 0) return i;
  return typeof kind === "number" && Number.isInteger(kind) && kind >= 0 && kind < values.length ? kind : 0;
}

/**
 * The entity nearest to a world point within `radius` metres (the index in the scene), or -1.
 * Of two at the same distance, the later one (drawn on top).
 */
export function nearest(scene: Scene, x: number, y: number, radius: number): number {
  let best = -1;
  let bestD = radius * radius;
  const xs = scene.xs;
  const ys = scene.ys;
  for (let i = 0, n = scene.count; i < n; i++) {
    const dx = xs[i]! - x;
    const dy = ys[i]! - y;
    const d = dx * dx + dy * dy;
    if (d <= bestD) {
      bestD = d;
      best = i;
    }
  }
  return best;
}
