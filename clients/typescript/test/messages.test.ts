import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import {
  ByteWriter,
  PROTOCOL_VERSION,
  decodeServerMessage,
  encodeClientMessage,
  fromHex,
  type ClientMessage,
  type FieldSchema,
  type TemplateSchema,
} from "../src/protocol.js";
import { PROTOCOL_VERSION as MAIN_VERSION } from "../src/index.js";
import { encodeHandshake } from "./helpers.js";

const load = (name: string) =>
  JSON.parse(readFileSync(fileURLToPath(new URL(`../../../protocol/vectors/${name}`, import.meta.url)), "utf8"));
const { messages } = load("messages.json") as { messages: Array<{ message: Record<string, unknown>; hex: string }> };
const { templates, input } = load("templates.json") as { templates: TemplateSchema[]; input: TemplateSchema };

const CLIENT = ["hello", "input", "client_event", "ping", "resync", "request", "match_send"];
// Server messages whose last part is "the rest" (payload or JSON body): cut there, they still decode.
const OPEN_ENDED = ["event", "response", "notify"];
const toHex = (b: Uint8Array) => Buffer.from(b).toString("hex");
const text = (hex: string) => new TextDecoder().decode(fromHex(hex));

// A vector's message in the client's types: byte fields come as *_hex.
function message(m: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(m)) {
    if (k === "payload_hex") out.payload = fromHex(v as string);
    else if (k === "token_hex") out.token = text(v as string);
    else if (k === "message_hex") out.message = text(v as string);
    else if (k === "templates") out.templates = (v as number[]).map((id) => templates.find((t) => t.id === id));
    // The input layout by id: templates.json's `input`.
    else if (k === "input") out.input = v === null ? null : [input, ...templates].find((t) => t.id === v);
    // A MATCH_DATA's messages: {op, sender, payload_hex}.
    else if (k === "messages")
      out.messages = (v as Array<{ op: number; sender: string; payload_hex: string }>).map((m) => ({ op: m.op, sender: m.sender, payload: fromHex(m.payload_hex) }));
    else if (k === "extensions") out.extensions = (v as Array<{ type: number; hex: string }>).map((e) => ({ type: e.type, bytes: fromHex(e.hex) }));
    else out[k] = v;
  }
  return out;
}

describe("message vectors", () => {
  it("speak protocol version 2", () => {
    expect(PROTOCOL_VERSION).toBe(2);
    expect(MAIN_VERSION).toBe(2);
    const hellos = messages.filter((c) => c.message.type === "hello" && c.message.version === 2);
    expect(hellos.length).toBeGreaterThan(0);
  });

  it("decode a handshake's grid, input layout and extensions", () => {
    const cases = messages.filter((c) => c.message.type === "handshake");
    const full = cases.find((c) => c.message.input !== null)!;
    const got = decodeServerMessage(fromHex(full.hex));
    expect(got.ok).toBe(true);
    if (!got.ok || got.value.type !== "handshake") return;
    expect(got.value.cols).toBe(full.message.cols);
    expect(got.value.rows).toBe(full.message.rows);
    expect(got.value.input).toEqual(input);
    expect(got.value.extensions).toEqual([{ type: 99, bytes: fromHex("010203") }]);
    // An input layout tag other than 0 or 1, and an extension longer than 64 KiB, are refused.
    const empty = cases.find((c) => c.message.input === null)!;
    const bytes = fromHex(empty.hex);
    const tagAt = bytes.length - 2; // the input tag, then the extension count
    const badTag = bytes.slice();
    badTag[tagAt] = 2;
    expect(decodeServerMessage(badTag)).toEqual({ ok: false, error: "bad_input_layout" });
    const long = new ByteWriter().bytes(bytes.subarray(0, tagAt + 1)).varint(1).varint(7).varint(65_537).bytes(new Uint8Array(65_537)).toBytes();
    expect(decodeServerMessage(long)).toEqual({ ok: false, error: "string_too_long" });
    const skipped = new ByteWriter().bytes(bytes.subarray(0, tagAt + 1)).varint(2).varint(7).varint(0).varint(300).varint(2).u8(1).u8(2).toBytes();
    const r = decodeServerMessage(skipped);
    expect(r.ok && r.value.type === "handshake" && r.value.extensions).toEqual([
      { type: 7, bytes: new Uint8Array(0) },
      { type: 300, bytes: new Uint8Array([1, 2]) },
    ]);
  });

  it("encodes every client message byte for byte", () => {
    const cases = messages.filter((c) => CLIENT.includes(c.message.type as string));
    expect(cases.length).toBeGreaterThanOrEqual(8);
    for (const c of cases) expect(toHex(encodeClientMessage(message(c.message) as ClientMessage))).toBe(c.hex);
  });

  it("decodes every server message, templates included", () => {
    const cases = messages.filter((c) => !CLIENT.includes(c.message.type as string));
    expect(cases.length).toBeGreaterThanOrEqual(5);
    for (const c of cases) {
      const got = decodeServerMessage(fromHex(c.hex));
      expect(got).toEqual({ ok: true, value: message(c.message) });
    }
  });

  it("answers errors on cut or corrupted server messages, never throws", () => {
    for (const c of messages) {
      const bytes = fromHex(c.hex);
      for (let cut = 0; cut < bytes.length; cut++) {
        const r = decodeServerMessage(bytes.subarray(0, cut));
        if (!CLIENT.includes(c.message.type as string) && !OPEN_ENDED.includes(c.message.type as string)) expect(r.ok).toBe(false);
      }
      let seed = bytes.length;
      for (let i = 0; i < 200; i++) {
        const copy = bytes.slice();
        seed = (seed * 1103515245 + 12345) >>> 0;
        copy[seed % copy.length] = seed >>> 24;
        expect(() => decodeServerMessage(copy)).not.toThrow();
      }
    }
  });
});

