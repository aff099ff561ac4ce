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
