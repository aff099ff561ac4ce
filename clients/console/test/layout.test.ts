import { describe, expect, it } from "vitest";
import { toZone, type ZoneInfo } from "../src/api.js";
import { borders, gridPosition, runs, targets, zoneAt } from "../src/layout.js";
import { cellOf } from "../src/render.js";

const zone = (o: Record<string, unknown>): ZoneInfo => toZone(o);
const grid = { width: 100, height: 100, cols: 11, rows: 11, cellSize: 10 };

describe("watch targets", () => {
  it("a world's zones are one target named by the world; other zones one each, in order", () => {
    const ts = targets([
      zone({ ref: "a", id: "arena", name: "arena", watch: "arena" }),
      zone({ ref: "w00", id: "{w, {0, 0}}", name: null, watch: "w", world: "w" }),
      zone({ ref: "w10", id: "{w, {1, 0}}", name: null, watch: "w", world: "w" }),
      // (A zone the server serves under no name cannot be watched.)
      zone({ ref: "x", id: "hidden", name: null, watch: null }),
    ]);
    expect(ts.map((t) => [t.name, t.world, t.zones.map((z) => z.ref)])).toEqual([
      ["arena", false, ["a"]],
      ["w", true, ["w00", "w10"]],
    ]);
  });
});

describe("zone borders", () => {
  it("cells shared out as Overworld.World.Layout does: even runs, the first ones a cell longer", () => {
    expect(runs(11, 2)).toEqual([
      [0, 6],
      [6, 5],
    ]);
    expect(runs(10, 3)).toEqual([
      [0, 4],
      [4, 3],
      [7, 3],
    ]);
  });

  it("a grid of zones from their ids: regions of whole cells, the last to the world's edge", () => {
    const t = targets(["0, 0", "1, 0", "0, 1", "1, 1"].map((p) => zone({ ref: p, id: `{w, {${p}}}`, watch: "w", world: "w" })))[0]!;
    const bs = borders(t, grid);
    expect(bs.map((b) => [b.label, b.rect])).toEqual([
      ["0,0", { x0: 0, y0: 0, x1: 60, y1: 60 }],
      ["1,0", { x0: 60, y0: 0, x1: 100, y1: 60 }],
      ["0,1", { x0: 0, y0: 60, x1: 60, y1: 100 }],
      ["1,1", { x0: 60, y0: 60, x1: 100, y1: 100 }],
    ]);
    // (Overworld.World.Layout's doctest: x 4.0, y 71.5 is zone {0, 1}.)
    expect(zoneAt(t, bs, 4.0, 71.5)?.ref).toBe("0, 1");
    expect(zoneAt(t, bs, 99, 1)?.ref).toBe("1, 0");
  });

  it("none for a single zone or unknown layouts", () => {
    expect(borders(targets([zone({ ref: "s", id: "s", name: "s", watch: "s" })])[0]!, grid)).toEqual([]);
    const odd = targets([zone({ ref: "a", id: "north", watch: "w", world: "w" }), zone({ ref: "b", id: "south", watch: "w", world: "w" })])[0]!;
    expect(borders(odd, grid)).toEqual([]);
    expect(zoneAt(odd, [], 1, 1)?.ref).toBe("a");
  });

  it("reads a zone's grid position from its id or name", () => {
    expect(gridPosition(zone({ id: "{goblins, {3, 12}}" }))).toEqual({ col: 3, row: 12 });
    expect(gridPosition(zone({ id: "x", name: "goblins/1,0" }))).toEqual({ col: 1, row: 0 });
    expect(gridPosition(zone({ id: "x", name: "y" }))).toBeNull();
  });
});

describe("cell keys", () => {
  it("a key's column and row (a border of one cell around the grid; band keys fold back)", () => {
    // key = (row + 1) * (cols + 2) + col + 1
    expect(cellOf(1 * 13 + 1, 11, 11)).toEqual({ col: 0, row: 0 });
    expect(cellOf(3 * 13 + 5, 11, 11)).toEqual({ col: 4, row: 2 });
    expect(cellOf(3 * 13 + 5 + 13 * 13 * 2, 11, 11)).toEqual({ col: 4, row: 2 });
    expect(cellOf(0, 11, 11)).toEqual({ col: -1, row: -1 });
  });
});
