// Colours of the map: one per template, or per value of a template's `kind` enum (the goblin
// world's goblin and warlord), the same on every page load (chosen from the name, not the order).
import type { TemplateSchema } from "../../typescript/src/index.js";

export type Rgb = readonly [r: number, g: number, b: number];

/** Names with a colour of their own (a template's or a kind's name). */
const NAMED: Readonly<Record<string, Rgb>> = {
  goblin: [95, 191, 74],
  warlord: [232, 84, 58],
  player: [74, 184, 255],
  migrant: [199, 125, 255],
};

/** Well separated colours on a dark background, for any other name. */
const PALETTE: readonly Rgb[] = [
  [240, 200, 70],
  [70, 210, 200],
  [255, 140, 190],
  [160, 200, 90],
  [255, 160, 80],
  [140, 150, 255],
  [220, 220, 220],
  [200, 120, 90],
  [120, 230, 140],
  [230, 110, 230],
  [100, 170, 210],
  [210, 180, 140],
];

/** FNV-1a of a string's UTF-16 code units (32 bits). */
export function hashName(name: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) {
    h ^= name.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

/** The colour of a template or kind name. */
export function colourOf(name: string): Rgb {
  return NAMED[name] ?? PALETTE[hashName(name) % PALETTE.length]!;
}

/** A colour at 45 % of its brightness. */
export function dimmed(c: Rgb): Rgb {
  return [Math.round(c[0] * 0.45), Math.round(c[1] * 0.45), Math.round(c[2] * 0.45)];
}

/** `#rrggbb`. */
export function css(c: Rgb): string {
  return "#" + c.map((v) => v.toString(16).padStart(2, "0")).join("");
}

/** Whether this machine stores a Uint32 least significant byte first (every browser we know). */
export const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/** An opaque colour as one 32-bit pixel of an ImageData buffer (RGBA bytes in memory). */
export function pixel(c: Rgb, littleEndian = LITTLE_ENDIAN): number {
  const [r, g, b] = c;
  return littleEndian ? ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0 : ((r << 24) | (g << 16) | (b << 8) | 255) >>> 0;
}

/** The index of a template's `kind` field (an enum of at least two values), or -1. */
export function kindField(t: TemplateSchema): number {
  return t.fields.findIndex((f) => f.name === "kind" && f.type === "enum" && (f.values?.length ?? 0) > 1);
}

/**
 * The colour slots of a zone's templates (the handshake's list): a template has one slot, or
 * one per value of its `kind` enum; `slot(t, q)` is the slot of template index `t` with the
 * quantized kind `q`. `rgb[slot]`, `pixels[slot]` and `labels[slot]` describe each slot.
 */
export class ColourTable {
  readonly rgb: Rgb[] = [];
  readonly pixels: Uint32Array;
  /** The same colours darker: entities in a cell the server's budget held back (an older tick). */
  readonly dim: Uint32Array;
  readonly labels: string[] = [];
  /** First slot of each template. */
  private readonly base: number[] = [];
  /** The kind field's index of each template (-1: none). */
  readonly kind: number[] = [];
  /** Slot of an unknown template index. */
  readonly unknown: number;

  constructor(templates: readonly TemplateSchema[]) {
    for (const t of templates) {
      const k = kindField(t);
      this.base.push(this.rgb.length);
      this.kind.push(k);
      if (k < 0) {
        this.add(t.name, t.name);
      } else {
        // The first kind is the template's usual look: its own name's colour when it has one.
        for (const [i, v] of (t.fields[k]!.values ?? []).entries()) {
          const name = String(v);
          this.add(i === 0 && NAMED[name] === undefined ? t.name : name, name === t.name ? name : `${t.name}: ${name}`);
        }
      }
    }
    this.unknown = this.rgb.length;
    this.rgb.push([255, 255, 255]);
    this.labels.push("?");
    this.pixels = Uint32Array.from(this.rgb, (c) => pixel(c));
    this.dim = Uint32Array.from(this.rgb, (c) => pixel(dimmed(c)));
  }

  /**
   * A slot coloured by `name`: its own colour, or, when a slot of this table has it already
   * (two names hashing alike), the next palette colour no slot has (while there is one).
   */
  private add(name: string, label: string): void {
    let c = colourOf(name);
    const used = (x: Rgb) => this.rgb.some((y) => y[0] === x[0] && y[1] === x[1] && y[2] === x[2]);
    if (used(c) && NAMED[name] === undefined) {
      const start = hashName(name) % PALETTE.length;
      for (let i = 1; i < PALETTE.length && used(c); i++) c = PALETTE[(start + i) % PALETTE.length]!;
    }
    this.rgb.push(c);
    this.labels.push(label);
  }

  /** The slot of template index `t` whose kind field holds the quantized value `q` (any when it has none). */
  slot(t: number, q = 0): number {
    const base = this.base[t];
    if (base === undefined) return this.unknown;
    return this.kind[t]! < 0 ? base : base + q;
  }

  get size(): number {
    return this.rgb.length;
  }
}
