import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { WorldView, type TemplateSchema } from "../src/index.js";
import { BitWriter, ByteWriter, fromHex, indexBits } from "../src/protocol.js";
import { MARKER, TEMPLATES, encodeSnapshot, qm, type TestBlock, type TestEntity } from "./helpers.js";

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
    send_interval: number;
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
      expect(view.sendInterval).toBe(s.send_interval);
    }
  });

  it("use three templates (2-bit indexes), one of them an enum of integers", () => {
    expect(templates.length).toBe(3);
    expect(indexBits(templates.length)).toBe(2);
    const view = new WorldView();
    const seen = new Set<number>();
    for (const s of snapshots.snapshots) {
      view.apply(fromHex(s.hex), templates);
      for (const e of view.entities().values()) seen.add(e.template);
    }
    expect([...seen].sort()).toEqual([0, 1, 2]);
  });

  it("protocol 2's cases: unknown cells are empty; a held-back cell keeps its tick and its stale copy loses; an empty keyframe drops a cell", () => {
    const view = new WorldView();
    const steps = snapshots.snapshots;
    for (const s of steps.slice(0, -5)) expect(view.apply(fromHex(s.hex), templates).ok).toBe(true);
    const [a, b, c, d, e] = steps.slice(-5);
    // Step n-4: a delta for a cell never held (arrivals only), a cell leaving that was never held.
    const fresh = a!.view.map((v) => v.cell).find((k) => !view.cells.has(k))!;
    expect(fresh).toBeDefined();
    expect(view.apply(fromHex(a!.hex), templates)).toEqual({ ok: true, value: a!.tick });
    expect(view.cells.has(fresh)).toBe(true);
    // Step n-3: cell 11 held back while entity 1 moved from it to cell 13: two copies, 13's is
    // current; the runs also name cells not held (ignored); an extension of an unknown type.
    expect(view.apply(fromHex(b!.hex), templates)).toEqual({ ok: true, value: b!.tick });
    expect(view.isHeldBack(11)).toBe(true);
    expect(view.cellTick(11)).toBeLessThan(b!.tick);
    expect(view.heldBack.length).toBeGreaterThan(0);
    const listed = view.heldBack.flatMap(([first, count]) => Array.from({ length: count }, (_, i) => first + i));
    expect(listed.some((k) => !view.cells.has(k))).toBe(true);
    for (const k of listed) if (!view.cells.has(k)) expect(view.cellTick(k)).toBeUndefined();
    expect(view.cells.get(11)!.some((e) => e.id === 1)).toBe(true);
    expect(view.cells.get(13)!.some((e) => e.id === 1)).toBe(true);
    expect(view.entities().get(1)!.q).toEqual(b!.view.find((v) => v.cell === 13)!.entities.find((e) => e.id === 1)!.q);
    expect(view.entityCells().get(1)).toBe(13);
    // Step n-2: the cell catches up; every cell is current.
    expect(view.apply(fromHex(c!.hex), templates)).toEqual({ ok: true, value: c!.tick });
    expect(view.heldBack).toEqual([]);
    expect([...view.ticks.values()].every((t) => t === c!.tick)).toBe(true);
    // Step n-1: a keyframe of count 0 for a held cell: it is no longer held.
    const emptied = [...view.cells.keys()].filter((k) => !d!.view.some((v) => v.cell === k));
    expect(emptied.length).toBe(1);
    const bytes = fromHex(d!.hex);
    expect(bytes[5]).toBe(emptied[0]! * 4); // the block's header: a keyframe of the cell...
    expect(bytes[6]).toBe(0); // ...of no entity
    expect(view.apply(bytes, templates)).toEqual({ ok: true, value: d!.tick });
    expect(view.cells.has(emptied[0]!)).toBe(false);
    expect(view.cellTick(emptied[0]!)).toBeUndefined();
    // Step n: two ticks later, the send interval becomes 2 (extension 1; an unknown one beside it).
    expect(view.sendInterval).toBe(1);
    expect(view.apply(fromHex(e!.hex), templates)).toEqual({ ok: true, value: e!.tick });
    expect(e!.tick - d!.tick).toBe(2);
    expect(view.sendInterval).toBe(2);
  });

  it("refuses an extension 1 that is not exactly one varint of at least 1, the view unchanged", () => {
    const steps = snapshots.snapshots;
    const last = fromHex(steps[steps.length - 1]!.hex);
    // The announcing snapshot ends with its extensions: count 2, {99, ""}, {1, [2]}.
    expect([...last.slice(-6)]).toEqual([2, 99, 0, 1, 1, 2]);
    for (const [bad, why] of [
      [[1, 1, 0], "bad_send_interval"], // k = 0
      [[1, 2, 2, 0], "bad_send_interval"], // a byte after the varint
      [[1, 0], "bad_send_interval"], // no varint
    ] as const) {
      const view = new WorldView();
      for (const s of steps.slice(0, -1)) expect(view.apply(fromHex(s.hex), templates).ok).toBe(true);
      const state = JSON.stringify([[...view.cells], [...view.ticks], view.tick, view.sendInterval]);
      const msg = new Uint8Array([...last.slice(0, -3), ...bad]);
      const r = view.apply(msg, templates);
      expect(r).toEqual({ ok: false, error: why });
      expect(JSON.stringify([[...view.cells], [...view.ticks], view.tick, view.sendInterval])).toBe(state);
    }
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
    left: number[];
    deferred: number;
    behind: Array<[number, number]>;
    cells: number[];
    ticks: Array<[number, number]>;
    entities: Array<{ id: number; template: number; q: number[] }>;
  }>;
};
const frameTemplates = frames.templates.map((id) => all.find((t) => t.id === id)!);
const grid = (load("frames.json") as { grid: { width: number; height: number; cell_size: number; cols: number; rows: number } }).grid;
/** Whether a key is a cell of the frames' grid (not key 0 nor the padding around it). */
const onGrid = (key: number): boolean => {
  const row = Math.floor(key / (grid.cols + 2)) - 1;
  const col = (key % (grid.cols + 2)) - 1;
  return row >= 0 && row < grid.rows && col >= 0 && col < grid.cols;
};

