// Test-only encoders of server messages (the SDK only decodes them) and a scriptable WebSocket.
import { BitWriter, ByteReader, ByteWriter, zigzag, type FieldSchema, type TemplateSchema } from "../src/protocol.js";

/** The protocol's bit varint: groups of a continuation bit and 7 value bits, low group first. */
function vbits(w: BitWriter, v: number): BitWriter {
  do {
    const low = v % 128;
    v = Math.floor(v / 128);
    w.uint(1, v > 0 ? 1 : 0).uint(7, low);
  } while (v > 0);
  return w;
}

const field = (name: string, type: FieldSchema["type"], bits: number, extra: Partial<FieldSchema> = {}): FieldSchema => ({
  name,
  type,
  bits,
  min: 0,
  step: 1,
  diff_bits: 0,
  values: type === "bool" ? [false, true] : null,
  ...extra,
});

/** The goblin world's templates (Goblins.Wire): positions at 1/64 m (16 units) over 16 km. */
export const GOBLIN: TemplateSchema = {
  id: 1,
  name: "goblin",
  fields: [
    field("x", "fixed", 20, { step: 16, diff_bits: 5 }),
    field("y", "fixed", 20, { step: 16, diff_bits: 5 }),
    field("heading", "angle", 8, { diff_bits: 3 }),
    field("state", "enum", 2, { values: ["idle", "wander", "flee", "chase"] }),
    field("kind", "enum", 1, { values: ["goblin", "warlord"] }),
  ],
};
export const PLAYER: TemplateSchema = {
  id: 2,
  name: "player",
  fields: [
    field("x", "fixed", 20, { step: 16, diff_bits: 5 }),
    field("y", "fixed", 20, { step: 16, diff_bits: 5 }),
    field("heading", "angle", 8, { diff_bits: 3 }),
  ],
};
export const TEMPLATES = [GOBLIN, PLAYER];
/** A third template (with it, template indexes are 2 bits): an enum of 3 values in 2 bits. */
export const MARKER: TemplateSchema = {
  id: 3,
  name: "marker",
  fields: [field("level", "enum", 2, { values: [-1, 0, 10] }), field("count", "uint", 4)],
};
/** The goblin world's input layout (Goblins.Wire's `input :move`): the stick's axes, -127..127. */
export const MOVE: TemplateSchema = {
  id: 0,
  name: "move",
  fields: [field("mx", "int", 8, { min: -127, diff_bits: 3 }), field("my", "int", 8, { min: -127, diff_bits: 3 })],
};

/** Quantized x or y of a position in metres (1/64 m steps). */
export const qm = (metres: number): number => Math.round(metres * 64);

export function encodeHandshake(h: {
  version?: number;
  tickRate?: number;
  entityId: number;
  width?: number;
  height?: number;
  cellSize?: number;
  cols?: number;
  rows?: number;
  templates?: TemplateSchema[];
  /** The input layout (default none). */
  input?: TemplateSchema | null;
  extensions?: Array<{ type: number; bytes: Uint8Array }>;
}): Uint8Array {
  const templates = h.templates ?? TEMPLATES;
  const w = new ByteWriter()
    .u8(0x01)
    .u16(h.version ?? 2)
    .u16(h.tickRate ?? 30)
    .varint(h.entityId)
    .varint(h.width ?? 316 * 1024)
    .varint(h.height ?? 316 * 1024)
    .varint(h.cellSize ?? 12 * 1024)
    .varint(h.cols ?? 27)
    .varint(h.rows ?? 27)
    .u8(templates.length);
  for (const t of templates) template(w, t);
  if (h.input) template(w.u8(1), h.input);
  else w.u8(0);
  extensions(w, h.extensions ?? []);
  return w.toBytes();
}

function template(w: ByteWriter, t: TemplateSchema): void {
  w.u8(t.id).string(t.name).u8(t.fields.length);
  for (const f of t.fields) {
    w.string(f.name).u8(["uint", "int", "fixed", "angle", "enum", "bool"].indexOf(f.type));
    w.u8(f.bits).u8(f.diff_bits).varint(zigzag(f.min)).varint(f.step);
    if (f.type === "enum") {
      w.u8(f.values!.length);
      for (const v of f.values!) typeof v === "string" ? w.u8(0).string(v) : w.u8(1).varint(zigzag(v as number));
    }
  }
}

