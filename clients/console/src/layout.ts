// What the map watches: a zone of its own, or a world of zones (one observer connection: the
// client sees one world), and where the world's zone borders are.
import { zoneLabel, type ZoneInfo } from "./api.js";
import type { Rect } from "./camera.js";
import type { ZoneBorder } from "./render.js";

/** Something to watch: the name for `/ws?zone=NAME` and the zones it covers. */
export interface Target {
  name: string;
  /** True for a world of zones. */
  world: boolean;
  zones: ZoneInfo[];
}

/**
 * The watch targets of the operator API's zone list: the zones of one `watch` name (a world's
 * zones share their world's public name; every other zone has its own) are one target. In the
 * list's order; a zone the server serves under no name (`watch` null) cannot be watched.
 */
export function targets(zones: readonly ZoneInfo[]): Target[] {
  const out: Target[] = [];
  const byName = new Map<string, Target>();
  for (const z of zones) {
    const name = z.watch;
    if (name === null) continue;
    let t = byName.get(name);
    if (t === undefined) {
      t = { name, world: false, zones: [] };
      byName.set(name, t);
      out.push(t);
    }
    if (z.world !== null) t.world = true;
    t.zones.push(z);
  }
  return out;
}

/** A grid of zones' `{col, row}` from a zone's id or name ("{w, {1, 0}}", "goblins/1,0"), or null. */
export function gridPosition(z: ZoneInfo): { col: number; row: number } | null {
  for (const s of [z.id, z.name]) {
    const m = s === null ? null : /(\d+)\s*,\s*(\d+)\D*$/.exec(s);
    if (m !== null) return { col: Number(m[1]), row: Number(m[2]) };
  }
  return null;
}

/** `n` cells in `k` runs as even as can be, the first ones a cell longer (Overworld.World.Layout): [first, count] each. */
export function runs(n: number, k: number): Array<[number, number]> {
  const out: Array<[number, number]> = [];
  let first = 0;
  for (let i = 0; i < k; i++) {
    const len = Math.floor(n / k) + (i < n % k ? 1 : 0);
    out.push([first, len]);
    first += len;
  }
  return out;
}

/**
 * The borders to draw for a target on a world of `width × height` metres with `cols × rows`
 * cells of `cellSize`: for a grid of zones (ids `{col, row}`: the API does not send regions),
 * the regions `Overworld.World.Layout` makes (cells shared out evenly, the last run to the
 * world's far edge). None for a single zone, or zones whose ids are not a grid's.
 */
export function borders(t: Target, grid: { width: number; height: number; cols: number; rows: number; cellSize: number }): ZoneBorder[] {
  if (!t.world || t.zones.length < 2) return [];
  const label = (z: ZoneInfo) => {
    const p = gridPosition(z);
    return p === null ? zoneLabel(z) : `${p.col},${p.row}`;
  };
  const pos = t.zones.map(gridPosition);
  if (pos.some((p) => p === null)) return [];
  const zc = Math.max(...pos.map((p) => p!.col)) + 1;
  const zr = Math.max(...pos.map((p) => p!.row)) + 1;
  const cr = runs(grid.cols, zc);
  const rr = runs(grid.rows, zr);
  return t.zones.map((z, i) => {
    const p = pos[i]!;
    const [c0, cn] = cr[p.col]!;
    const [r0, rn] = rr[p.row]!;
    const edge = (first: number, count: number, total: number, size: number) => (first + count >= total ? size : (first + count) * grid.cellSize);
    const rect: Rect = {
      x0: c0 * grid.cellSize,
      y0: r0 * grid.cellSize,
      x1: edge(c0, cn, grid.cols, grid.width),
      y1: edge(r0, rn, grid.rows, grid.height),
    };
    return { rect, label: label(z) };
  });
}

/** The zone of a target holding a point (by its border), else the target's first zone. */
export function zoneAt(t: Target, bs: readonly ZoneBorder[], x: number, y: number): ZoneInfo | undefined {
  if (bs.length === t.zones.length)
    for (let i = 0; i < bs.length; i++) {
      const r = bs[i]!.rect;
      if (x >= r.x0 && x < r.x1 && y >= r.y0 && y < r.y1) return t.zones[i];
    }
  return t.zones[0];
}
