/**
 * Reads bits most significant first, as the server writes them (docs/protocol.md).
 * Never throws: reading past the end answers `undefined`.
 */
export class BitReader {
  private readonly bytes: Uint8Array;
  private pos: number;
  private readonly end: number;

  /** Reads `bitLength` bits of `bytes` (all of them by default), from bit `start`. */
  constructor(bytes: Uint8Array, bitLength: number = bytes.length * 8, start = 0) {
    this.bytes = bytes;
    this.pos = start;
    this.end = Math.min(bitLength, bytes.length * 8);
  }

  /** Bits left. */
  get remaining(): number {
    return this.end - this.pos;
  }

  /** The position in bits from the start of the bytes. */
  get position(): number {
    return this.pos;
  }

  /** An unsigned integer of `n` bits (0..53), or undefined past the end. */
  uint(n: number): number | undefined {
    if (n < 0 || n > 53 || this.pos + n > this.end) return undefined;
    let value = 0;
    let left = n;
    while (left > 0) {
      const byte = this.bytes[this.pos >> 3] ?? 0;
      const offset = this.pos & 7;
      const take = Math.min(8 - offset, left);
      const bits = (byte >> (8 - offset - take)) & ((1 << take) - 1);
      // Multiplication, not shifts: values may exceed 32 bits.
      value = value * 2 ** take + bits;
      this.pos += take;
      left -= take;
    }
    return value;
  }

  /** A two's complement signed integer of `n` bits (1..53), or undefined past the end. */
  int(n: number): number | undefined {
    const u = this.uint(n);
    if (u === undefined) return undefined;
    return u >= 2 ** (n - 1) ? u - 2 ** n : u;
  }
}

/** Bytes from a lowercase or uppercase hex string (test vectors). */
export function fromHex(hex: string): Uint8Array {
  const out = new Uint8Array(hex.length >> 1);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/**
 * Writes bits most significant first, as the server reads them; `toBytes` pads the last byte
 * with zero bits.
 */
export class BitWriter {
  private readonly out: number[] = [];
  private acc = 0;
  private used = 0;
  private length = 0;

  /** Bits written. */
  get bitLength(): number {
    return this.length;
  }

  /** An unsigned integer `v` (0..2^n-1, an integer) of `n` bits (0..53). */
  uint(n: number, v: number): this {
    if (!Number.isInteger(n) || n < 0 || n > 53) throw new RangeError(`bit width out of range: ${n}`);
    if (!Number.isInteger(v) || v < 0 || v >= 2 ** n) throw new RangeError(`${v} does not fit ${n} unsigned bits`);
    for (let i = n - 1; i >= 0; i--) {
      // Division, not shifts: values may exceed 32 bits.
      this.acc = (this.acc << 1) | (Math.floor(v / 2 ** i) % 2);
      if (++this.used === 8) {
        this.out.push(this.acc);
        this.acc = 0;
        this.used = 0;
      }
    }
    this.length += n;
    return this;
  }

  /** A two's complement signed integer `v` (-2^(n-1)..2^(n-1)-1) of `n` bits (1..53). */
  int(n: number, v: number): this {
    if (!Number.isInteger(v) || v < -(2 ** (n - 1)) || v >= 2 ** (n - 1)) throw new RangeError(`${v} does not fit ${n} signed bits`);
    return this.uint(n, v < 0 ? v + 2 ** n : v);
  }

  /** The bits written, zero bits to the byte boundary. */
  toBytes(): Uint8Array {
    const out = Uint8Array.from(this.out);
    if (this.used === 0) return out;
    const padded = new Uint8Array(out.length + 1);
    padded.set(out);
    padded[out.length] = this.acc << (8 - this.used);
    return padded;
  }
}
