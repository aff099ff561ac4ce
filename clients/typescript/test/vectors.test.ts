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
import { WorldView } from "../src/index.js";

// The byte-exact vectors the Elixir encoder produced (protocol/vectors, checked by its tests too).
const path = fileURLToPath(new URL("../../../protocol/vectors/templates.json", import.meta.url));
const vectors = JSON.parse(readFileSync(path, "utf8")) as {
  templates: TemplateSchema[];
  keyframes: Array<{ template: number; values: Array<{ q: number; value: unknown }>; bits: number; hex: string }>;
  deltas: Array<{ template: number; old: Array<{ q: number }>; new: Array<{ q: number }>; bits: number; hex: string }>;
  input: TemplateSchema;
  inputs: Array<{ values: Record<string, number | string | boolean>; hex: string; decoded: Record<string, number | string | boolean> }>;
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

/** An angle's difference modulo 2^bits, in -2^(bits-1)..2^(bits-1)-1; a number's as it is. */
const wrap = (f: TemplateSchema["fields"][number], d: number): number => {
  if (f.type !== "angle") return d;
  const size = 2 ** f.bits;
  return ((((d + size / 2) % size) + size) % size) - size / 2;
};

/** A delta, written from docs/protocol.md ("Templates") alone (the SDK only decodes them). */
function encodeDelta(t: TemplateSchema, old: number[], q: number[]): BitWriter {
  const w = new BitWriter();
  t.fields.forEach((_, i) => w.uint(1, old[i] === q[i] ? 0 : 1));
  t.fields.forEach((f, i) => {
    if (old[i] === q[i]) return;
    if (f.diff_bits === 0) return void w.uint(f.bits, q[i]!);
    const d = wrap(f, q[i]! - old[i]!);
    if (d >= -(2 ** (f.diff_bits - 1)) && d < 2 ** (f.diff_bits - 1)) w.uint(1, 1).int(f.diff_bits, d);
    else w.uint(1, 0).uint(f.bits, q[i]!);
  });
  return w;
}

describe("template vectors cover", () => {
  it("three templates, an enum of integers (a negative one), a uint of diff_bits 0, differences at both ends", () => {
    expect(vectors.templates.length).toBe(3);
    const fields = vectors.templates.flatMap((t) => t.fields);
    expect(fields.some((f) => f.type === "enum" && f.values!.some((v) => typeof v === "number" && v < 0))).toBe(true);
    expect(vectors.keyframes.some((c) => c.values.some((v) => typeof v.value === "number" && v.value < 0 && template(c.template).fields.some((f) => f.type === "enum")))).toBe(true);
    // A uint of diff_bits 0 changing in a delta.
    expect(
      vectors.deltas.some((c) => template(c.template).fields.some((f, i) => f.type === "uint" && f.diff_bits === 0 && c.old[i]!.q !== c.new[i]!.q)),
    ).toBe(true);
    // Changes at both ends of a difference's range: -2^(diff_bits-1) (the lowest that fits) and
    // 2^(diff_bits-1) (one past the highest: the full value), of numbers and of angles.
    const ends = new Set<string>();
    for (const c of vectors.deltas)
      template(c.template).fields.forEach((f, i) => {
        if (f.diff_bits === 0) return;
        const d = wrap(f, c.new[i]!.q - c.old[i]!.q);
        if (d === -(2 ** (f.diff_bits - 1))) ends.add(`${f.type === "angle" ? "angle" : "number"} low`);
        if (d === 2 ** (f.diff_bits - 1)) ends.add(`${f.type === "angle" ? "angle" : "number"} high`);
      });
    expect([...ends].sort()).toEqual(["angle high", "angle low", "number high", "number low"]);
  });

  it("deltas as the spec describes them: a test encoder written from it makes every vector's bits", () => {
    for (const c of vectors.deltas) {
      const w = encodeDelta(template(c.template), c.old.map((v) => v.q), c.new.map((v) => v.q));
      expect([toHex(w.toBytes()), w.bitLength]).toEqual([c.hex, c.bits]);
    }
  });
});

describe("template decoders refuse", () => {
  const state = template(7).fields.find((f) => f.name === "state")!; // enum, 3 bits, 5 values
  const one = (f: typeof state): TemplateSchema => ({ id: 0, name: "one", fields: [f] });

  it("bad_enum_index: an enum index past its values, in a keyframe and a delta (whole, and after a difference)", () => {
    expect(state.values!.length).toBe(5);
    const bits = (v: number) => new BitReader(new BitWriter().uint(3, v).toBytes(), 3);
    expect(decodeKeyframe(one(state), bits(4))).toEqual({ ok: true, value: [4] });
    for (const v of [5, 6, 7]) expect(decodeKeyframe(one(state), bits(v))).toEqual({ ok: false, error: "bad_enum_index" });
    // The whole template: the state field of a vector's keyframe set to 7.
    const c = vectors.keyframes.find((k) => k.template === 7)!;
    const t = template(7);
    const w = new BitWriter();
    t.fields.forEach((f, i) => w.uint(f.bits, f === state ? 7 : c.values[i]!.q));
    expect(decodeKeyframe(t, new BitReader(w.toBytes()))).toEqual({ ok: false, error: "bad_enum_index" });
    // A delta (diff_bits 0: mask, then the value).
    const delta = (v: number) => new BitReader(new BitWriter().uint(1, 1).uint(3, v).toBytes(), 4);
    expect(decodeDelta(one(state), [0], delta(4))).toEqual({ ok: true, value: [4] });
    expect(decodeDelta(one(state), [0], delta(5))).toEqual({ ok: false, error: "bad_enum_index" });
    // An enum a HANDSHAKE gives diff_bits (the server never does): the full value and a
    // difference landing past the values are refused the same.
    const diff = one({ ...state, diff_bits: 2 });
    expect(decodeDelta(diff, [0], new BitReader(new BitWriter().uint(1, 1).uint(1, 0).uint(3, 6).toBytes(), 5))).toEqual({ ok: false, error: "bad_enum_index" });
    expect(decodeDelta(diff, [4], new BitReader(new BitWriter().uint(1, 1).uint(1, 1).int(2, 1).toBytes(), 4))).toEqual({ ok: false, error: "bad_enum_index" });
    expect(decodeDelta(diff, [4], new BitReader(new BitWriter().uint(1, 1).uint(1, 1).int(2, -2).toBytes(), 4))).toEqual({ ok: true, value: [2] });
  });

  it("out_of_range: a difference taking a number out of its bits (an angle wraps)", () => {
    const u = template(7).fields.find((f) => f.name === "u")!; // uint, 5 bits, diff_bits 3
    const d = (v: number) => new BitReader(new BitWriter().uint(1, 1).uint(1, 1).int(3, v).toBytes(), 5);
    expect(decodeDelta(one(u), [0], d(-1))).toEqual({ ok: false, error: "out_of_range" });
    expect(decodeDelta(one(u), [31], d(1))).toEqual({ ok: false, error: "out_of_range" });
    expect(decodeDelta(one(u), [4], d(-4))).toEqual({ ok: true, value: [0] });
    expect(decodeDelta(one(u), [28], d(3))).toEqual({ ok: true, value: [31] });
    const heading = template(7).fields.find((f) => f.name === "heading")!; // angle, 10 bits
    expect(decodeDelta(one(heading), [0], d(-1))).toEqual({ ok: true, value: [1023] });
    expect(decodeDelta(one(heading), [1023], d(3))).toEqual({ ok: true, value: [2] });
  });
});

describe("templates of many fields", () => {
  // 60 fields (any count up to 255 works): a mask wider than the 53 bits a number holds.
  const wide = (n: number): TemplateSchema => ({
    id: 1,
    name: "wide",
    fields: Array.from({ length: n }, (_, i) => ({ name: `f${i}`, type: "uint" as const, bits: 4, min: 0, step: 1, diff_bits: 2, values: null })),
  });

  for (const n of [60, 255]) {
    it(`decodes keyframes and deltas of ${n} fields`, () => {
      const t = wide(n);
      const old = t.fields.map((_, i) => i % 16);
      const kw = new BitWriter();
      for (const q of old) kw.uint(4, q);
      const kr = new BitReader(kw.toBytes(), kw.bitLength);
      expect(decodeKeyframe(t, kr)).toEqual({ ok: true, value: old });
      expect(kr.remaining).toBe(0);
      // Fields 0, 31, 32, 52, 53 and the last change: a difference for some, a value for others.
      const changes = new Map<number, number>([
        [0, 1],
        [31, 9],
        [32, 15],
        [52, 3],
        [53, 4],
        [n - 1, 0],
      ]);
      const w = new BitWriter();
      for (let i = 0; i < n; i++) w.uint(1, changes.has(i) ? 1 : 0);
      for (let i = 0; i < n; i++) {
        const v = changes.get(i);
        if (v === undefined) continue;
        const d = v - old[i]!;
        if (d >= -2 && d <= 1) w.uint(1, 1).int(2, d);
        else w.uint(1, 0).uint(4, v);
      }
      const expected = old.map((q, i) => changes.get(i) ?? q);
      const r = new BitReader(w.toBytes(), w.bitLength);
      expect(decodeDelta(t, old, r)).toEqual({ ok: true, value: expected });
      expect(r.remaining).toBe(0);
      // Cut anywhere: truncated, never a wrong value.
      for (let cut = 0; cut < w.bitLength; cut++) expect(decodeDelta(t, old, new BitReader(w.toBytes(), cut))).toEqual({ ok: false, error: "truncated" });
    });
  }
});

describe("typed input vectors", () => {
  const layout = vectors.input;
  // The vectors give the server's values: angles in 1/65536 turn. The SDK's are radians (or turns).
  // The vectors give the server's values: fixed in 1/1024 m, angles in 1/65536 turn. The SDK's
  // are metres and radians (or turns).
  const sdkValues = (v: Record<string, number | string | boolean>, unit: "radians" | "turns" = "radians"): InputValues => {
    const out: Record<string, number | string | boolean> = { ...v };
    for (const f of layout.fields) {
      if (f.type === "angle") out[f.name] = ((v[f.name] as number) / 65536) * (unit === "turns" ? 1 : 2 * Math.PI);
      if (f.type === "fixed") out[f.name] = (v[f.name] as number) / 1024;
    }
    return out;
  };
  // A payload's values in the server's units (dequantize), by name.
  const serverValues = (payload: Uint8Array): Record<string, unknown> => {
    const r = new BitReader(payload);
    const q = decodeKeyframe(layout, r);
    expect(q.ok).toBe(true);
    if (!q.ok) return {};
    // Only zero bits to the byte boundary follow.
    expect(r.remaining).toBeLessThan(8);
    expect(r.uint(r.remaining)).toBe(0);
    return Object.fromEntries(layout.fields.map((f, i) => [f.name, dequantize(f, q.value[i]!)]));
  };

  it("encodes every input byte for byte (radians and turns), and its decoded values again", () => {
    expect(layout.fields.map((f) => f.type)).toEqual(["int", "int", "angle", "enum", "bool", "uint", "fixed"]);
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

  it("inputs past their range: the server's decoded values differ only by its clamp to the declared range", () => {
    // Some cases are past the wire's range, some past the declared range only, some off a step.
    const wire = vectors.inputs.map((c) => serverValues(fromHex(c.hex)));
    expect(vectors.inputs.some((c, i) => JSON.stringify(c.values) !== JSON.stringify(wire[i]))).toBe(true);
    expect(vectors.inputs.some((c, i) => layout.fields.some((f) => wire[i]![f.name] !== c.decoded[f.name]))).toBe(true);
    vectors.inputs.forEach((c, i) => {
      // What the server decodes is what its payload stands for, but for numbers the declared
      // range (which the SDK does not know) clamped: never an enum, a bool or an angle.
      for (const f of layout.fields) {
        const [got, server] = [wire[i]![f.name], c.decoded[f.name]];
        if (got === server) continue;
        expect(["int", "uint", "fixed"]).toContain(f.type);
        expect(typeof got === "number" && typeof server === "number").toBe(true);
        // A clamp moves toward the range: the value given was at least as far out as the wire's.
        const given = c.values[f.name] as number;
        expect(Math.sign((got as number) - (server as number))).toBe(Math.sign(given - (server as number)));
      }
      // The decoded values are exact values of their fields: encoding them gives a payload
      // that stands for them exactly, and it is the vector's payload when nothing was clamped.
      const again = encodeInput(layout, sdkValues(c.decoded));
      expect(serverValues(again)).toEqual(c.decoded);
      if (layout.fields.every((f) => wire[i]![f.name] === c.decoded[f.name])) expect(toHex(again)).toBe(c.hex);
    });
  });

  it("quantizes as the server: numbers clamp to their range, angles wrap, fixed rounds to 1/1024 m", () => {
    const base = { mx: 0, my: 0, aim: 0, stance: "walk", fire: false, charge: 0, throttle: 0 };
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
    const ok = { mx: 1, my: 2, aim: 0, stance: "run", fire: true, charge: 3, throttle: -0.5 };
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
      [{ ...ok, throttle: "1" }, /throttle.*expected a finite number \(metres\)/],
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

// A world of zones (docs/protocol.md, "A world of zones"): an observer at the corner of four zones.
const worldPath = fileURLToPath(new URL("../../../protocol/vectors/world.json", import.meta.url));
const world = JSON.parse(readFileSync(worldPath, "utf8")) as {
  templates: number[];
  grid: { width: number; height: number; cell_size: number; cols: number; rows: number };
  frames: Array<{
    tick: number;
    hex: string;
    cells: number[];
    handed: number[];
    both: number[];
    entities: Array<{ id: number; template: number; q: number[] }>;
  }>;
};

describe("world vectors (frames of four zones)", () => {
  const templates = world.templates.map(template);
  const space = (world.grid.cols + 2) * (world.grid.rows + 2);

  it("cover band keys, both orders of a handoff (handed ids, ids in a band and a region cell)", () => {
    expect(world.frames.length).toBeGreaterThanOrEqual(30);
    expect(world.frames.some((f) => f.handed.length > 0)).toBe(true);
    expect(world.frames.some((f) => f.both.length > 0)).toBe(true);
    expect(world.frames.some((f) => f.cells.some((k) => k >= space))).toBe(true);
  });

  it("a view applying the frames in order holds exactly the expected cells, handed ids and entities", () => {
    const view = new WorldView();
    view.space = space;
    for (const f of world.frames) {
      expect(view.apply(fromHex(f.hex), templates)).toEqual({ ok: true, value: f.tick });
      expect(view.tick).toBe(f.tick);
      expect([...view.cells.keys()].sort((a, b) => a - b)).toEqual(f.cells);
      expect([...view.handed.keys()].sort((a, b) => a - b)).toEqual(f.handed);
      const { entities, cells } = view.resolve();
      const got = [...entities.values()]
        .sort((a, b) => a.id - b.id)
        .map((e) => ({ id: e.id, template: templates[e.template]!.id, q: e.q }));
      expect(got).toEqual(f.entities);
      // The ids a band cell and a region cell both hold: the region cell's copy is the one shown.
      const at = (band: boolean) => new Set([...view.cells].filter(([k]) => k >= space === band).flatMap(([, es]) => es.map((e) => e.id)));
      const [inBand, inRegion] = [at(true), at(false)];
      expect([...inBand].filter((id) => inRegion.has(id)).sort((a, b) => a - b)).toEqual(f.both);
      for (const id of f.both) expect(cells.get(id)!).toBeLessThan(space);
      // A handed entity has no cell.
      for (const id of f.handed) expect(cells.has(id)).toBe(false);
    }
  });
});
