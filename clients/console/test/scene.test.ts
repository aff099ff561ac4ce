import { describe, expect, it } from "vitest";
import { WorldView, type TemplateSchema } from "../../typescript/src/index.js";
import { fromHex } from "../../typescript/src/protocol.js";
import { encodeSnapshot, GOBLIN, PLAYER, qm } from "../../typescript/test/helpers.js";
import templatesJson from "../../../protocol/vectors/templates.json";
import worldJson from "../../../protocol/vectors/world.json";
import framesJson from "../../../protocol/vectors/frames.json";
import { Camera } from "../src/camera.js";
import { ColourTable } from "../src/colors.js";
import { BAND, HANDED, STALE, Scene, fromHistory, fromView, nearest, positionLayouts } from "../src/scene.js";

const all = (templatesJson as { templates: TemplateSchema[] }).templates;
const byId = (id: number) => all.find((t) => t.id === id)!;

/** The scene's entities as {id, x, y, cell}, by id. */
const entitiesOf = (s: Scene) =>
  Array.from({ length: s.count }, (_, i) => ({ id: s.ids[i]!, x: s.xs[i]!, y: s.ys[i]!, cell: s.cells[i]! })).sort((a, b) => a.id - b.id);

/** What the SDK's own resolution says: every placed entity, with its position and cell. */
function expected(view: WorldView, templates: TemplateSchema[]) {
  const layouts = positionLayouts(templates);
  const { entities, cells } = view.resolve();
  return [...entities.values()]
    .filter((e) => layouts[e.template] !== null)
    .map((e) => {
      const l = layouts[e.template]!;
      return { id: e.id, x: Math.fround(l.xMin + e.q[l.x]! * l.xStep), y: Math.fround(l.yMin + e.q[l.y]! * l.yStep), cell: cells.get(e.id) ?? -1 };
    })
    .sort((a, b) => a.id - b.id);
}

describe("a scene from the SDK's WorldView", () => {
  it("holds exactly WorldView.entities() on the world vectors (band cells, both handoff orders, handed entities)", () => {
    const w = worldJson as { templates: number[]; grid: { cols: number; rows: number }; frames: Array<{ hex: string; handed: number[]; both: number[] }> };
    const templates = w.templates.map(byId);
    const colours = new ColourTable(templates);
    const layouts = positionLayouts(templates);
    const view = new WorldView();
    view.space = (w.grid.cols + 2) * (w.grid.rows + 2);
    const scene = new Scene();
    let handed = 0;
    let band = 0;
    for (const f of w.frames) {
      expect(view.apply(fromHex(f.hex), templates).ok).toBe(true);
      fromView(scene, view, layouts, colours);
      expect(scene.tick).toBe(view.tick);
      expect(entitiesOf(scene)).toEqual(expected(view, templates));
      for (let i = 0; i < scene.count; i++) {
        if (scene.flags[i]! & HANDED) {
          handed++;
          expect(f.handed).toContain(scene.ids[i]);
        }
        if (scene.flags[i]! & BAND) band++;
      }
      // The ids in a band and a region cell at once are drawn once, from the region cell.
      for (const id of f.both) {
        const at = entitiesOf(scene).filter((e) => e.id === id);
        expect(at).toHaveLength(1);
        expect(at[0]!.cell).toBeLessThan(view.space);
      }
    }
    expect(handed).toBeGreaterThan(0);
    expect(band).toBeGreaterThan(0);
  });

  it("holds exactly WorldView.entities() on the frames of a real observer (held-back cells included)", () => {
    const f = framesJson as { templates: number[]; grid: { cols: number; rows: number }; frames: Array<{ hex: string }> };
    const templates = f.templates.map(byId);
    const view = new WorldView();
    view.space = (f.grid.cols + 2) * (f.grid.rows + 2);
    const scene = new Scene();
    for (const frame of f.frames) {
      if (!view.apply(fromHex(frame.hex), templates).ok) continue;
      fromView(scene, view, positionLayouts(templates), new ColourTable(templates));
      expect(entitiesOf(scene)).toEqual(expected(view, templates));
    }
    expect(scene.count).toBeGreaterThan(0);
  });

  it("an entity in a held-back cell and again in a newer one: drawn once, from the newer; held-back ones flagged", () => {
    const templates = [GOBLIN, PLAYER];
    const view = new WorldView();
    view.space = 29 * 29;
    const g = (id: number, x: number) => ({ id, template: 0, q: [qm(x), qm(5), 0, 0, 0] });
    expect(view.apply(encodeSnapshot({ tick: 1, cells: [{ key: 40, entities: [g(1, 1), g(2, 2)] }], templates }), templates).ok).toBe(true);
    // Tick 2: cell 40 held back (still has 1 and 2 at tick 1); entity 1 arrives in cell 41.
    const snap = encodeSnapshot({ tick: 2, baseline: 1, cells: [{ key: 41, entities: [g(1, 13)] }], behind: [[40, 1]], templates });
    expect(view.apply(snap, templates).ok).toBe(true);
    const scene = fromView(new Scene(), view, positionLayouts(templates), new ColourTable(templates));
    const es = entitiesOf(scene);
    expect(es.map((e) => [e.id, e.cell])).toEqual([
      [1, 41],
      [2, 40],
    ]);
    expect(es[0]!.x).toBeCloseTo(13, 6);
    expect(scene.flags[scene.indexOf(2)]! & STALE).toBe(STALE);
    expect(scene.flags[scene.indexOf(1)]).toBe(0);
  });

  it("colours by template and kind, counts each colour, and skips templates without a position", () => {
    const markerless: TemplateSchema = { id: 9, name: "score", fields: [{ name: "n", type: "uint", bits: 8, min: 0, step: 1, diff_bits: 0, values: null }] };
    const templates = [GOBLIN, PLAYER, markerless];
    const view = new WorldView();
    const e = (id: number, template: number, q: number[]) => ({ id, template, q });
    const snap = encodeSnapshot({
      tick: 3,
      cells: [{ key: 40, entities: [e(1, 0, [qm(1), qm(1), 0, 0, 0]), e(2, 0, [qm(2), qm(2), 0, 0, 1]), e(3, 1, [qm(3), qm(3), 0]), e(4, 2, [7])] }],
      templates,
    });
    expect(view.apply(snap, templates).ok).toBe(true);
    const colours = new ColourTable(templates);
    const scene = fromView(new Scene(), view, positionLayouts(templates), colours);
    expect(scene.count).toBe(3);
    expect(scene.indexOf(4)).toBe(-1);
    const slot = (id: number) => scene.slots[scene.indexOf(id)];
    expect(slot(1)).toBe(colours.slot(0, 0));
    expect(slot(2)).toBe(colours.slot(0, 1));
    expect(slot(3)).toBe(colours.slot(1));
    expect(scene.perSlot[colours.slot(0, 1)]).toBe(1);
    expect(scene.entries[scene.indexOf(3)]!.id).toBe(3);
  });
});

