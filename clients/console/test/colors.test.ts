import { describe, expect, it } from "vitest";
import type { TemplateSchema } from "../../typescript/src/index.js";
import { ColourTable, colourOf, css, hashName, kindField, pixel } from "../src/colors.js";

const field = (name: string, type: "fixed" | "enum", values: string[] | null = null) => ({ name, type, bits: 20, min: 0, step: 16, diff_bits: 5, values });
const GOBLIN: TemplateSchema = { id: 1, name: "goblin", fields: [field("x", "fixed"), field("y", "fixed"), field("kind", "enum", ["goblin", "warlord"])] };
const PLAYER: TemplateSchema = { id: 2, name: "player", fields: [field("x", "fixed"), field("y", "fixed")] };
const CRATE: TemplateSchema = { id: 7, name: "crate", fields: [field("x", "fixed"), field("y", "fixed")] };

describe("colours", () => {
  it("are chosen by name: the same on every load, whatever the templates' order", () => {
    expect(colourOf("crate")).toEqual(colourOf("crate"));
    const a = new ColourTable([GOBLIN, PLAYER, CRATE]);
    const b = new ColourTable([CRATE, PLAYER, GOBLIN]);
    expect(a.rgb[a.slot(2)]).toEqual(b.rgb[b.slot(0)]);
    expect(hashName("abc")).toBe(hashName("abc"));
    expect(hashName("abc")).not.toBe(hashName("abd"));
  });

  it("one slot per template, or per value of its kind enum; the goblin world's kinds apart", () => {
    const t = new ColourTable([GOBLIN, PLAYER, CRATE]);
    expect(kindField(GOBLIN)).toBe(2);
    expect(kindField(PLAYER)).toBe(-1);
    expect(t.slot(0, 0)).toBe(0);
    expect(t.slot(0, 1)).toBe(1);
    expect(t.slot(1)).toBe(2);
    expect(t.slot(1, 5)).toBe(2);
    expect(t.slot(2)).toBe(3);
    expect(t.slot(9)).toBe(t.unknown);
    expect(t.labels).toEqual(["goblin", "goblin: warlord", "player", "crate", "?"]);
    const goblin = t.rgb[t.slot(0, 0)]!;
    const warlord = t.rgb[t.slot(0, 1)]!;
    const player = t.rgb[t.slot(1)]!;
    expect(goblin).not.toEqual(warlord);
    expect(goblin).not.toEqual(player);
    expect(warlord).not.toEqual(player);
    expect(t.pixels.length).toBe(t.size);
  });

  it("pack into ImageData pixels (RGBA bytes in memory) on either byte order", () => {
    expect(pixel([0x11, 0x22, 0x33], true)).toBe(0xff332211);
    expect(pixel([0x11, 0x22, 0x33], false)).toBe(0x112233ff);
    const buf = new Uint32Array([pixel([1, 2, 3])]);
    expect([...new Uint8Array(buf.buffer)]).toEqual([1, 2, 3, 255]);
    expect(css([255, 8, 0])).toBe("#ff0800");
  });
});

describe("colour slots of names that hash alike", () => {
  it("take the next free palette colour, so that a template's kinds stay apart", () => {
    const kinds = (values: string[]): TemplateSchema => ({ id: 3, name: "critter", fields: [field("x", "fixed"), field("y", "fixed"), field("kind", "enum", values)] });
    const t = new ColourTable([kinds(["beetle", "mouse", "newt", "toad", "moth", "slug"])]);
    const seen = new Set(t.rgb.slice(0, 6).map((c) => c.join(",")));
    expect(seen.size).toBe(6);
    // The dimmed colours (held-back cells) are darker versions of the same.
    expect(t.dim.length).toBe(t.pixels.length);
    expect(t.dim[0]).not.toBe(t.pixels[0]);
  });
});
