import { ByteReader, ByteWriter, unzigzag } from "./bytes.js";
import type { FieldSchema, FieldType, Result, TemplateSchema } from "./template.js";

/** The protocol version this client speaks. */
export const PROTOCOL_VERSION = 2;

/**
 * An extension of a HANDSHAKE or a SNAPSHOT (room for later protocol versions): its type and
 * bytes. A client skips the types it does not know.
 */
export interface Extension {
  type: number;
  bytes: Uint8Array;
}

/** Messages the client sends. */
export type ClientMessage =
  | { type: "hello"; version: number; token: string }
  | { type: "input"; seq: number; ack: number; payload: Uint8Array }
  | { type: "client_event"; seq: number; payload: Uint8Array }
  | { type: "ping"; client_time: number }
  | { type: "resync"; reason: number; last_tick: number }
  /** A backend call: `body` is the JSON text of the arguments, an object ("" reads as `{}`). */
  | { type: "request"; id: number; method: string; body: string }
  /** Bytes for a match the player joined. */
  | { type: "match_send"; match_id: string; op: number; payload: Uint8Array };

/** One message of a MATCH_DATA frame: `sender` is a user id, "" for the server. */
export interface MatchMessage {
  op: number;
  sender: string;
  payload: Uint8Array;
}

/** Messages the server sends (snapshots come with interest management). */
export type ServerMessage =
  | {
      type: "handshake";
      version: number;
      tick_rate: number;
      entity_id: number;
      width: number;
      height: number;
      cell_size: number;
      /** The zone's grid: a cell's key is (row + 1) * (cols + 2) + col + 1. */
      cols: number;
      rows: number;
      templates: TemplateSchema[];
      /** The layout of the zone's typed inputs (null: the zone reads raw bytes). */
      input: TemplateSchema | null;
      extensions: Extension[];
    }
  | { type: "event"; seq: number; payload: Uint8Array }
  | { type: "pong"; client_time: number; server_tick: number }
  | { type: "error"; code: number; message: string }
  /** The answer to a REQUEST: an HTTP-like status, `body` the JSON text of the result or of `{error, message}`. */
  | { type: "response"; id: number; status: number; body: string }
  /** A tick's messages of a match for this player, in order. */
  | { type: "match_data"; match_id: string; messages: MatchMessage[] }
  /** A notification: `body` is JSON text. */
  | { type: "notify"; kind: string; body: string };

/** Encodes a client message. */
export function encodeClientMessage(m: ClientMessage): Uint8Array {
  const w = new ByteWriter();
  switch (m.type) {
    case "hello":
      return w.u8(0x40).u16(m.version).string(m.token).toBytes();
    case "input":
      return w.u8(0x41).varint(m.seq).varint(m.ack).bytes(m.payload).toBytes();
    case "client_event":
      return w.u8(0x42).varint(m.seq).bytes(m.payload).toBytes();
    case "ping":
      return w.u8(0x43).varint(m.client_time).toBytes();
    case "resync":
      return w.u8(0x44).u8(m.reason).varint(m.last_tick).toBytes();
    case "request":
      return w.u8(0x45).varint(m.id).string(m.method).bytes(utf8.encode(m.body)).toBytes();
    case "match_send":
      return w.u8(0x46).string(m.match_id).varint(m.op).bytes(m.payload).toBytes();
  }
}

const utf8 = new TextEncoder();
const text = (b: Uint8Array): string => new TextDecoder().decode(b);

const FIELD_TYPES: FieldType[] = ["uint", "int", "fixed", "angle", "enum", "bool"];
const fail = <T>(error: string): Result<T> => ({ ok: false, error });

/**
 * Decodes a server message; never throws. Errors are docs/protocol.md's names ('What a decoder
 * refuses'): `truncated`, `trailing_bytes`, `varint_too_long`, `string_too_long`, `empty`,
 * `unknown_opcode N`, and in a HANDSHAKE `bad_input_layout`, `unknown_field_type T`,
 * `bad_field_bits`, `bad_field_step`, `bad_enum_values`, `bad_enum_value`, `bad_template`.
 * A RESPONSE's and a NOTIFY's JSON body is the rest of the message, as text (not parsed here).
 */
export function decodeServerMessage(bytes: Uint8Array): Result<ServerMessage> {
  const r = new ByteReader(bytes);
  const op = r.u8();
  switch (op) {
    case undefined:
      return fail("empty");
    case 0x01:
      return handshake(r);
    case 0x03: {
      const seq = r.varint();
      if (seq === undefined) return fail(r.error);
      return { ok: true, value: { type: "event", seq, payload: r.rest() } };
    }
    case 0x04: {
      const client_time = r.varint();
      const server_tick = r.varint();
      if (client_time === undefined || server_tick === undefined) return fail(r.error);
      if (r.remaining > 0) return fail("trailing_bytes");
      return { ok: true, value: { type: "pong", client_time, server_tick } };
    }
    case 0x05: {
      const code = r.u16();
      const message = code === undefined ? undefined : r.string();
      if (code === undefined || message === undefined) return fail(r.error);
      if (r.remaining > 0) return fail("trailing_bytes");
      return { ok: true, value: { type: "error", code, message } };
    }
    case 0x06: {
      const id = r.varint();
      const status = id === undefined ? undefined : r.u16();
      if (id === undefined || status === undefined) return fail(r.error);
      return { ok: true, value: { type: "response", id, status, body: text(r.rest()) } };
    }
    case 0x07:
      return matchData(r);
    case 0x08: {
      const kind = r.string(64);
      if (kind === undefined) return fail(r.error);
      return { ok: true, value: { type: "notify", kind, body: text(r.rest()) } };
    }
    default:
      return fail(`unknown_opcode ${op}`);
  }
}

