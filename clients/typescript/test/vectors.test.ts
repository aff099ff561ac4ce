import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import {
  BitReader,
  BitWriter,
  decodeDelta,
  decodeKeyframe,
  decodeValue,
  dequantize,
  encodeInput,
  fromHex,
  type InputValues,
  type TemplateSchema,
} from "../src/protocol.js";

// The byte-exact vectors the Elixir encoder produced (protocol/vectors, checked by its tests too).
const path = fileURLToPath(new URL("../../../protocol/vectors/templates.json", import.meta.url));
const vectors = JSON.parse(readFileSync(path, "utf8")) as {
  templates: TemplateSchema[];
  keyframes: Array<{ template: number; values: Array<{ q: number; value: unknown }>; bits: number; hex: string }>;
  deltas: Array<{ template: number; old: Array<{ q: number }>; new: Array<{ q: number }>; bits: number; hex: string }>;
  input: TemplateSchema;
  inputs: Array<{ values: Record<string, number | string | boolean>; hex: string }>;
};
const toHex = (b: Uint8Array) => Buffer.from(b).toString("hex");

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

describe("typed input vectors", () => {
  const layout = vectors.input;
  // The vectors give the server's values: angles in 1/65536 turn. The SDK's are radians (or turns).
  const sdkValues = (v: Record<string, number | string | boolean>, unit: "radians" | "turns"): InputValues => {
    const out: Record<string, number | string | boolean> = { ...v };
    for (const f of layout.fields)
      if (f.type === "angle") out[f.name] = ((v[f.name] as number) / 65536) * (unit === "turns" ? 1 : 2 * Math.PI);
    return out;
  };

  it("encodes every input byte for byte (radians and turns), and its decoded values again", () => {
    expect(layout.fields.map((f) => f.type)).toEqual(["int", "int", "angle", "enum", "bool", "uint"]);
    expect(vectors.inputs.length).toBeGreaterThanOrEqual(5);
    for (const c of vectors.inputs) {
      expect(toHex(encodeInput(layout, sdkValues(c.values, "radians")))).toBe(c.hex);
      expect(toHex(encodeInput(layout, sdkValues(c.values, "turns"), "turns"))).toBe(c.hex);
      // What decodeValue answers for the encoded bits encodes to the same bits.
      const q = decodeKeyframe(layout, new BitReader(fromHex(c.hex)));
      expect(q.ok).toBe(true);
      if (!q.ok) continue;
      const decoded = Object.fromEntries(layout.fields.map((f, i) => [f.name, decodeValue(f, q.value[i]!)]));
      expect(toHex(encodeInput(layout, decoded))).toBe(c.hex);
    }
  });

  it("quantizes as the server: numbers clamp to their range, angles wrap, fixed rounds to 1/1024 m", () => {
    const base = { mx: 0, my: 0, aim: 0, stance: "walk", fire: false, charge: 0 };
    const hex = (v: Partial<typeof base>, unit: "radians" | "turns" = "radians") => toHex(encodeInput(layout, { ...base, ...v }, unit));
    // -127 is the minimum of mx and my, 1023 the maximum of charge (10 bits).
    expect(hex({ mx: -500, my: -128, charge: -3 })).toBe(hex({ mx: -127, my: -127, charge: 0 }));
    expect(hex({ mx: 10_000, charge: 5000 })).toBe(hex({ mx: 128, charge: 1023 }));
    // Angles wrap: -1/4 turn is 3/4 turn, 5/4 turn is 1/4 turn.
    expect(hex({ aim: -0.25 }, "turns")).toBe(hex({ aim: 0.75 }, "turns"));
    expect(hex({ aim: 2.5 * Math.PI })).toBe(hex({ aim: 0.25 }, "turns"));
    // Extra names are ignored.
    expect(toHex(encodeInput(layout, { ...base, other: 1 }))).toBe(hex({}));

    const fixed: TemplateSchema = {
      id: 0,
      name: "aim",
      fields: [{ name: "d", type: "fixed", bits: 12, min: -2048, step: 16, diff_bits: 3, values: null }],
    };
    // d in -2..2 m at 1/64 m: q = floor((round(d * 1024) + 2048) / 16).
    const q = (d: number) => new BitReader(encodeInput(fixed, { d })).uint(12);
    expect(q(0)).toBe(128);
    expect(q(1)).toBe(192);
    expect(q(-2)).toBe(0);
    expect(q(-5)).toBe(0);
    expect(q(1 / 64 - 1 / 2048)).toBe(129); // 15.5 units round to 16: one step
    expect(q(1 / 64 - 1 / 1024)).toBe(128); // 15 units: floor
    expect(q(100)).toBe(4095);
  });

  it("throws a TypeError for a missing field or a value its field cannot take", () => {
    const ok = { mx: 1, my: 2, aim: 0, stance: "run", fire: true, charge: 3 };
    expect(() => encodeInput(layout, ok)).not.toThrow();
    const bad: Array<[Record<string, unknown>, RegExp]> = [
      [{ ...ok, my: undefined }, /field my is missing/],
      [Object.fromEntries(Object.entries(ok).filter(([k]) => k !== "aim")), /field aim is missing/],
      [{ ...ok, stance: "sleep" }, /stance.*expected one of \["walk","run","crouch"\], got: "sleep"/],
      [{ ...ok, fire: 1 }, /fire.*expected one of \[false,true\]/],
      [{ ...ok, mx: 1.5 }, /mx.*expected an integer, got: 1.5/],
      [{ ...ok, charge: "3" }, /charge.*expected an integer/],
      [{ ...ok, aim: Number.NaN }, /aim.*expected a finite number/],
      [{ ...ok, aim: Infinity }, /aim.*expected a finite number/],
    ];
    for (const [values, message] of bad) {
      expect(() => encodeInput(layout, values as InputValues)).toThrow(TypeError);
      expect(() => encodeInput(layout, values as InputValues)).toThrow(message);
    }
  });
});

describe("BitWriter", () => {
  it("writes most significant bit first, across bytes, up to 53 bits, zero bits to the byte", () => {
    const w = new BitWriter().uint(1, 1).uint(3, 2).uint(4, 5).uint(12, 0xff0).int(4, 0).int(8, 1);
    expect(w.bitLength).toBe(32);
    expect(toHex(w.toBytes())).toBe("a5ff0001");
    expect(toHex(new BitWriter().uint(53, 2 ** 53 - 1).toBytes())).toBe("fffffffffffff8");
    expect(toHex(new BitWriter().int(8, -128).uint(1, 1).toBytes())).toBe("8080");
    expect(toHex(new BitWriter().uint(0, 0).toBytes())).toBe("");
    const r = new BitReader(new BitWriter().uint(53, 2 ** 52 + 3).int(20, -77).toBytes());
    expect([r.uint(53), r.int(20)]).toEqual([2 ** 52 + 3, -77]);
    expect(() => new BitWriter().uint(3, 8)).toThrow(RangeError);
    expect(() => new BitWriter().uint(3, -1)).toThrow(RangeError);
    expect(() => new BitWriter().int(3, 4)).toThrow(RangeError);
    expect(() => new BitWriter().uint(54, 0)).toThrow(RangeError);
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
