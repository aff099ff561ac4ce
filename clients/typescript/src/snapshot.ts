import { BitReader } from "./bits.js";
import { ByteReader } from "./bytes.js";
import { readExtensions } from "./messages.js";
import { decodeDelta, decodeKeyframe, type Result, type TemplateSchema } from "./template.js";

/** An entity the client holds: id, template index (in the handshake's list) and quantized values. */
export interface Entry {
  id: number;
  template: number;
  q: number[];
}

const fail = <T>(error: string): Result<T> => ({ ok: false, error });

/** Bits of a template index for `count` templates. */
export const indexBits = (count: number): number => (count <= 1 ? 0 : Math.floor(Math.log2(count - 1)) + 1);

/** A run of cells `[first key, count]` a snapshot held back. */
export type Run = readonly [first: number, count: number];

/** An entity handed to another zone (op `11`): as it was when handed, and the snapshot's tick. */
export interface Handed {
  entry: Entry;
  tick: number;
}

/** Ticks a handed entity is shown, at most, while no cell holds its id (docs/protocol.md). */
const HANDED_TICKS = 8;

/**
 * What a client holds: its cells (key → entries sorted by id) and the tick each cell is at,
 * updated by snapshots (docs/protocol.md, 'Snapshots'). A snapshot applies completely or not
 * at all: on an error the view is unchanged and the client asks for a resync.
 *
 * Every cell held after a snapshot is at that snapshot's tick, except the cells the snapshot
 * lists as held back (the server's byte budget): those keep the tick they were at until their
 * blocks come. An entity that moved meanwhile may then be in two cells: the copy in the cell at
 * the newest tick is the current one (`entities()`).
 *
 * In a world of zones (docs/protocol.md, "A world of zones"): keys at or past `space` are band
 * keys (a zone's cell in its neighbour's region, for its entities inside the hysteresis band),
 * and an entity a zone handed to another (op `11`) is kept in `handed`, shown as it was until
 * a cell holds its id, at most 8 ticks.
 */
export class WorldView {
  readonly cells = new Map<number, Entry[]>();
  /** The tick each cell held is at (key → tick). */
  readonly ticks = new Map<number, number>();
  tick = 0;
  /** The newest input sequence number the server had consumed at `tick` (0: none). */
  inputAck = 0;
  /** The runs of cells the newest snapshot held back (sorted by key; cells not held included). */
  heldBack: readonly Run[] = [];
  /**
   * The send interval the server announced (SNAPSHOT extension 1): ticks between two snapshots
   * of this client; 1 until a snapshot says otherwise. An overloaded server lowers every
   * client's snapshot rate this way (docs/protocol.md, "Extensions").
   */
  sendInterval = 1;
  /**
   * The grid's key space, `(cols + 2) * (rows + 2)` (the HANDSHAKE's grid): keys at or past it
   * are band keys. Undefined (or 0): every key is a region key (a world of one zone has no band
   * keys). The connection sets it from the HANDSHAKE.
   */
  space: number | undefined = undefined;
  /**
   * The entities handed to another zone (op `11`) that no cell holds yet, by id: the entry as
   * it was and the tick of the snapshot that handed it. One is dropped when a cell holds its id
   * or when more than 8 ticks passed (its new zone dropped it before publishing it); baseline 0
   * starts from none.
   */
  readonly handed = new Map<number, Handed>();

  /** The tick a cell held is at (undefined: the cell is not held). */
  cellTick(key: number): number | undefined {
    return this.ticks.get(key);
  }

  /** Whether the newest snapshot held back a cell (its blocks wait; it keeps its tick). */
  isHeldBack(key: number): boolean {
    return inRuns(this.heldBack, key);
  }

  /**
   * Every entity held, by id. An entity in two cells (it moved while a cell was held back) is
   * the copy of the cell at the newest tick; of two copies at the same tick, the region cell's
   * (a key below `space`; the other is a zone's band copy of an entity its neighbour just
   * took). A handed entity no cell holds (`handed`) is there as it was.
   */
  entities(): Map<number, Entry> {
    return this.resolve().entities;
  }