describe("what a message decoder refuses (docs/protocol.md)", () => {
  const fail = (error: string) => ({ ok: false, error });

  it("backend messages: a RESPONSE without its status, MATCH_DATA's limits and trailing bytes, a NOTIFY's kind over 64 bytes", () => {
    expect(decodeServerMessage(Uint8Array.from([0x06, 1, 0]))).toEqual(fail("truncated"));
    expect(decodeServerMessage(Uint8Array.from([0x06, 1, 0, 200]))).toEqual({ ok: true, value: { type: "response", id: 1, status: 200, body: "" } });
    const md = (sender: string, length: number, extra: number[] = []) =>
      decodeServerMessage(new ByteWriter().u8(0x07).string("m").varint(1).varint(1).string(sender).varint(length).bytes(new Uint8Array(Math.min(length, 8))).bytes(Uint8Array.from(extra)).toBytes());
    expect(md("u".repeat(255), 2)).toEqual({ ok: true, value: { type: "match_data", match_id: "m", messages: [{ op: 1, sender: "u".repeat(255), payload: new Uint8Array(2) }] } });
    expect(md("u".repeat(256), 2)).toEqual(fail("string_too_long"));
    expect(md("u", 2 ** 24 + 1)).toEqual(fail("string_too_long"));
    expect(md("u", 9)).toEqual(fail("truncated"));
    expect(md("u", 2, [0])).toEqual(fail("trailing_bytes"));
    expect(decodeServerMessage(new ByteWriter().u8(0x07).string("m".repeat(129)).varint(0).toBytes())).toEqual(fail("string_too_long"));
    expect(decodeServerMessage(new ByteWriter().u8(0x08).string("k".repeat(65)).toBytes())).toEqual(fail("string_too_long"));
    expect(decodeServerMessage(new ByteWriter().u8(0x08).string("k".repeat(64)).toBytes())).toEqual({ ok: true, value: { type: "notify", kind: "k".repeat(64), body: "" } });
  });
  const u = (extra: Partial<FieldSchema> = {}): FieldSchema => ({ name: "u", type: "uint", bits: 5, min: 0, step: 1, diff_bits: 3, values: null, ...extra });
  const hs = (...fields: FieldSchema[]) => decodeServerMessage(encodeHandshake({ entityId: 1, templates: [{ id: 1, name: "t", fields }] }));

  it("bad_field_bits (bits outside 1..53, diff_bits over bits), bad_field_step (0)", () => {
    expect(hs(u()).ok).toBe(true);
    expect(hs(u({ bits: 53, diff_bits: 53 })).ok).toBe(true);
    expect(hs(u({ bits: 0, diff_bits: 0 }))).toEqual(fail("bad_field_bits"));
    expect(hs(u({ bits: 54 }))).toEqual(fail("bad_field_bits"));
    expect(hs(u({ bits: 5, diff_bits: 6 }))).toEqual(fail("bad_field_bits"));
    // An enum or a bool travels whole: its diff_bits is 0.
    expect(hs(u({ name: "b", type: "bool", bits: 1, diff_bits: 1, values: [false, true] }))).toEqual(fail("bad_field_bits"));
    expect(hs(u({ name: "e", type: "enum", bits: 2, diff_bits: 1, values: ["a", "b"] }))).toEqual(fail("bad_field_bits"));
    // A bool is one bit.
    expect(hs(u({ name: "b", type: "bool", bits: 2, diff_bits: 0, values: [false, true] }))).toEqual(fail("bad_field_bits"));
    expect(hs(u({ step: 0 }))).toEqual(fail("bad_field_step"));
    expect(hs(u(), u({ name: "v", type: "fixed", step: 0 }))).toEqual(fail("bad_field_step"));
    // The input layout is a template too.
    expect(decodeServerMessage(encodeHandshake({ entityId: 1, input: { id: 0, name: "in", fields: [u({ bits: 60 })] } }))).toEqual(fail("bad_field_bits"));
  });

  it("enums: bad_enum_values (fewer than 2, more than 2^bits), bad_enum_value (a tag other than 0 and 1)", () => {
    const e = (values: Array<string | number>, bits = 2) => u({ name: "e", type: "enum", bits, diff_bits: 0, values });
    expect(hs(e(["a", -5, 1000]))).toEqual({ ok: true, value: expect.objectContaining({ type: "handshake" }) });
    expect(hs(e(["a"]))).toEqual(fail("bad_enum_values"));
    expect(hs(e(["a", "b", "c", "d", "e"]))).toEqual(fail("bad_enum_values"));
    const bytes = encodeHandshake({ entityId: 1, templates: [{ id: 1, name: "t", fields: [e(["a", "b"])] }] });
    const at = bytes.indexOf(0x61); // the tag before "a" is 0
    expect(bytes[at - 2]).toBe(0);
    const bad = bytes.slice();
    bad[at - 2] = 2;
    expect(decodeServerMessage(bad)).toEqual(fail("bad_enum_value"));
  });

  it("{unknown_field_type}, bad_template (no field), string_too_long (a name over 255 bytes)", () => {
    const bytes = encodeHandshake({ entityId: 1, templates: [{ id: 1, name: "t", fields: [u({ name: "only" })] }] });
    const at = bytes.indexOf(0x79) + 1; // after "only": the type byte
    expect(bytes[at]).toBe(0);
    const bad = bytes.slice();
    bad[at] = 9;
    expect(decodeServerMessage(bad)).toEqual(fail("unknown_field_type 9"));
    expect(hs()).toEqual(fail("bad_template"));
    expect(hs(u({ name: "n".repeat(255) })).ok).toBe(true);
    expect(hs(u({ name: "n".repeat(256) }))).toEqual(fail("string_too_long"));
    expect(decodeServerMessage(encodeHandshake({ entityId: 1, templates: [{ id: 1, name: "t".repeat(256), fields: [u()] }] }))).toEqual(fail("string_too_long"));
  });

  it("varint_too_long: a varint over 8 bytes or of 2^53 and more; truncated inside one", () => {
    const pong = (...bytes: number[]) => decodeServerMessage(Uint8Array.from([0x04, ...bytes, 0]));
    expect(pong(...Array(8).fill(0x80), 0x00)).toEqual(fail("varint_too_long"));
    expect(pong(...Array(7).fill(0xff), 0x10)).toEqual(fail("varint_too_long"));
    expect(pong(...Array(7).fill(0xff), 0x0f)).toEqual({ ok: true, value: { type: "pong", client_time: 2 ** 53 - 1, server_tick: 0 } });
    expect(pong(...Array(7).fill(0x80), 0x00)).toEqual({ ok: true, value: { type: "pong", client_time: 0, server_tick: 0 } });
    expect(decodeServerMessage(Uint8Array.from([0x04, 0x80, 0x80]))).toEqual(fail("truncated"));
    expect(decodeServerMessage(Uint8Array.from([0x03, ...Array(9).fill(0x81)]))).toEqual(fail("varint_too_long"));
    // In a HANDSHAKE (the width) and an ERROR's message length.
    const hsBytes = encodeHandshake({ entityId: 1 });
    const long = new ByteWriter().bytes(hsBytes.subarray(0, 6)).bytes(Uint8Array.from(Array(9).fill(0xff))).bytes(hsBytes.subarray(6)).toBytes();
    expect(decodeServerMessage(long)).toEqual(fail("varint_too_long"));
    expect(decodeServerMessage(Uint8Array.from([0x05, 0, 1, ...Array(8).fill(0xff)]))).toEqual(fail("varint_too_long"));
    expect(decodeServerMessage(new ByteWriter().u8(0x05).u16(1).varint(65_536).bytes(new Uint8Array(65_536)).toBytes())).toEqual(fail("string_too_long"));
  });
});