describe("frame vectors (a real observer's frames)", () => {
  it("a view applying the frames in order holds exactly the expected cells and entities", () => {
    const view = new WorldView();
    expect(frames.frames.length).toBeGreaterThanOrEqual(30);
    for (const f of frames.frames) {
      expect(view.apply(fromHex(f.hex), frameTemplates)).toEqual({ ok: true, value: f.tick });
      expect([...view.cells.keys()].sort((a, b) => a - b)).toEqual(f.cells);
      expect([...view.ticks.entries()].sort(([a], [b]) => a - b)).toEqual(f.ticks);
      expect(view.heldBack).toEqual(f.behind);
      for (const [first, count] of f.behind) for (let k = first; k < first + count; k++) expect(view.isHeldBack(k)).toBe(true);
      // Every cell held is on the grid; those the frame let go are no longer held.
      for (const key of view.cells.keys()) expect(onGrid(key)).toBe(true);
      for (const key of f.left) {
        expect(onGrid(key)).toBe(true);
        expect(view.cells.has(key)).toBe(false);
      }
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

  it("are on a grid of the HANDSHAKE's figures", () => {
    expect(grid.cols).toBe(Math.floor(grid.width / grid.cell_size) + 1);
    expect(grid.rows).toBe(Math.floor(grid.height / grid.cell_size) + 1);
    expect(frames.frames.flatMap((f) => f.cells).every(onGrid)).toBe(true);
  });

  it("include frames that hold cells back, list cells that left and runs naming cells not held", () => {
    expect(frames.frames.some((f) => f.behind.length > 0 && f.ticks.some(([, t]) => t < f.tick))).toBe(true);
    expect(frames.frames.some((f) => f.left.length > 0)).toBe(true);
    // Cells in view but empty: listed (left, behind) though the client never held them.
    const view = new WorldView();
    let leftNotHeld = false;
    let behindNotHeld = false;
    for (const f of frames.frames) {
      const before = new Set(view.cells.keys());
      view.apply(fromHex(f.hex), frameTemplates);
      if (f.left.some((k) => !before.has(k))) leftNotHeld = true;
      if (f.behind.some(([first, count]) => Array.from({ length: count }, (_, i) => first + i).some((k) => !view.cells.has(k)))) behindNotHeld = true;
    }
    expect(leftNotHeld).toBe(true);
    expect(behindNotHeld).toBe(true);
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

describe("WorldView: a world of zones (band keys, op 11)", () => {
  const goblin = (id: number, x = 5): TestEntity => ({ id, template: 0, q: [qm(x), qm(10), 0, 1, 0] });
  const player = (id: number, x = 5): TestEntity => ({ id, template: 1, q: [qm(x), qm(20), 7] });
  const space = 1000;
  const band = space + 40;
  const es = [goblin(3), player(9)];
  const moved = player(9, 6);
  // Entity 9 handed away by the zone of band cell 1040 (op 11), and its arrival in region cell 40.
  const handed = { key: band, ops: [0, 3] };
  const arrive = { key: 40, ops: [], arrivals: [moved] };
  const msg = (tick: number, baseline: number, cells: TestBlock[], left: number[] = []) => encodeSnapshot({ tick, baseline, cells, left });
  /** A view of space 1000 at tick 5: band cell 1040 holds entities 3 and 9. */
  const start = () => {
    const view = new WorldView();
    view.space = space;
    expect(view.apply(msg(5, 0, [{ key: band, entities: es }]), TEMPLATES)).toEqual({ ok: true, value: 5 });
    return view;
  };
  const apply = (view: WorldView, tick: number, cells: TestBlock[], left: number[] = []) =>
    expect(view.apply(msg(tick, tick - 1, cells, left), TEMPLATES)).toEqual({ ok: true, value: tick });
  const shown = (view: WorldView) => [...view.entities().values()].sort((a, b) => a.id - b.id).map((e) => [e.id, e.q]);

  it("op 11 (handed to another zone): shown as it was until its id arrives in a cell, at most 8 ticks", () => {
    const v = start();
    const at5 = shown(v);
    expect(at5).toEqual(es.map((e) => [e.id, e.q]));
    // 9 is handed away by the zone of band cell 1040: still shown, as it was.
    apply(v, 6, [handed]);
    expect([...v.cells]).toEqual([[band, [{ id: 3, template: 0, q: goblin(3).q }]]]);
    expect([...v.handed]).toEqual([[9, { entry: { id: 9, template: 1, q: player(9).q }, tick: 6 }]]);
    expect(shown(v)).toEqual(at5);
    expect(v.entityCells().has(9)).toBe(false);
    // Its new zone publishes it in region cell 40: that copy now, the handed one forgotten.
    apply(v, 7, [arrive]);
    expect(v.handed.size).toBe(0);
    expect(v.entities().get(9)).toEqual({ id: 9, template: 1, q: moved.q });
    expect(v.entityCells().get(9)).toBe(40);
    // It walks out of the view later: gone, not shown again from the handed copy.
    apply(v, 8, [], [40]);
    expect(v.entities().has(9)).toBe(false);
    expect(shown(v)).toEqual([[3, goblin(3).q]]);

    // The new copy may come first: the band copy and the region copy at the same tick, the
    // region's shown; then the band's handed op.
    const w = start();
    apply(w, 6, [arrive]);
    expect(w.cells.get(band)!.map((e) => e.id)).toEqual([3, 9]);
    expect([w.cellTick(band), w.cellTick(40)]).toEqual([6, 6]);
    expect(w.entities().get(9)!.q).toEqual(moved.q);
    expect(w.entityCells().get(9)).toBe(40);
    // Without the key space every key is a region key: the higher key's copy (the band's) would win.
    w.space = undefined;
    expect(w.entities().get(9)!.q).toEqual(player(9).q);
    w.space = space;
    apply(w, 7, [handed]);
    expect(w.handed.size).toBe(0);
    expect(w.entities().get(9)!.q).toEqual(moved.q);

    // Never taken up (dropped by its new zone): shown 8 ticks, then gone.
    const u = start();
    apply(u, 6, [handed]);
    for (let t = 7; t <= 14; t++) apply(u, t, []);
    expect(u.entities().get(9)!.q).toEqual(player(9).q);
    expect(u.handed.get(9)!.tick).toBe(6);
    apply(u, 15, []);
    expect(u.entities().has(9)).toBe(false);
    expect(u.handed.size).toBe(0);
  });

  it("a copy at a newer tick wins over the region cell's; baseline 0 forgets the handed", () => {
    const v = start();
    // Both copies at tick 6 (the region's wins); then region cell 40 held back at tick 6 while
    // the band cell's copy changes at tick 7: the newer copy wins, band or not.
    apply(v, 6, [arrive]);
    expect(v.apply(encodeSnapshot({ tick: 7, baseline: 6, cells: [{ raw: deltaOf9() }], behind: [[40, 1]] }), TEMPLATES)).toEqual({ ok: true, value: 7 });
    expect([v.cellTick(band), v.cellTick(40)]).toEqual([7, 6]);
    expect(v.entities().get(9)!.q).toEqual(player(9, 7).q);
    expect(v.entityCells().get(9)).toBe(band);
    // Handed, then a snapshot from scratch (baseline 0): no handed entity.
    const u = start();
    apply(u, 6, [handed]);
    expect(u.handed.size).toBe(1);
    expect(u.apply(msg(7, 0, [{ key: band, entities: [goblin(3)] }]), TEMPLATES)).toEqual({ ok: true, value: 7 });
    expect(u.handed.size).toBe(0);
    expect(u.entities().has(9)).toBe(false);
  });

  it("a refused snapshot leaves handed as it was", () => {
    const v = start();
    apply(v, 6, [handed]);
    const state = JSON.stringify([[...v.cells], [...v.ticks], v.tick, [...v.handed]]);
    // Tick 7: 3 handed too, then a block of kind 2.
    const bad = encodeSnapshot({ tick: 7, baseline: 6, cells: [{ key: band, ops: [3] }, { raw: new ByteWriter().varint(30 * 4 + 2).u8(0).toBytes() }] });
    expect(v.apply(bad, TEMPLATES)).toEqual({ ok: false, error: "bad_block" });
    expect(JSON.stringify([[...v.cells], [...v.ticks], v.tick, [...v.handed]])).toBe(state);
    apply(v, 7, [{ key: band, ops: [3] }]);
    expect([...v.handed.keys()].sort()).toEqual([3, 9]);
    expect([v.handed.get(3)!.tick, v.handed.get(9)!.tick]).toEqual([7, 6]);
    expect(v.cells.size).toBe(0);
  });

  /** A delta block of band cell 1040 (entities 3 and 9): 3 unchanged (00), 9 changed (01): x to 7 m. */
  function deltaOf9(): Uint8Array {
    // The player's mask (x changed), then x whole (flag 0: 5 to 7 m is 128 units, past diff_bits 5).
    const bits = new BitWriter().uint(2, 0).uint(2, 1).uint(3, 0b100).uint(1, 0).uint(20, qm(7));
    return new ByteWriter().varint(band * 4 + 1).bytes(bits.toBytes()).toBytes();
  }
});

describe("WorldView: what a decoder refuses (docs/protocol.md), the view unchanged", () => {
  const goblin = (id: number, x = 5): TestEntity => ({ id, template: 0, q: [qm(x), qm(10), 0, 1, 0] });
  const player = (id: number, x = 5): TestEntity => ({ id, template: 1, q: [qm(x), qm(20), 7] });
  const state = (v: WorldView) => JSON.stringify([[...v.cells], [...v.ticks], v.heldBack, v.tick, v.inputAck, [...v.handed]]);
  /** A view at tick 10 holding cell 30 (goblins 1, 2) and cell 31 (goblin 3). */
  const start = (templates: TemplateSchema[] = TEMPLATES) => {
    const view = new WorldView();
    const first = encodeSnapshot({
      tick: 10,
      cells: [{ key: 30, entities: [goblin(1), goblin(2)] }, { key: 31, entities: [goblin(3)] }],
      templates,
    });
    expect(view.apply(first, templates)).toEqual({ ok: true, value: 10 });
    return view;
  };
  /** Applies a snapshot at tick 11 on `start()`: the result, and checks a refusal left the view as it was. */
  const next = (s: Omit<Parameters<typeof encodeSnapshot>[0], "tick">, templates: TemplateSchema[] = TEMPLATES) => {
    const view = start(templates);
    const before = state(view);
    const r = view.apply(encodeSnapshot({ tick: 11, baseline: 10, templates, ...s }), templates);
    if (!r.ok) expect(state(view)).toBe(before);
    return { r, view };
  };
  const refused = (error: string) => ({ ok: false, error });

  it("bad_id: an id gap of 0 in a keyframe (an id 0 first, or an id twice)", () => {
    expect(next({ cells: [{ key: 40, entities: [goblin(0)] }] }).r).toEqual(refused("bad_id"));
    expect(next({ cells: [{ key: 40, entities: [goblin(4), goblin(4)] }] }).r).toEqual(refused("bad_id"));
    // Baseline 0 too: the view stays as it was.
    const view = start();
    const before = state(view);
    expect(view.apply(encodeSnapshot({ tick: 12, cells: [{ key: 30, entities: [goblin(5), goblin(5)] }] }), TEMPLATES)).toEqual(refused("bad_id"));
    expect(state(view)).toBe(before);
    expect(next({ cells: [{ key: 40, entities: [goblin(4), goblin(5)] }] }).r).toEqual({ ok: true, value: 11 });
  });

  it("bad_id: an arrival gap of 0, an arrival of an id the cell still holds", () => {
    expect(next({ cells: [{ key: 30, ops: [0, 0], arrivals: [goblin(7), goblin(7)] }] }).r).toEqual(refused("bad_id"));
    expect(next({ cells: [{ key: 30, ops: [0, 0], arrivals: [goblin(0)] }] }).r).toEqual(refused("bad_id"));
    // Entity 2 stays (00 or 01) and arrives again: refused.
    expect(next({ cells: [{ key: 30, ops: [0, 0], arrivals: [goblin(2, 8)] }] }).r).toEqual(refused("bad_id"));
    expect(next({ cells: [{ key: 30, ops: [2, 0], arrivals: [goblin(2, 8)] }] }).r).toEqual(refused("bad_id"));
    // A cell's second block in the snapshot: against the cell as the first left it.
    expect(next({ cells: [{ key: 40, entities: [goblin(9)] }, { key: 40, ops: [0], arrivals: [goblin(9)] }] }).r).toEqual(refused("bad_id"));
    // A cell never held holds nothing: any arrival is new.
    expect(next({ cells: [{ key: 40, ops: [], arrivals: [goblin(1), goblin(2)] }] }).r).toEqual({ ok: true, value: 11 });
  });

  it("a template change (10, then an arrival of the same id) and an id moving between cells stay valid", () => {
    const { r, view } = next({ cells: [{ key: 30, ops: [0, 2], arrivals: [player(2, 9)] }, { key: 31, ops: [0], arrivals: [goblin(1, 6)] }, { key: 30, ops: [2, 0] }] });
    expect(r).toEqual({ ok: true, value: 11 });
    expect(view.cells.get(30)).toEqual([{ id: 2, template: 1, q: player(2, 9).q }]);
    expect(view.cells.get(31)!.map((e) => e.id)).toEqual([1, 3]);
    expect(view.entities().get(2)!.template).toBe(1);
  });

  it("op 11 is valid (handed to another zone); bad_block, bad_template_index", () => {
    // Entity 2 leaves cell 30 with op 11: no cell holds it, it is handed (shown as it was).
    const { r, view } = next({ cells: [{ key: 30, ops: [0, 3] }] });
    expect(r).toEqual({ ok: true, value: 11 });
    expect(view.cells.get(30)!.map((e) => e.id)).toEqual([1]);
    expect([...view.handed]).toEqual([[2, { entry: { id: 2, template: 0, q: goblin(2).q }, tick: 11 }]]);
    expect(view.entities().get(2)!.q).toEqual(goblin(2).q);
    expect(view.entityCells().has(2)).toBe(false);
    expect(next({ cells: [{ raw: new ByteWriter().varint(30 * 4 + 2).u8(0).toBytes() }] }).r).toEqual(refused("bad_block"));
    // Three templates: 2-bit indexes, 3 is past the last.
    const three = [...TEMPLATES, MARKER];
    const bits = new BitWriter().uint(1, 0).uint(7, 4).uint(2, 3).uint(4, 0);
    const raw = new ByteWriter().varint(40 * 4).varint(1).bytes(bits.toBytes()).toBytes();
    expect(next({ cells: [{ raw }] }, three).r).toEqual(refused("bad_template_index"));
    expect(next({ cells: [{ key: 40, entities: [{ id: 4, template: 2, q: [2, 9] }] }] }, three).r).toEqual({ ok: true, value: 11 });
  });

  it("bad_enum_index: an enum's index past its values, in a keyframe, an arrival and a delta", () => {
    const three = [...TEMPLATES, MARKER];
    // MARKER's level: 2 bits, 3 values (0..2); 3 is past them.
    const marker = (id: number, level: number): TestEntity => ({ id, template: 2, q: [level, 5] });
    expect(next({ cells: [{ key: 40, entities: [marker(4, 3)] }] }, three).r).toEqual(refused("bad_enum_index"));
    expect(next({ cells: [{ key: 30, ops: [0, 0], arrivals: [marker(4, 3)] }] }, three).r).toEqual(refused("bad_enum_index"));
    expect(next({ cells: [{ key: 40, entities: [marker(4, 2)] }] }, three).r).toEqual({ ok: true, value: 11 });
    // A delta changing the level (diff_bits 0: the value whole) of a marker held in cell 40.
    const view = start(three);
    expect(view.apply(encodeSnapshot({ tick: 11, baseline: 10, cells: [{ key: 40, entities: [marker(4, 1)] }], templates: three }), three).ok).toBe(true);
    const delta = (level: number) => {
      const bits = new BitWriter().uint(2, 1).uint(2, 0b10).uint(2, level);
      return encodeSnapshot({ tick: 12, baseline: 11, cells: [{ raw: new ByteWriter().varint(40 * 4 + 1).bytes(bits.toBytes()).toBytes() }], templates: three });
    };
    const before = state(view);
    expect(view.apply(delta(3), three)).toEqual(refused("bad_enum_index"));
    expect(state(view)).toBe(before);
    expect(view.apply(delta(2), three)).toEqual({ ok: true, value: 12 });
    expect(view.cells.get(40)![0]!.q).toEqual([2, 5]);
  });

  it("varint_too_long: a varint over 8 bytes or of 2^53 and more, a bit varint over 8 groups", () => {
    const view = start();
    const before = state(view);
    const apply = (b: Uint8Array) => {
      const r = view.apply(b, TEMPLATES);
      if (!r.ok) expect(state(view)).toBe(before);
      return r;
    };
    const tail = [0, 0, 0, 0, 0, 0, 0]; // baseline 0, ack, no block, no left, no run, no extension
    // The tick: 9 bytes; 8 bytes of 2^56 - 1; 2^53; then 2^53 - 1 (the largest) and a long 0.
    expect(apply(Uint8Array.from([0x02, ...Array(8).fill(0xff), 0x01, ...tail]))).toEqual(refused("varint_too_long"));
    expect(apply(Uint8Array.from([0x02, ...Array(8).fill(0xff)]))).toEqual(refused("varint_too_long"));
    expect(apply(Uint8Array.from([0x02, ...Array(7).fill(0xff), 0x7f, ...tail]))).toEqual(refused("varint_too_long"));
    expect(apply(Uint8Array.from([0x02, ...Array(7).fill(0x80), 0x10, ...tail]))).toEqual(refused("varint_too_long"));
    expect(apply(Uint8Array.from([0x02, ...Array(7).fill(0xff)]))).toEqual(refused("truncated"));
    // A left key and a run's gap too.
    const head = () => new ByteWriter().u8(0x02).varint(11).varint(10).varint(0).varint(0);
    expect(apply(head().varint(1).bytes(Uint8Array.from(Array(9).fill(0x80))).toBytes())).toEqual(refused("varint_too_long"));
    expect(apply(head().varint(0).varint(1).bytes(Uint8Array.from([...Array(7).fill(0xff), 0x10])).u8(1).varint(0).toBytes())).toEqual(
      refused("varint_too_long"),
    );
    // A bit varint (an id gap) of 9 groups; then of 8 groups but 2^53 (a number does not hold it).
    const gap = (groups: number[]) => {
      const bits = new BitWriter();
      groups.forEach((g, i) => bits.uint(1, i < groups.length - 1 ? 1 : 0).uint(7, g));
      bits.uint(1, 0); // template index
      for (const f of TEMPLATES[0]!.fields) bits.uint(f.bits, 0);
      return new ByteWriter().varint(40 * 4).varint(1).bytes(bits.toBytes()).toBytes();
    };
    expect(apply(encodeSnapshot({ tick: 11, baseline: 10, cells: [{ raw: gap([1, 0, 0, 0, 0, 0, 0, 0, 0]) }] }))).toEqual(refused("varint_too_long"));
    expect(apply(encodeSnapshot({ tick: 11, baseline: 10, cells: [{ raw: gap([0, 0, 0, 0, 0, 0, 0, 16]) }] }))).toEqual(refused("varint_too_long"));
    // 8 groups (the most), a long form: id 5.
    expect(apply(encodeSnapshot({ tick: 11, baseline: 10, cells: [{ raw: gap([5, 0, 0, 0, 0, 0, 0, 0]) }] }))).toEqual({ ok: true, value: 11 });
    expect(view.cells.get(40)!.map((e) => e.id)).toEqual([5]);
    expect(apply(Uint8Array.from([0x02, 0x8c, 0x00, 0x8b, 0x80, 0x00, 0, 0, 0, 0, 0]))).toEqual({ ok: true, value: 12 });
  });

  it("out_of_range and truncated blocks leave the view as it was", () => {
    // Goblin 1's x (20 bits, diff_bits 5) at 0, then a difference of -1.
    const view = new WorldView();
    expect(view.apply(encodeSnapshot({ tick: 1, cells: [{ key: 30, entities: [{ id: 1, template: 0, q: [0, 0, 0, 0, 0] }] }] }), TEMPLATES).ok).toBe(true);
    const before = state(view);
    const bits = new BitWriter().uint(2, 1).uint(5, 0b10000).uint(1, 1).int(5, -1);
    const bad = encodeSnapshot({ tick: 2, baseline: 1, cells: [{ raw: new ByteWriter().varint(30 * 4 + 1).bytes(bits.toBytes()).toBytes() }] });
    expect(view.apply(bad, TEMPLATES)).toEqual(refused("out_of_range"));
    expect(state(view)).toBe(before);
    for (let cut = 1; cut < bad.length; cut++) {
      expect(view.apply(bad.subarray(0, cut), TEMPLATES).ok).toBe(false);
      expect(state(view)).toBe(before);
    }
  });
});