  /**
   * The key of the cell holding each entity's current copy (as `entities()` resolves it), by id.
   * A handed entity no cell holds has no cell: it is not in this map (it is in `entities()`).
   */
  entityCells(): Map<number, number> {
    return this.resolve().cells;
  }

  /**
   * Both `entities()` and `entityCells()` from one walk of the cells: the handed entities
   * first, then the cells in `byTick()` order, later copies of an id replacing earlier ones.
   */
  resolve(): { entities: Map<number, Entry>; cells: Map<number, number> } {
    const entities = new Map<number, Entry>();
    const cells = new Map<number, number>();
    for (const [id, h] of this.handed) entities.set(id, h.entry);
    for (const key of this.byTick())
      for (const e of this.cells.get(key)!) {
        entities.set(e.id, e);
        cells.set(e.id, key);
      }
    return { entities, cells };
  }

  /**
   * The keys held, oldest tick first, band cells before region cells at the same tick, then by
   * key: later copies of an id win.
   */
  private byTick(): number[] {
    const keys = [...this.cells.keys()];
    const tick = (k: number) => this.ticks.get(k) ?? 0;
    const space = this.space;
    const region = (k: number) => (!space || k < space ? 1 : 0);
    return keys.sort((a, b) => tick(a) - tick(b) || region(a) - region(b) || a - b);
  }

  /**
   * Applies a snapshot message (opcode 0x02). Blocks apply in order (several blocks of one cell
   * follow each other); a cell not held is empty (a delta block for it has arrivals only; a
   * cell leaving that is not held is nothing to drop). Baseline 0 starts from an empty view;
   * any other baseline must be the view's tick, else the error is `unknown_baseline`. The runs
   * of cells held back follow, then extensions (extension 1, the send interval, is kept; others
   * are skipped). The entities handed to another zone (op `11`) join `handed` at this
   * snapshot's tick; then `handed` loses every id a cell now holds and every entry of more than
   * 8 ticks ago.
   *
   * Errors (docs/protocol.md, 'What a decoder refuses'), the view then unchanged (`handed`
   * included): `truncated`, `trailing_bytes`, `varint_too_long`, `string_too_long` (an
   * extension over 64 KiB), `not_a_snapshot`, `unknown_baseline`, `bad_block`, `bad_id` (an id
   * gap of 0, an arrival of an id the cell still holds), `bad_template_index`,
   * `bad_enum_index`, `out_of_range`, `bad_run`, `bad_send_interval`.
   */
  apply(bytes: Uint8Array, templates: TemplateSchema[]): Result<number> {
    const r = new ByteReader(bytes);
    if (r.u8() !== 0x02) return fail("not_a_snapshot");
    const tick = r.varint();
    const baseline = r.varint();
    if (tick === undefined || baseline === undefined) return fail(r.error);
    // Baseline 0: start from nothing; otherwise the view must hold the baseline.
    if (baseline !== 0 && baseline !== this.tick) return fail("unknown_baseline");
    const ack = r.varint();
    const n = r.varint();
    if (ack === undefined || n === undefined) return fail(r.error);
    const held = baseline === 0 ? new Map<number, Entry[]>() : this.cells;
    const heldTicks = baseline === 0 ? new Map<number, number>() : this.ticks;
    const tb = indexBits(templates.length);
    const changed = new Map<number, Entry[]>();
    // The entities handed to another zone (op 11) in this snapshot, in block order.
    const out: Entry[] = [];
    for (let i = 0; i < n; i++) {
      const head = r.varint();
      if (head === undefined) return fail(r.error);
      // Kind in the low two bits: 0 keyframe, 1 delta without arrivals (no count), 3 delta with.
      const kind = head % 4;
      if (kind === 2) return fail("bad_block");
      const count = kind === 1 ? 0 : r.varint();
      if (count === undefined) return fail(r.error);
      const key = Math.floor(head / 4);
      const bits = new BitReader(bytes, bytes.length * 8, r.offset * 8);
      const entries =
        kind === 0
          ? readKeyframes(bits, count, tb, templates)
          : readDelta(bits, changed.get(key) ?? held.get(key) ?? [], count, tb, templates, out);
      if (!entries.ok) return entries;
      changed.set(key, entries.value);
      // Skip to the byte after the block's bits.
      const consumed = Math.ceil((bits.position - r.offset * 8) / 8);
      if (r.bytesOf(consumed) === undefined) return fail("truncated");
    }
    const left = r.varint();
    if (left === undefined) return fail(r.error);
    const gone: number[] = [];
    for (let i = 0; i < left; i++) {
      const key = r.varint();
      if (key === undefined) return fail(r.error);
      gone.push(key);
    }
    const runs = readRuns(r);
    if (!runs.ok) return runs;
    const extensions = readExtensions(r);
    if (!extensions.ok) return extensions;
    if (r.remaining > 0) return fail("trailing_bytes");
    let interval = this.sendInterval;
    for (const e of extensions.value) {
      if (e.type !== 1) continue;
      const k = readSendInterval(e.bytes);
      if (k === undefined) return fail("bad_send_interval");
      interval = k;
    }

    // Everything read: apply.
    if (baseline === 0) this.cells.clear();
    for (const [key, entries] of changed) {
      if (entries.length === 0) this.cells.delete(key);
      else this.cells.set(key, entries);
    }
    for (const key of gone) this.cells.delete(key);
    const ticks = new Map<number, number>();
    for (const key of this.cells.keys())
      ticks.set(key, inRuns(runs.value, key) ? (heldTicks.get(key) ?? 0) : tick);
    this.ticks.clear();
    for (const [key, t] of ticks) this.ticks.set(key, t);
    const handed = handedAfter(baseline === 0 ? new Map() : this.handed, out, this.cells, tick);
    this.handed.clear();
    for (const [id, h] of handed) this.handed.set(id, h);
    this.heldBack = runs.value;
    this.tick = tick;
    this.inputAck = ack;
    this.sendInterval = interval;
    return { ok: true, value: tick };
  }
}