describe("a scene from a zone's history", () => {
  it("takes templates by name or index and kinds by value; unknown templates get the unknown colour", () => {
    const templates = [GOBLIN, PLAYER];
    const colours = new ColourTable(templates);
    const scene = fromHistory(
      new Scene(),
      77,
      [
        { id: 1, template: "goblin", x: 1.5, y: 2, kind: "warlord" },
        { id: 2, template: 1, x: 3, y: 4 },
        { id: 3, template: "dragon", x: 5, y: 6 },
        { id: 4, template: "goblin", x: 7, y: 8, kind: 1 },
        { id: 5, template: "goblin", x: "9" as never, y: 0 },
      ],
      templates,
      colours,
    );
    expect(scene.tick).toBe(77);
    expect(scene.count).toBe(4);
    expect(scene.indexOf(5)).toBe(-1);
    expect([...scene.slots.subarray(0, 4)]).toEqual([colours.slot(0, 1), colours.slot(1), colours.unknown, colours.slot(0, 1)]);
    expect(scene.xs[0]).toBe(1.5);
    expect(scene.cells[0]).toBe(-1);
  });
});

describe("hit testing a click", () => {
  const scene = fromHistory(
    new Scene(),
    1,
    [
      { id: 10, template: 0, x: 100, y: 100 },
      { id: 11, template: 0, x: 103, y: 100 },
      { id: 12, template: 0, x: 300, y: 300 },
    ],
    [GOBLIN],
    new ColourTable([GOBLIN]),
  );

  it("picks the entity nearest to the clicked point within a radius of pixels", () => {
    const c = new Camera();
    c.resize(800, 600);
    c.zoom = 2;
    c.centreOn(100, 100);
    const click = (sx: number, sy: number, px = 8) => {
      const i = nearest(scene, c.worldX(sx), c.worldY(sy), px / c.zoom);
      return i < 0 ? null : scene.ids[i];
    };
    // Entity 10 is at the canvas centre, 11 six pixels to its right.
    expect(click(400, 300)).toBe(10);
    expect(click(404, 300)).toBe(11);
    expect(click(402, 305)).toBe(10);
    expect(click(420, 300)).toBe(null);
    expect(click(420, 300, 20)).toBe(11);
    // Zoomed out, the same pixels cover more metres.
    c.zoom = 0.01;
    expect(click(400 + 200 * 0.01, 300 + 200 * 0.01)).toBe(12);
  });

  it("finds nothing in an empty scene", () => {
    expect(nearest(new Scene(), 0, 0, 1e9)).toBe(-1);
  });
});
