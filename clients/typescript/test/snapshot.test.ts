import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { WorldView, fromHex, type TemplateSchema } from "../src/index.js";

const load = (name: string) =>
  JSON.parse(readFileSync(fileURLToPath(new URL(`../../../protocol/vectors/${name}`, import.meta.url)), "utf8"));
const snapshots = load("snapshots.json") as {
  templates: number[];
  snapshots: Array<{ tick: number; hex: string; view: Array<{ cell: number; entities: Array<{ id: number; template: number; q: number[] }> }> }>;
};
const all = (load("templates.json") as { templates: TemplateSchema[] }).templates;
const templates = snapshots.templates.map((id) => all.find((t) => t.id === id)!);

describe("snapshot vectors", () => {
  it("a view applying the snapshots in order holds exactly the expected entities", () => {
    const view = new WorldView();
    expect(snapshots.snapshots.length).toBeGreaterThanOrEqual(4);
    for (const s of snapshots.snapshots) {
      expect(view.apply(fromHex(s.hex), templates)).toEqual({ ok: true, value: s.tick });
      const got = [...view.cells.entries()]
        .sort(([a], [b]) => a - b)
        .map(([cell, es]) => ({ cell, entities: es.map((e) => ({ id: e.id, template: templates[e.template]!.id, q: e.q })) }));
      expect(got).toEqual(s.view);
      expect(view.tick).toBe(s.tick);
    }
  });

  it("leaves the view unchanged when a snapshot is bad", () => {
    const view = new WorldView();
    const first = fromHex(snapshots.snapshots[0]!.hex);
    expect(view.apply(first, templates).ok).toBe(true);
    const before = JSON.stringify([...view.cells]);
    const second = fromHex(snapshots.snapshots[1]!.hex);
    for (let cut = 1; cut < second.length; cut++) {
      const r = view.apply(second.subarray(0, cut), templates);
      expect(r.ok).toBe(false);
      expect(JSON.stringify([...view.cells])).toBe(before);
    }
    let seed = 7;
    for (let i = 0; i < 3000; i++) {
      const copy = second.slice();
      seed = (seed * 1103515245 + 12345) >>> 0;
      copy[1 + (seed % (copy.length - 1))] = seed >>> 24;
      const v = new WorldView();
      v.apply(first, templates);
      expect(() => v.apply(copy, templates)).not.toThrow();
    }
  });
});

const frames = load("frames.json") as {
  templates: number[];
  frames: Array<{ tick: number; hex: string; left: number; deferred: number; cells: number[]; entities: Array<{ id: number; template: number; q: number[] }> }>;
};
const frameTemplates = frames.templates.map((id) => all.find((t) => t.id === id)!);

describe("frame vectors (a real observer's frames)", () => {
  it("a view applying the frames in order holds exactly the expected cells and entities", () => {
    const view = new WorldView();
    expect(frames.frames.length).toBeGreaterThanOrEqual(30);
    for (const f of frames.frames) {
      expect(view.apply(fromHex(f.hex), frameTemplates)).toEqual({ ok: true, value: f.tick });
      expect([...view.cells.keys()].sort((a, b) => a - b)).toEqual(f.cells);
      const got = [...view.entities().values()]
        .sort((a, b) => a.id - b.id)
        .map((e) => ({ id: e.id, template: frameTemplates[e.template]!.id, q: e.q }));
      expect(got).toEqual(f.entities);
    }
  });

  it("refuses a frame whose baseline the view does not hold, and stays unchanged", () => {
    const view = new WorldView();
    expect(view.apply(fromHex(frames.frames[0]!.hex), frameTemplates).ok).toBe(true);
    expect(view.apply(fromHex(frames.frames[1]!.hex), frameTemplates).ok).toBe(true);
    const before = JSON.stringify([...view.cells]);
    // Frame 4 is a delta against tick 3, which this view never saw.
    expect(view.apply(fromHex(frames.frames[3]!.hex), frameTemplates)).toEqual({ ok: false, error: "unknown_baseline" });
    expect(JSON.stringify([...view.cells])).toBe(before);
    expect(view.tick).toBe(2);
  });
});