/** A MATCH_DATA: match id (at most 128 bytes), a count, then op, sender (at most 255 bytes) and payload each. */
function matchData(r: ByteReader): Result<ServerMessage> {
  const match_id = r.string(128);
  const n = match_id === undefined ? undefined : r.varint();
  if (match_id === undefined || n === undefined) return fail(r.error);
  const messages: MatchMessage[] = [];
  for (let i = 0; i < n; i++) {
    const op = r.varint();
    const sender = op === undefined ? undefined : r.string(255);
    const length = sender === undefined ? undefined : r.varint();
    if (op === undefined || sender === undefined || length === undefined) return fail(r.error);
    if (length > 2 ** 24) return fail("string_too_long");
    const payload = r.bytesOf(length);
    if (payload === undefined) return fail(r.error);
    messages.push({ op, sender, payload });
  }
  if (r.remaining > 0) return fail("trailing_bytes");
  return { ok: true, value: { type: "match_data", match_id, messages } };
}

function handshake(r: ByteReader): Result<ServerMessage> {
  const version = r.u16();
  const tick_rate = r.u16();
  const entity_id = r.varint();
  const width = r.varint();
  const height = r.varint();
  const cell_size = r.varint();
  const cols = r.varint();
  const rows = r.varint();
  const count = r.u8();
  if ([version, tick_rate, entity_id, width, height, cell_size, cols, rows, count].includes(undefined)) return fail(r.error);
  const templates: TemplateSchema[] = [];
  for (let i = 0; i < count!; i++) {
    const t = template(r);
    if (!t.ok) return t;
    templates.push(t.value);
  }
  let input: TemplateSchema | null = null;
  const tag = r.u8();
  if (tag === undefined) return fail(r.error);
  if (tag === 1) {
    const t = template(r);
    if (!t.ok) return t;
    input = t.value;
  } else if (tag !== 0) return fail("bad_input_layout");
  const extensions = readExtensions(r);
  if (!extensions.ok) return extensions;
  if (r.remaining > 0) return fail("trailing_bytes");
  return {
    ok: true,
    value: {
      type: "handshake",
      version: version!,
      tick_rate: tick_rate!,
      entity_id: entity_id!,
      width: width!,
      height: height!,
      cell_size: cell_size!,
      cols: cols!,
      rows: rows!,
      templates,
      input,
      extensions: extensions.value,
    },
  };
}

function template(r: ByteReader): Result<TemplateSchema> {
  const id = r.u8();
  const name = id === undefined ? undefined : r.string(255);
  const n = name === undefined ? undefined : r.u8();
  if (id === undefined || name === undefined || n === undefined) return fail(r.error);
  const fields: FieldSchema[] = [];
  for (let i = 0; i < n; i++) {
    const f = field(r);
    if (!f.ok) return f;
    fields.push(f.value);
  }
  if (fields.length === 0) return fail("bad_template");
  return { ok: true, value: { id, name, fields } };
}

/**
 * A field of a template, read in the order of the Elixir decoder (so both answer the same
 * reason): name, type, bits and diff_bits, min, step, an enum's values, then the checks.
 */
function field(r: ByteReader): Result<FieldSchema> {
  const name = r.string(255);
  if (name === undefined) return fail(r.error);
  if (r.remaining < 3) return fail("truncated");
  const type = r.u8()!;
  const bits = r.u8()!;
  const diff_bits = r.u8()!;
  const ftype = FIELD_TYPES[type];
  if (ftype === undefined) return fail(`unknown_field_type ${type}`);
  const min = r.varint();
  const step = min === undefined ? undefined : r.varint();
  if (min === undefined || step === undefined) return fail(r.error);
  let values: Array<string | number | boolean> | null = null;
  if (ftype === "bool") values = [false, true];
  if (ftype === "enum") {
    const count = r.u8();
    if (count === undefined) return fail(r.error);
    values = [];
    for (let j = 0; j < count; j++) {
      const tag = r.u8();
      if (tag === undefined) return fail(r.error);
      if (tag === 0) {
        const s = r.string(255);
        if (s === undefined) return fail(r.error);
        values.push(s);
      } else if (tag === 1) {
        const u = r.varint();
        if (u === undefined) return fail(r.error);
        values.push(unzigzag(u));
      } else return fail("bad_enum_value");
    }
  }
  if (bits < 1 || bits > 53 || diff_bits > bits) return fail("bad_field_bits");
  // An enum or a bool always travels whole in a delta.
  if ((ftype === "enum" || ftype === "bool") && diff_bits !== 0) return fail("bad_field_bits");
  if (ftype === "bool" && bits !== 1) return fail("bad_field_bits");
  if (step < 1) return fail("bad_field_step");
  if (ftype === "enum" && (values!.length < 2 || values!.length > 2 ** bits)) return fail("bad_enum_values");
  return { ok: true, value: { name, type: ftype, bits, diff_bits, min: unzigzag(min), step, values } };
}

/**
 * Reads extensions: a varint count, then per extension its type (varint), byte length (varint,
 * at most 65,536) and bytes. Never throws.
 */
export function readExtensions(r: ByteReader): Result<Extension[]> {
  const n = r.varint();
  if (n === undefined) return fail(r.error);
  const out: Extension[] = [];
  for (let i = 0; i < n; i++) {
    const type = r.varint();
    const length = r.varint();
    if (type === undefined || length === undefined) return fail(r.error);
    if (length > 65_536) return fail("string_too_long");
    const bytes = r.bytesOf(length);
    if (bytes === undefined) return fail(r.error);
    out.push({ type, bytes });
  }
  return { ok: true, value: out };
}
