import { BitReader } from "./bits.js";

/** A field type (see Overworld.Template.Field on the server). */
export type FieldType = "uint" | "int" | "fixed" | "angle" | "enum" | "bool";

/** One field of a template, as the handshake describes it. */
export interface FieldSchema {
  name: string;
  type: FieldType;
  /** Width of the quantized value in bits (1..53). */
  bits: number;
  /** uint/int/fixed: the value of quantized 0; fixed in 1/1024 m units. */
  min: number;
  /** fixed: units per quantization step. */
  step: number;
  /** Width of a short signed difference in a delta (0: always the full value). */
  diff_bits: number;
  /** enum/bool: the values, by index. */
  values: Array<string | number | boolean> | null;
}

/** An entity template: which fields an entity kind replicates, in order. */
export interface TemplateSchema {
  id: number;
  name: string;
  fields: FieldSchema[];
}

/** Decoding result: never an exception. */
export type Result<T> = { ok: true; value: T } | { ok: false; error: string };

const ok = <T>(value: T): Result<T> => ({ ok: true, value });
const fail = <T>(error: string): Result<T> => ({ ok: false, error });

/** Reads a keyframe: every field's quantized value. */
export function decodeKeyframe(t: TemplateSchema, r: BitReader): Result<number[]> {
  const q: number[] = [];
  for (const f of t.fields) {
    const v = r.uint(f.bits);
    if (v === undefined) return fail("truncated");
    q.push(v);
  }
  return ok(q);
}

/** Reads a delta against the previous quantized values `old`. */
export function decodeDelta(t: TemplateSchema, old: readonly number[], r: BitReader): Result<number[]> {
  const n = t.fields.length;
  if (old.length !== n) return fail("bad_baseline");
  const mask = r.uint(n);
  if (mask === undefined) return fail("truncated");
  const q: number[] = [];
  for (let i = 0; i < n; i++) {
    const f = t.fields[i]!;
    const previous = old[i]!;
    const changed = Math.floor(mask / 2 ** (n - 1 - i)) % 2 === 1;
    if (!changed) {
      q.push(previous);
      continue;
    }
    if (f.diff_bits === 0) {
      const v = r.uint(f.bits);
      if (v === undefined) return fail("truncated");
      q.push(v);
      continue;
    }
    const flag = r.uint(1);
    if (flag === undefined) return fail("truncated");
    if (flag === 0) {
      const v = r.uint(f.bits);
      if (v === undefined) return fail("truncated");
      q.push(v);
      continue;
    }
    const d = r.int(f.diff_bits);
    if (d === undefined) return fail("truncated");
    const size = 2 ** f.bits;
    if (f.type === "angle") {
      q.push((((previous + d) % size) + size) % size);
    } else {
      const v = previous + d;
      if (v < 0 || v >= size) return fail("out_of_range");
      q.push(v);
    }
  }
  return ok(q);
}

/** What a quantized value stands for (positions in 1/1024 m units, headings in 1/65536 turn). */
export function dequantize(f: FieldSchema, q: number): number | string | boolean | undefined {
  switch (f.type) {
    case "angle":
      return q * 2 ** (16 - f.bits);
    case "enum":
    case "bool":
      return f.values?.[q];
    default:
      return f.min + q * f.step;
  }
}

/** How decoded angles are expressed: turns in [0, 1) or radians in [0, 2π). */
export type AngleUnit = "turns" | "radians";

/** A decoded field value. */
export type Value = number | string | boolean;

/**
 * The real value a quantized value stands for: `fixed` in metres, `angle` in turns or radians
 * (`unit`, default radians), `uint` and `int` as integers, `enum` and `bool` as their value. An
 * enum index without a value (never sent by a correct server) answers the index itself.
 */
export function decodeValue(f: FieldSchema, q: number, unit: AngleUnit = "radians"): Value {
  switch (f.type) {
    case "fixed":
      return (f.min + q * f.step) / 1024;
    case "angle": {
      const turns = (q * 2 ** (16 - f.bits)) / 65536;
      return unit === "turns" ? turns : turns * 2 * Math.PI;
    }
    case "enum":
    case "bool":
      return f.values?.[q] ?? q;
    default:
      return f.min + q * f.step;
  }
}
