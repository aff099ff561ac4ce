import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { WorldView, type TemplateSchema } from "../src/index.js";
import { ByteWriter, fromHex } from "../src/protocol.js";
import { TEMPLATES, encodeSnapshot, qm, type TestEntity } from "./helpers.js";

const load = (name: string) =>
  JSON.parse(readFileSync(fileURLToPath(new URL(`../../../protocol/vectors/${name}`, import.meta.url)), "utf8"));
const snapshots = load("snapshots.json") as {
  templates: number[];
  snapshots: Array<{
    tick: number;
    hex: string;
    view: Array<{ cell: number; entities: Array<{ id: number; template: number; q: number[] }> }>;
    ticks: Array<[number, number]>;
    entities: Array<{ id: number; template: number; q: number[] }>;
  }>;
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
      expect([...view.ticks.entries()].sort(([a], [b]) => a - b)).toEqual(s.ticks);
      for (const [cell, tick] of s.ticks) expect(view.cellTick(cell)).toBe(tick);
      const entities = [...view.entities().values()]
        .sort((a, b) => a.id - b.id)
        .map((e) => ({ id: e.id, template: templates[e.template]!.id, q: e.q }));
      expect(entities).toEqual(s.entities);
    }
  });

  it("protocol 2's cases: unknown cells are empty; a held-back cell keeps its tick and its stale copy loses", () => {
    const view = new WorldView();
    const steps = snapshots.snapshots;
    for (const s of steps.slice(0, -3)) expect(view.apply(fromHex(s.hex), templates).ok).toBe(true);
    // Step n-3: a delta for a cell never held (arrivals only), a cell leaving that was never held.
    const [a, b, c] = steps.slice(-3);
    expect(view.apply(fromHex(a!.hex), templates)).toEqual({ ok: true, value: a!.tick });
    // Step n-2: cell 11 held back while entity 1 moved from it to cell 13: two copies, 13's is current.
    expect(view.apply(fromHex(b!.hex), templates)).toEqual({ ok: true, value: b!.tick });
    expect(view.isHeldBack(11)).toBe(true);
    expect(view.cellTick(11)).toBeLessThan(b!.tick);
    expect(view.cells.get(11)!.some((e) => e.id === 1)).toBe(true);
    expect(view.cells.get(13)!.some((e) => e.id === 1)).toBe(true);
    expect(view.entities().get(1)!.q).toEqual(b!.view.find((v) => v.cell === 13)!.entities.find((e) => e.id === 1)!.q);
    expect(view.entityCells().get(1)).toBe(13);
    // Step n-1: the cell catches up; every cell is current.
    expect(view.apply(fromHex(c!.hex), templates)).toEqual({ ok: true, value: c!.tick });
    expect(view.heldBack).toEqual([]);
    expect([...view.ticks.values()].every((t) => t === c!.tick)).toBe(true);
  });

  it("leaves the view unchanged when a snapshot is bad", () => {
    const view = new WorldView();
    const first = fromHex(snapshots.snapshots[0]!.hex);
    expect(view.apply(first, templates).ok).toBe(true);
    const state = (v: WorldView) => JSON.stringify([[...v.cells], [...v.ticks], v.heldBack, v.tick, v.inputAck]);
    const before = state(view);
    const second = fromHex(snapshots.snapshots[1]!.hex);
    for (let cut = 1; cut < second.length; cut++) {
      const r = view.apply(second.subarray(0, cut), templates);
      expect(r.ok).toBe(false);
      expect(state(view)).toBe(before);
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
  frames: Array<{
    tick: number;
    hex: string;
    left: number;
    deferred: number;
    behind: number;
    cells: number[];
    ticks: Array<[number, number]>;
    entities: Array<{ id: number; template: number; q: number[] }>;
  }>;
};
const frameTemplates = frames.templates.map((id) => all.find((t) => t.id === id)!);

describe("frame vectors (a real observer's frames)", () => {
  it("a view applying the frames in order holds exactly the expected cells and entities", () => {
    const view = new WorldView();
    expect(frames.frames.length).toBeGreaterThanOrEqual(30);
    for (const f of frames.frames) {
      expect(view.apply(fromHex(f.hex), frameTemplates)).toEqual({ ok: true, value: f.tick });
      expect([...view.cells.keys()].sort((a, b) => a - b)).toEqual(f.cells);
      expect([...view.ticks.entries()].sort(([a], [b]) => a - b)).toEqual(f.ticks);
      expect(view.heldBack.length).toBe(f.behind);
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

  it("include frames that hold cells back", () => {
    expect(frames.frames.some((f) => f.behind > 0 && f.ticks.some(([, t]) => t < f.tick))).toBe(true);
  });
});

describe("WorldView: held-back runs and extensions", () => {
  const goblin = (id: number, x: number): TestEntity => ({ id, template: 0, q: [qm(x), qm(10), 0, 1, 0] });

  it("keeps the tick of held cells listed as held back, ignores listed cells it does not hold, skips extensions", () => {
    const view = new WorldView();
    const first = encodeSnapshot({ tick: 10, cells: [{ key: 30, entities: [goblin(1, 5)] }, { key: 31, entities: [goblin(2, 6)] }, { key: 40, entities: [goblin(3, 7)] }] });
    expect(view.apply(first, TEMPLATES)).toEqual({ ok: true, value: 10 });
    // Tick 11: cells 30..32 and 40 held back (32 is not held), entity 1 moved into cell 50.
    const second = encodeSnapshot({
      tick: 11,
      baseline: 10,
      cells: [{ key: 50, entities: [goblin(1, 9)] }],
      left: [77],
      behind: [[30, 3], [40, 1]],
      extensions: [{ type: 5, bytes: new Uint8Array([1, 2, 3]) }, { type: 600, bytes: new Uint8Array(0) }],
    });
    expect(view.apply(second, TEMPLATES)).toEqual({ ok: true, value: 11 });
    expect(view.heldBack).toEqual([[30, 3], [40, 1]]);
    expect([...view.ticks].sort(([a], [b]) => a - b)).toEqual([[30, 10], [31, 10], [40, 10], [50, 11]]);
    expect(view.cellTick(32)).toBeUndefined();
    expect([view.isHeldBack(29), view.isHeldBack(30), view.isHeldBack(32), view.isHeldBack(33), view.isHeldBack(40), view.isHeldBack(41)]).toEqual([
      false,
      true,
      true,
      false,
      true,
      false,
    ]);
    // Entity 1: in 30 (tick 10) and 50 (tick 11): 50's copy.
    expect(view.entities().get(1)!.q[0]).toBe(qm(9));
    expect(view.entityCells().get(1)).toBe(50);
    expect(view.entities().size).toBe(3);
    // Tick 12: 30 still held back, 31 comes (empty keyframe: dropped), 40 no longer listed: current.
    const third = encodeSnapshot({ tick: 12, baseline: 11, cells: [{ key: 31, entities: [] }], behind: [[30, 1]] });
    expect(view.apply(third, TEMPLATES).ok).toBe(true);
    expect([...view.ticks].sort(([a], [b]) => a - b)).toEqual([[30, 10], [40, 12], [50, 12]]);
    // Tick 13: 30 comes without entity 1.
    const fourth = encodeSnapshot({ tick: 13, baseline: 12, cells: [{ key: 30, entities: [] }] });
    expect(view.apply(fourth, TEMPLATES).ok).toBe(true);
    expect([...view.ticks].sort(([a], [b]) => a - b)).toEqual([[40, 13], [50, 13]]);
    // Baseline 0: everything again, no tick kept.
    const fifth = encodeSnapshot({ tick: 20, cells: [{ key: 30, entities: [goblin(4, 1)] }], behind: [[30, 1]] });
    expect(view.apply(fifth, TEMPLATES).ok).toBe(true);
    expect([...view.ticks]).toEqual([[30, 0]]);
  });

  it("refuses bad runs and bad extensions", () => {
    const head = () => new ByteWriter().u8(0x02).varint(5).varint(0).varint(0).varint(0).varint(0);
    const apply = (b: ByteWriter) => new WorldView().apply(b.toBytes(), TEMPLATES);
    expect(apply(head().varint(1).varint(3).varint(0).varint(0))).toEqual({ ok: false, error: "bad_run" });
    expect(apply(head().varint(1).varint(3).varint(65_537).varint(0))).toEqual({ ok: false, error: "bad_run" });
    expect(apply(head().varint(1).varint(3).varint(65_536).varint(0))).toEqual({ ok: true, value: 5 });
    expect(apply(head().varint(2).varint(3).varint(1))).toEqual({ ok: false, error: "truncated" });
    expect(apply(head().varint(0).varint(1).varint(9).varint(65_537))).toEqual({ ok: false, error: "string_too_long" });
    expect(apply(head().varint(0).varint(1).varint(9).varint(3).u8(1).u8(2))).toEqual({ ok: false, error: "truncated" });
    expect(apply(head().varint(0).varint(1).varint(9).varint(2).u8(1).u8(2))).toEqual({ ok: true, value: 5 });
    expect(apply(head().varint(0).varint(0).u8(0))).toEqual({ ok: false, error: "trailing_bytes" });
    expect(apply(head().varint(0))).toEqual({ ok: false, error: "truncated" });
  });
});
