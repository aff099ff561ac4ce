/**
 * Byte-level pieces of the wire format (docs/protocol.md): varints (unsigned LEB128, at most
 * 8 bytes and below 2^53), zigzag, length-prefixed strings. Readers never throw: a read that
 * fails answers `undefined`, and `error` says why.
 */
export class ByteReader {
  private pos = 0;
  private fault: string | undefined;
  constructor(private readonly bytes: Uint8Array, start = 0) {
    this.pos = start;
  }

  /**
   * Why the first read that answered `undefined` failed: `truncated` (the bytes end inside the
   * value), `varint_too_long` (a varint of more than 8 bytes, or of 2^53 and more) or
   * `string_too_long` (a length over the string's maximum). `truncated` when no read failed.
   */
  get error(): string {
    return this.fault ?? "truncated";
  }

  private refuse(reason: string): undefined {
    this.fault ??= reason;
    return undefined;
  }

  get remaining(): number {
    return this.bytes.length - this.pos;
  }

  get offset(): number {
    return this.pos;
  }

  u8(): number | undefined {
    return this.pos < this.bytes.length ? this.bytes[this.pos++] : this.refuse("truncated");
  }

  u16(): number | undefined {
    if (this.remaining < 2) return this.refuse("truncated");
    const v = (this.bytes[this.pos]! << 8) | this.bytes[this.pos + 1]!;
    this.pos += 2;
    return v;
  }

  /** A varint: at most 8 bytes (longer forms than needed are fine), a value below 2^53. */
  varint(): number | undefined {
    let value = 0;
    for (let shift = 0; shift <= 49; shift += 7) {
      const b = this.u8();
      if (b === undefined) return undefined;
      value += (b & 0x7f) * 2 ** shift;
      if ((b & 0x80) === 0) return value <= Number.MAX_SAFE_INTEGER ? value : this.refuse("varint_too_long");
    }
    // Eight bytes, and the last says another follows.
    return this.refuse("varint_too_long");
  }

  bytesOf(n: number): Uint8Array | undefined {
    if (n < 0 || n > this.remaining) return this.refuse("truncated");
    const out = this.bytes.subarray(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }

  rest(): Uint8Array {
    return this.bytesOf(this.remaining)!;
  }

  /** A string of at most `max` bytes (`string_too_long` past it). */
  string(max = 65535): string | undefined {
    const n = this.varint();
    if (n === undefined) return undefined;
    if (n > max) return this.refuse("string_too_long");
    const b = this.bytesOf(n);
    return b === undefined ? undefined : new TextDecoder().decode(b);
  }
}

/** Builds bytes. */
export class ByteWriter {
  private readonly parts: number[] = [];

  u8(v: number): this {
    this.parts.push(v & 0xff);
    return this;
  }

  u16(v: number): this {
    return this.u8(v >> 8).u8(v);
  }

  varint(v: number): this {
    if (!Number.isSafeInteger(v) || v < 0) throw new RangeError(`varint out of range: ${v}`);
    while (v >= 0x80) {
      this.parts.push((v % 0x80) | 0x80);
      v = Math.floor(v / 0x80);
    }
    this.parts.push(v);
    return this;
  }

  bytes(b: Uint8Array): this {
    for (const x of b) this.parts.push(x);
    return this;
  }

  string(s: string): this {
    const b = new TextEncoder().encode(s);
    return this.varint(b.length).bytes(b);
  }

  toBytes(): Uint8Array {
    return Uint8Array.from(this.parts);
  }
}

export const zigzag = (n: number): number => (n >= 0 ? n * 2 : -n * 2 - 1);
export const unzigzag = (u: number): number => (u % 2 === 0 ? u / 2 : -(u + 1) / 2);
