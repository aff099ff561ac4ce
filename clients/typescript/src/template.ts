import { BitReader, BitWriter } from "./bits.js";

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

/** Whether a quantized value is one of its field's: an enum's index names one of its values. */
const known = (f: FieldSchema, q: number): boolean => f.type !== "enum" || q < (f.values?.length ?? 0);

/**
 * Reads a keyframe: every field's quantized value. Errors: `truncated`, `bad_enum_index` (an
 * enum index past the enum's last value).
 */
export function decodeKeyframe(t: TemplateSchema, r: BitReader): Result<number[]> {
  const q: number[] = [];
  for (const f of t.fields) {
    const v = r.uint(f.bits);
    if (v === undefined) return fail("truncated");
    if (!known(f, v)) return fail("bad_enum_index");
    q.push(v);
  }
  return ok(q);
}

/**
 * Reads a delta against the previous quantized values `old`: the mask (one bit per field, any
 * number of fields), then each changed field. Errors: `truncated`, `out_of_range` (a difference
 * taking a number outside its bits), `bad_enum_index` (an enum's new index past its last
 * value), `bad_baseline` (`old` is not one value per field).
 */
export function decodeDelta(t: TemplateSchema, old: readonly number[], r: BitReader): Result<number[]> {
  const n = t.fields.length;
  if (old.length !== n) return fail("bad_baseline");
  // The mask, first field first, read in chunks of at most 32 bits (a template has up to 255
  // fields: more bits than a number holds exactly).
  const changed: boolean[] = [];
  while (changed.length < n) {
    const size = Math.min(32, n - changed.length);
    const chunk = r.uint(size);
    if (chunk === undefined) return fail("truncated");
    for (let b = size - 1; b >= 0; b--) changed.push(Math.floor(chunk / 2 ** b) % 2 === 1);
  }
  const q: number[] = [];
  for (let i = 0; i < n; i++) {
    const f = t.fields[i]!;
    const previous = old[i]!;
    if (!changed[i]) {
      q.push(previous);
      continue;
    }
    let v: number | undefined;
    // diff_bits 0 (every enum and bool): the value alone; others a flag first (1: a difference).
    const flag = f.diff_bits === 0 ? 0 : r.uint(1);
    if (flag === undefined) return fail("truncated");
    if (flag === 0) {
      v = r.uint(f.bits);
      if (v === undefined) return fail("truncated");
    } else {
      const d = r.int(f.diff_bits);
      if (d === undefined) return fail("truncated");
      const size = 2 ** f.bits;
      if (f.type === "angle") v = (((previous + d) % size) + size) % size;
      else {
        v = previous + d;
        if (v < 0 || v >= size) return fail("out_of_range");
      }
    }
    if (!known(f, v)) return fail("bad_enum_index");
    q.push(v);
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

/**
 * The values of an input layout's fields, by name, in the SDK's units (see `encodeInput`): an
 * object literal, a record, or any type (an interface too) whose properties are all values.
 */
export type InputValues<T = Record<string, Value>> = { readonly [K in keyof T]: Value };

/**
 * The quantized value of a field for a value in the SDK's units (those `decodeValue` answers),
 * exactly as the server quantizes (`Overworld.Template.Field.quantize/2`): `fixed` in metres
 * and `angle` in radians or turns (`unit`) are first rounded to the server's units (1/1024 m,
 * 1/65536 turn); numbers clamp to what the field's bits carry (`0..2^bits-1` quantized; the
 * server then clamps them to the range the game declared, which the handshake does not carry),
 * angles wrap around. Throws a
 * TypeError for a value the field cannot take (not an integer for `int`/`uint`, not a finite
 * number for `fixed`/`angle`, not one of an `enum`'s or `bool`'s values).
 */
export function quantizeValue(f: FieldSchema, v: unknown, unit: AngleUnit = "radians"): number {
  const expected = (what: string) => new TypeError(`field ${f.name} (${f.type}): expected ${what}, got: ${describe(v)}`);
  switch (f.type) {
    case "enum":
    case "bool": {
      const i = (f.values ?? []).findIndex((x) => x === v);
      if (i < 0) throw expected(`one of ${JSON.stringify(f.values ?? [])}`);
      return i;
    }
    case "angle": {
      if (typeof v !== "number" || !Number.isFinite(v)) throw expected("a finite number");
      const turns = unit === "turns" ? v : v / (2 * Math.PI);
      const units = Math.round(turns * 65536);
      const wrapped = ((units % 65536) + 65536) % 65536;
      return Math.floor(wrapped / 2 ** (16 - f.bits));
    }
    case "fixed": {
      if (typeof v !== "number" || !Number.isFinite(v)) throw expected("a finite number (metres)");
      return clamp(f, Math.round(v * 1024));
    }
    default:
      if (typeof v !== "number" || !Number.isInteger(v)) throw expected("an integer");
      return clamp(f, v);
  }
}

/** The server's clamp: floor((v - min) / step) within 0..2^bits-1. */
function clamp(f: FieldSchema, v: number): number {
  return Math.min(Math.max(Math.floor((v - f.min) / f.step), 0), 2 ** f.bits - 1);
}

function describe(v: unknown): string {
  if (typeof v === "string") return JSON.stringify(v);
  if (typeof v === "bigint") return `${v}n`;
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}

/**
 * The payload of an INPUT for a zone's input layout (the handshake's `input`): every field's
 * value quantized (`quantizeValue`) and bit-packed as a keyframe, most significant bit first,
 * zero bits to the byte boundary, byte for byte what `Overworld.Template.encode_input/2`
 * makes. `values` holds each field's value by name in the SDK's units: `fixed` in metres,
 * `angle` in radians (or turns with `unit`), `int` and `uint` integers, `enum` and `bool`
 * their values; other names are ignored. Throws a TypeError for a missing field or a value a
 * field cannot take.
 */
export function encodeInput<T extends InputValues<T>>(layout: TemplateSchema, values: T, unit: AngleUnit = "radians"): Uint8Array {
  if (typeof values !== "object" || values === null) throw new TypeError(`input ${layout.name}: expected an object of field values`);
  const byName = values as Readonly<Record<string, unknown>>;
  const w = new BitWriter();
  for (const f of layout.fields) {
    const v = byName[f.name];
    if (v === undefined) throw new TypeError(`input ${layout.name}: field ${f.name} is missing`);
    try {
      w.uint(f.bits, quantizeValue(f, v, unit));
    } catch (e) {
      if (e instanceof TypeError) throw new TypeError(`input ${layout.name}: ${e.message}`);
      throw e;
    }
  }
  return w.toBytes();
}
