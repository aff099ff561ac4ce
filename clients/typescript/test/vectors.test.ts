import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { BitReader, decodeDelta, decodeKeyframe, dequantize, fromHex, type TemplateSchema } from "../src/index.js";

// The byte-exact vectors the Elixir encoder produced (protocol/vectors, checked by its tests too).
const path = fileURLToPath(new URL("../../../protocol/vectors/templates.json", import.meta.url));
const vectors = JSON.parse(readFileSync(path, "utf8")) as {
  templates: TemplateSchema[];
  keyframes: Array<{ template: number; values: Array<{ q: number; value: unknown }>; bits: number; hex: string }>;
  deltas: Array<{ template: number; old: Array<{ q: number }>; new: Array<{ q: number }>; bits: number; hex: string }>;
};

const template = (id: number): TemplateSchema => {
  const t = vectors.templates.find((t) => t.id === id);
  if (!t) throw new Error(`no template ${id}`);
  return t;
};

describe("template vectors", () => {
  it("decodes every keyframe to its values, using exactly its bits", () => {
    expect(vectors.keyframes.length).toBeGreaterThanOrEqual(10);
    for (const c of vectors.keyframes) {
      const t = template(c.template);
      const r = new BitReader(fromHex(c.hex), c.bits);
      const got = decodeKeyframe(t, r);
      expect(got).toEqual({ ok: true, value: c.values.map((v) => v.q) });
      expect(r.remaining).toBe(0);
      t.fields.forEach((f, i) => expect(dequantize(f, c.values[i]!.q)).toEqual(c.values[i]!.value));
    }
  });

  it("decodes every delta against its baseline", () => {
    expect(vectors.deltas.length).toBeGreaterThanOrEqual(10);
    for (const c of vectors.deltas) {
      const t = template(c.template);
      const r = new BitReader(fromHex(c.hex), c.bits);
      const got = decodeDelta(t, c.old.map((v) => v.q), r);
      expect(got).toEqual({ ok: true, value: c.new.map((v) => v.q) });
      expect(r.remaining).toBe(0);
    }
  });

  it("answers errors, never throws, on truncated or bad input", () => {
    for (const c of vectors.keyframes.slice(0, 5)) {
      const t = template(c.template);
      expect(decodeKeyframe(t, new BitReader(fromHex(c.hex), c.bits - 1))).toEqual({ ok: false, error: "truncated" });
    }
    const t = template(1);
    expect(decodeDelta(t, [1, 2], new BitReader(new Uint8Array([255])))).toEqual({ ok: false, error: "bad_baseline" });
    // Random bytes: every outcome is a result, never an exception.
    let seed = 12345;
    for (let i = 0; i < 2000; i++) {
      const bytes = new Uint8Array(1 + (i % 12)).map(() => ((seed = (seed * 1103515245 + 12345) >>> 0) >>> 24));
      for (const tpl of vectors.templates) {
        expect(() => decodeKeyframe(tpl, new BitReader(bytes))).not.toThrow();
        expect(() => decodeDelta(tpl, tpl.fields.map(() => 0), new BitReader(bytes))).not.toThrow();
      }
    }
  });
});

describe("BitReader", () => {
  it("reads most significant bit first, across bytes, up to 53 bits", () => {
    const r = new BitReader(fromHex("a5ff0001"));
    expect(r.uint(1)).toBe(1);
    expect(r.uint(3)).toBe(2);
    expect(r.uint(4)).toBe(5);
    expect(r.uint(12)).toBe(0xff0);
    expect(r.int(4)).toBe(0);
    expect(r.int(8)).toBe(1);
    expect(r.uint(1)).toBeUndefined();
    const wide = new BitReader(fromHex("ffffffffffffff"));
    expect(wide.uint(53)).toBe(2 ** 53 - 1);
    expect(new BitReader(fromHex("80")).int(8)).toBe(-128);
  });
});
