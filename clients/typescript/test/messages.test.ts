import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { decodeServerMessage, encodeClientMessage, fromHex, type ClientMessage, type TemplateSchema } from "../src/index.js";

const load = (name: string) =>
  JSON.parse(readFileSync(fileURLToPath(new URL(`../../../protocol/vectors/${name}`, import.meta.url)), "utf8"));
const { messages } = load("messages.json") as { messages: Array<{ message: Record<string, unknown>; hex: string }> };
const { templates } = load("templates.json") as { templates: TemplateSchema[] };

const CLIENT = ["hello", "input", "client_event", "ping", "resync"];
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
    else out[k] = v;
  }
  return out;
}

describe("message vectors", () => {
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
        if (!CLIENT.includes(c.message.type as string) && c.message.type !== "event") expect(r.ok).toBe(false);
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