function extensions(w: ByteWriter, list: Array<{ type: number; bytes: Uint8Array }>): void {
  w.varint(list.length);
  for (const e of list) w.varint(e.type).varint(e.bytes.length).bytes(e.bytes);
}

export interface TestEntity {
  id: number;
  /** Index in the handshake's templates. */
  template: number;
  q: number[];
}

/** A delta block for `encodeSnapshot`: 2-bit ops for the entities held, then arrivals. */
export interface DeltaBlock {
  key: number;
  /** One op per entity the client holds in the cell, in id order: 0 unchanged, 2 left, 3 handed (to another zone). */
  ops: number[];
  /** Entities arriving, in the order given (ids as given: a repeated id makes a gap of 0). */
  arrivals?: TestEntity[];
}

/** A cell of `encodeSnapshot`: a keyframe block, a delta block, or a block's raw bytes. */
export type TestBlock = { key: number; entities: TestEntity[] } | DeltaBlock | { raw: Uint8Array };

/** The records of entities as a keyframe block (or a delta's arrivals) lists them, ids as given. */
function records(b: BitWriter, entities: TestEntity[], templates: TemplateSchema[]): void {
  const tb = templates.length <= 1 ? 0 : Math.floor(Math.log2(templates.length - 1)) + 1;
  let previous = 0;
  for (const e of entities) {
    vbits(b, e.id - previous).uint(tb, e.template);
    previous = e.id;
    templates[e.template]!.fields.forEach((f, i) => b.uint(f.bits, e.q[i]!));
  }
}

/**
 * A SNAPSHOT of blocks: keyframe blocks (entities sorted by id), delta blocks (ops and
 * arrivals) or raw bytes, in order.
 */
export function encodeSnapshot(s: {
  tick: number;
  baseline?: number;
  ack?: number;
  cells: TestBlock[];
  left?: number[];
  /** Runs of cells held back: [first key, count], sorted. */
  behind?: Array<[number, number]>;
  extensions?: Array<{ type: number; bytes: Uint8Array }>;
  templates?: TemplateSchema[];
}): Uint8Array {
  const templates = s.templates ?? TEMPLATES;
  const w = new ByteWriter().u8(0x02).varint(s.tick).varint(s.baseline ?? 0).varint(s.ack ?? 0).varint(s.cells.length);
  for (const c of s.cells) {
    if ("raw" in c) {
      w.bytes(c.raw);
    } else if ("entities" in c) {
      w.varint(c.key * 4).varint(c.entities.length);
      const b = new BitWriter();
      records(b, [...c.entities].sort((a, b) => a.id - b.id), templates);
      w.bytes(b.toBytes());
    } else {
      const arrivals = c.arrivals ?? [];
      if (arrivals.length === 0) w.varint(c.key * 4 + 1);
      else w.varint(c.key * 4 + 3).varint(arrivals.length);
      const b = new BitWriter();
      for (const op of c.ops) b.uint(2, op);
      records(b, arrivals, templates);
      w.bytes(b.toBytes());
    }
  }
  const left = s.left ?? [];
  w.varint(left.length);
  for (const k of left) w.varint(k);
  const behind = s.behind ?? [];
  w.varint(behind.length);
  let next = 0;
  for (const [first, count] of behind) {
    w.varint(first - next).varint(count);
    next = first + count;
  }
  extensions(w, s.extensions ?? []);
  return w.toBytes();
}

export const pong = (clientTime: number, serverTick: number) => new ByteWriter().u8(0x04).varint(clientTime).varint(serverTick).toBytes();
export const error = (code: number, message: string) => new ByteWriter().u8(0x05).u16(code).string(message).toBytes();
const utf8 = (s: string) => new TextEncoder().encode(s);
/** A RESPONSE: `body` is JSON'd (a string is sent as it is). */
export const response = (id: number, status: number, body: unknown) =>
  new ByteWriter().u8(0x06).varint(id).u16(status).bytes(utf8(typeof body === "string" ? body : JSON.stringify(body))).toBytes();