/**
 * The handed entities after a snapshot of `tick`: those held before (`old`), and those this
 * snapshot handed (`out`, at `tick`; of an id handed twice, its first), less those whose id a
 * cell holds and those handed more than 8 ticks ago.
 */
function handedAfter(old: Map<number, Handed>, out: Entry[], cells: Map<number, Entry[]>, tick: number): Map<number, Handed> {
  if (old.size === 0 && out.length === 0) return new Map();
  const fresh = new Map<number, Handed>();
  for (const e of out) if (!fresh.has(e.id)) fresh.set(e.id, { entry: e, tick });
  const all = new Map(old);
  for (const [id, h] of fresh) all.set(id, h);
  for (const [id, h] of all) if (h.tick + HANDED_TICKS < tick) all.delete(id);
  if (all.size > 0) for (const entries of cells.values()) for (const e of entries) all.delete(e.id);
  return all;
}

/** Extension 1's bytes: exactly one varint of at least 1 (undefined otherwise). */
function readSendInterval(bytes: Uint8Array): number | undefined {
  const r = new ByteReader(bytes);
  const k = r.varint();
  return k !== undefined && k >= 1 && r.remaining === 0 ? k : undefined;
}

/**
 * The runs of cells held back: a varint count, then per run the gap from the end of the
 * previous run (from key 0 for the first) and the cell count (1..65,536), varints.
 */
function readRuns(r: ByteReader): Result<Run[]> {
  const n = r.varint();
  if (n === undefined) return fail(r.error);
  const runs: Run[] = [];
  let next = 0;
  for (let i = 0; i < n; i++) {
    const gap = r.varint();
    const count = r.varint();
    if (gap === undefined || count === undefined) return fail(r.error);
    if (count < 1 || count > 65_536) return fail("bad_run");
    const first = next + gap;
    if (!Number.isSafeInteger(first + count)) return fail("bad_run");
    runs.push([first, count]);
    next = first + count;
  }
  return { ok: true, value: runs };
}

/** Whether `key` is in one of `runs` (sorted by key, not overlapping). */
function inRuns(runs: readonly Run[], key: number): boolean {
  let lo = 0;
  let hi = runs.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const [first, count] = runs[mid]!;
    if (key < first) hi = mid - 1;
    else if (key >= first + count) lo = mid + 1;
    else return true;
  }
  return false;
}

/**
 * A bit varint (an id gap): groups of a continuation bit and 7 value bits, low group first, at
 * most 8 groups (`varint_too_long` past them, or for a value of 2^53 and more, which a number
 * does not hold exactly).
 */
function readVbits(r: BitReader): Result<number> {
  let value = 0;
  for (let shift = 0; shift <= 49; shift += 7) {
    const more = r.uint(1);
    const v = r.uint(7);
    if (more === undefined || v === undefined) return fail("truncated");
    value += v * 2 ** shift;
    if (more === 0) return value <= Number.MAX_SAFE_INTEGER ? { ok: true, value } : fail("varint_too_long");
  }
  return fail("varint_too_long");
}

/**
 * Entities as a keyframe block lists them (and a delta block its arrivals): per entity the id
 * gap from the previous one (from 0 for the first; at least 1, else `bad_id`), the template
 * index and the template keyframe.
 */
function readKeyframes(r: BitReader, count: number, tb: number, templates: TemplateSchema[]): Result<Entry[]> {
  const out: Entry[] = [];
  let id = 0;
  for (let i = 0; i < count; i++) {
    const gap = readVbits(r);
    if (!gap.ok) return gap;
    if (gap.value === 0) return fail("bad_id");
    id += gap.value;
    if (!Number.isSafeInteger(id)) return fail("bad_id");
    const ti = r.uint(tb);
    if (ti === undefined) return fail("truncated");
    const t = templates[ti];
    if (t === undefined) return fail("bad_template_index");
    const q = decodeKeyframe(t, r);
    if (!q.ok) return q;
    out.push({ id, template: ti, q: q.value });
  }
  return { ok: true, value: out };
}

/**
 * A delta block's bits against the entities the client holds in the cell: 2 bits per entity
 * (`00` unchanged, `01` changed + template delta, `10` left, `11` left, handed to another zone:
 * pushed to `handed` as it was), then the arrivals, none of which may be an id the cell still
 * holds (`bad_id`; an entity whose template changes leaves with `10` and arrives again).
 */
function readDelta(r: BitReader, old: Entry[], arrivals: number, tb: number, templates: TemplateSchema[], handed: Entry[]): Result<Entry[]> {
  const kept: Entry[] = [];
  for (const e of old) {
    const op = r.uint(2);
    if (op === undefined) return fail("truncated");
    if (op === 0) kept.push(e);
    else if (op === 1) {
      const q = decodeDelta(templates[e.template]!, e.q, r);
      if (!q.ok) return q;
      kept.push({ id: e.id, template: e.template, q: q.value });
    } else if (op === 3) handed.push(e);
  }
  const arrived = readKeyframes(r, arrivals, tb, templates);
  if (!arrived.ok) return arrived;
  // Both lists are sorted by id: merge them.
  const out: Entry[] = [];
  let i = 0;
  let j = 0;
  while (i < kept.length || j < arrived.value.length) {
    const a = kept[i];
    const b = arrived.value[j];
    if (a !== undefined && b !== undefined && a.id === b.id) return fail("bad_id");
    if (b === undefined || (a !== undefined && a.id < b.id)) {
      out.push(a!);
      i++;
    } else {
      out.push(b);
      j++;
    }
  }
  return { ok: true, value: out };
}