/** A MATCH_DATA frame: payloads as strings (UTF-8) or bytes. */
export function matchData(matchId: string, messages: Array<{ op: number; sender: string; payload: string | Uint8Array }>): Uint8Array {
  const w = new ByteWriter().u8(0x07).string(matchId).varint(messages.length);
  for (const m of messages) {
    const p = typeof m.payload === "string" ? utf8(m.payload) : m.payload;
    w.varint(m.op).string(m.sender).varint(p.length).bytes(p);
  }
  return w.toBytes();
}
/** A NOTIFY: `body` is JSON'd (a string is sent as it is). */
export const notify = (kind: string, body: unknown) =>
  new ByteWriter().u8(0x08).string(kind).bytes(utf8(typeof body === "string" ? body : JSON.stringify(body))).toBytes();

/** A client message decoded (what the fake server received). */
export type Sent =
  | { type: "hello"; version: number; token: string }
  | { type: "input"; seq: number; ack: number; payload: number[] }
  | { type: "ping"; client_time: number }
  | { type: "resync"; reason: number; last_tick: number }
  /** `body`: the JSON parsed. */
  | { type: "request"; id: number; method: string; body: any }
  | { type: "match_send"; match_id: string; op: number; payload: number[] }
  | { type: "other"; bytes: number[] };

export function decodeClient(bytes: Uint8Array): Sent {
  const r = new ByteReader(bytes);
  switch (r.u8()) {
    case 0x40:
      return { type: "hello", version: r.u16()!, token: r.string()! };
    case 0x41:
      return { type: "input", seq: r.varint()!, ack: r.varint()!, payload: [...r.rest()] };
    case 0x43:
      return { type: "ping", client_time: r.varint()! };
    case 0x44:
      return { type: "resync", reason: r.u8()!, last_tick: r.varint()! };
    case 0x45:
      return { type: "request", id: r.varint()!, method: r.string()!, body: JSON.parse(new TextDecoder().decode(r.rest())) };
    case 0x46:
      return { type: "match_send", match_id: r.string()!, op: r.varint()!, payload: [...r.rest()] };
    default:
      return { type: "other", bytes: [...bytes] };
  }
}

/** A WebSocket the test drives: every instance is recorded; `accept`, `deliver`, `drop` play the server. */
export class FakeSocket {
  static instances: FakeSocket[] = [];
  binaryType = "blob";
  readyState = 0;
  readonly sent: Sent[] = [];
  closedWith: { code?: number; reason?: string } | undefined;
  onopen: ((e: unknown) => void) | null = null;
  onmessage: ((e: { data: unknown }) => void) | null = null;
  onclose: ((e: { code: number; reason: string }) => void) | null = null;
  onerror: ((e: unknown) => void) | null = null;

  constructor(readonly url: string) {
    FakeSocket.instances.push(this);
  }

  static reset(): void {
    FakeSocket.instances = [];
  }

  static last(): FakeSocket {
    return FakeSocket.instances[FakeSocket.instances.length - 1]!;
  }

  send(data: Uint8Array): void {
    if (this.readyState !== 1) throw new Error("not open");
    this.sent.push(decodeClient(data));
  }

  close(code?: number, reason?: string): void {
    this.closedWith = { code, reason };
    this.readyState = 3;
  }

  /** The server accepts the upgrade. */
  accept(): void {
    this.readyState = 1;
    this.onopen?.({});
  }

  /** A binary message from the server (as an ArrayBuffer, binaryType "arraybuffer"). */
  deliver(bytes: Uint8Array): void {
    const copy = bytes.slice();
    this.onmessage?.({ data: copy.buffer });
  }

  /** The server (or the network) closes. */
  drop(code: number, reason = ""): void {
    this.readyState = 3;
    this.onclose?.({ code, reason });
  }

  of<T extends Sent["type"]>(type: T): Array<Extract<Sent, { type: T }>> {
    return this.sent.filter((m): m is Extract<Sent, { type: T }> => m.type === type);
  }
}
