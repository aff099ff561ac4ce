// Drawing the map on a 2D canvas. The entities, the grid, the walls and the zone borders are
// written as pixels into one ImageData buffer (a Uint32Array view: one store per pixel, no path,
// no state change per entity) and put on the canvas once per frame; the few vector things (the
// selected entity, the zones' labels, the players' views) are drawn on top with the 2D context.
// On software rendering (headless Chromium on two shared cores) this holds 40,000 entities per
// frame where a path per colour with a rect per entity does not.
import type { HeldRun, Obstacles } from "./api.js";
import { clamp, type Camera, type Rect } from "./camera.js";
import { pixel, type ColourTable } from "./colors.js";
import { BAND, HANDED, STALE, type Scene } from "./scene.js";
import { drawWalls, screenRect, type WallsDrawn } from "./walls.js";

export interface Grid {
  cols: number;
  rows: number;
  /** Metres. */
  cellSize: number;
}

export interface ZoneBorder {
  rect: Rect;
  label: string;
}

export interface Overlays {
  /** The world's extent (metres). */
  world: Rect | null;
  grid: Grid | null;
  zones: ZoneBorder[];
  /** The selected entity's index in the scene (-1: none). */
  selected: number;
  showGrid: boolean;
  /** The players' views (null: none, or not shown). */
  views: ViewsOverlay | null;
  /** The zone's walls, its physics map's static obstacles (null: none known). */
  walls: Obstacles | null;
}

/** The players' views (src/views.ts): circles of their view radii, the selected one's held cells. */
export interface ViewsOverlay {
  /** Centre x, y and radius (metres) of each circle, three numbers each: `count` circles. */
  circles: Float64Array;
  count: number;
  /** The selected player's circle (-1: none) and its leave radius (metres; NaN: not known). */
  selected: number;
  leave: number;
  /** The cells the selected player's view holds (rows and columns of cells of `cellSize` metres). */
  held: readonly HeldRun[];
  cellSize: number;
}

export interface FrameInfo {
  /** Entities gone through (every entity of the scene, drawn or outside the viewport). */
  processed: number;
  /** Entities inside the viewport (drawn). */
  drawn: number;
  /** Milliseconds the frame took to draw. */
  ms: number;
  /** The walls with a pixel on the canvas. */
  walls: WallsDrawn;
}

const BG = pixel([17, 19, 24]);
const WORLD = pixel([28, 32, 40]);
const GRID = pixel([44, 50, 62]);
/** The walls: a stone grey-brown, unlike any entity's colour (src/colors.ts) and lighter than the grid. */
const WALL = pixel([124, 114, 98]);
/** What a frame without walls drew of them (shared: nothing mutates a frame's count; MapTab.walls() hands out a copy). */
const NO_WALLS: WallsDrawn = Object.freeze({ boxes: 0, circles: 0 });
const BORDER = pixel([230, 200, 60]);
const BAND_RING = pixel([255, 230, 90]);
const HANDED_RING = pixel([255, 255, 255]);
/** The players' views (vectors), in the players' blue (src/colors.ts). */
const HELD_FILL = "rgba(74, 184, 255, 0.22)";
const VIEW_STROKE = "rgba(74, 184, 255, 0.6)";
const SELECTED_VIEW = "#a8dcff";

export class Renderer {
  readonly canvas: HTMLCanvasElement;
  private readonly ctx: CanvasRenderingContext2D;
  private image: ImageData | null = null;
  private pixels = new Uint32Array(0);
  private w = 0;
  private h = 0;

  constructor(canvas: HTMLCanvasElement) {
    this.canvas = canvas;
    const ctx = canvas.getContext("2d", { alpha: false });
    if (ctx === null) throw new Error("no 2D canvas context");
    this.ctx = ctx;
  }

  /** Sizes the canvas's buffer to its displayed size (CSS pixels: one buffer pixel each). */
  fit(): { width: number; height: number } {
    const width = Math.max(1, Math.floor(this.canvas.clientWidth));
    const height = Math.max(1, Math.floor(this.canvas.clientHeight));
    if (width !== this.w || height !== this.h || this.image === null) {
      this.canvas.width = width;
      this.canvas.height = height;
      this.w = width;
      this.h = height;
      this.image = this.ctx.createImageData(width, height);
      this.pixels = new Uint32Array(this.image.data.buffer);
    }
    return { width, height };
  }

  /** Draws a frame at the canvas's size as of the last `fit()` (the caller fits it first, once a frame). */
  draw(scene: Scene, camera: Camera, colours: ColourTable, o: Overlays): FrameInfo {
    const t0 = performance.now();
    if (this.image === null) this.fit();
    const px = this.pixels;
    const w = this.w;
    const h = this.h;
    px.fill(BG);
    if (o.world !== null) this.fillRect(o.world, camera, WORLD);
    if (o.grid !== null && o.showGrid && o.world !== null) this.grid(o.grid, o.world, camera);
    const walls = o.walls === null ? NO_WALLS : drawWalls(px, w, h, o.walls, camera, WALL);
    for (const z of o.zones) this.strokeRect(z.rect, camera, BORDER);

    // The entities: a square of `s` pixels each, its colour slot's pixel.
    const s = clamp(Math.round(camera.zoom * 0.8), 2, 12);
    const half = s >> 1;
    const zoom = camera.zoom;
    const ox = w / 2 - camera.cx * zoom - half;
    const oy = h / 2 - camera.cy * zoom - half;
    const xs = scene.xs;
    const ys = scene.ys;
    const slots = scene.slots;
    const flags = scene.flags;
    const table = colours.pixels;
    const dim = colours.dim;
    const n = scene.count;
    let drawn = 0;
    for (let i = 0; i < n; i++) {
      const x0 = (xs[i]! * zoom + ox) | 0;
      const y0 = (ys[i]! * zoom + oy) | 0;
      if (x0 >= w || y0 >= h || x0 + s <= 0 || y0 + s <= 0) continue;
      drawn++;
      const f = flags[i]!;
      const c = f & STALE ? dim[slots[i]!]! : table[slots[i]!]!;
      if (x0 >= 0 && y0 >= 0 && x0 + s <= w && y0 + s <= h) {
        let o = y0 * w + x0;
        for (let r = 0; r < s; r++, o += w) for (let k = 0; k < s; k++) px[o + k] = c;
      } else this.square(x0, y0, s, c);
      // Entities in a zone's hysteresis band, and those being handed over, get a ring.
      if (f & (BAND | HANDED)) this.ring(x0 - 1, y0 - 1, s + 2, f & HANDED ? HANDED_RING : BAND_RING);
    }
    this.ctx.putImageData(this.image!, 0, 0);
    if (o.views !== null) this.views(o.views, camera);
    this.vectors(scene, camera, o, s);
    return { processed: n, drawn, ms: performance.now() - t0, walls };
  }

  /** A square clipped to the buffer. */
  private square(x0: number, y0: number, s: number, c: number): void {
    const xa = Math.max(0, x0);
    const xb = Math.min(this.w, x0 + s);
    const ya = Math.max(0, y0);
    const yb = Math.min(this.h, y0 + s);
    for (let y = ya; y < yb; y++) this.pixels.fill(c, y * this.w + xa, y * this.w + xb);
  }

  /** A one-pixel square outline, clipped. */
  private ring(x0: number, y0: number, s: number, c: number): void {
    this.hline(x0, x0 + s, y0, c);
    this.hline(x0, x0 + s, y0 + s - 1, c);
    this.vline(x0, y0, y0 + s, c);
    this.vline(x0 + s - 1, y0, y0 + s, c);
  }

  private hline(xa: number, xb: number, y: number, c: number): void {
    if (y < 0 || y >= this.h) return;
    const a = Math.max(0, xa);
    const b = Math.min(this.w, xb);
    if (a < b) this.pixels.fill(c, y * this.w + a, y * this.w + b);
  }

  private vline(x: number, ya: number, yb: number, c: number): void {
    if (x < 0 || x >= this.w) return;
    const a = Math.max(0, ya);
    const b = Math.min(this.h, yb);
    for (let y = a; y < b; y++) this.pixels[y * this.w + x] = c;
  }

  private fillRect(r: Rect, camera: Camera, c: number): void {
    const { xa, xb, ya, yb } = screenRect(r, camera);
    const a = Math.max(0, xa);
    const b = Math.min(this.w, xb);
    if (a >= b) return;
    for (let y = Math.max(0, ya); y < Math.min(this.h, yb); y++) this.pixels.fill(c, y * this.w + a, y * this.w + b);
  }

  private strokeRect(r: Rect, camera: Camera, c: number): void {
    const { xa, xb, ya, yb } = screenRect(r, camera);
    for (const d of [0, 1]) {
      this.hline(xa, xb, ya + d, c);
      this.hline(xa, xb, yb - 1 - d, c);
      this.vline(xa + d, ya, yb, c);
      this.vline(xb - 1 - d, ya, yb, c);
    }
  }

  /** Grid lines, when cells are at least 6 pixels wide (else they would cover everything). */
  private grid(g: Grid, world: Rect, camera: Camera): void {
    if (g.cellSize * camera.zoom < 6) return;
    const { xa, xb, ya, yb } = screenRect(world, camera);
    const v = camera.visible();
    const c0 = Math.max(0, Math.floor((v.x0 - world.x0) / g.cellSize));
    const c1 = Math.min(g.cols, Math.ceil((v.x1 - world.x0) / g.cellSize));
    // (The grid's last column and row hold the far edges: lines past the world are not drawn.)
    for (let c = c0; c <= c1 && c * g.cellSize <= world.x1 - world.x0; c++) this.vline(Math.round(camera.screenX(world.x0 + c * g.cellSize)), ya, yb, GRID);
    const r0 = Math.max(0, Math.floor((v.y0 - world.y0) / g.cellSize));
    const r1 = Math.min(g.rows, Math.ceil((v.y1 - world.y0) / g.cellSize));
    for (let r = r0; r <= r1 && r * g.cellSize <= world.y1 - world.y0; r++) this.hline(xa, xb, Math.round(camera.screenY(world.y0 + r * g.cellSize)), GRID);
  }

  /** The players' views: the selected one's held cells shaded (one path), then every view circle (one path), the selected one's brighter. */
  private views(v: ViewsOverlay, camera: Camera): void {
    const ctx = this.ctx;
    const cs = v.cellSize;
    if (v.held.length > 0 && cs > 0) {
      ctx.fillStyle = HELD_FILL;
      ctx.beginPath();
      for (const r of v.held) {
        // (Whole pixels, as the grid lines are: the shade meets them.)
        const xa = Math.round(camera.screenX(r.first * cs));
        const xb = Math.round(camera.screenX((r.last + 1) * cs));
        const ya = Math.round(camera.screenY(r.row * cs));
        const yb = Math.round(camera.screenY((r.row + 1) * cs));
        if (xb <= 0 || yb <= 0 || xa >= this.w || ya >= this.h) continue;
        ctx.rect(xa, ya, Math.max(1, xb - xa), Math.max(1, yb - ya));
      }
      ctx.fill();
    }
    if (v.count === 0) return;
    const zoom = camera.zoom;
    const c = v.circles;
    ctx.strokeStyle = VIEW_STROKE;
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let k = 0; k < v.count; k++) {
      if (k === v.selected) continue;
      this.circle(camera.screenX(c[k * 3]!), camera.screenY(c[k * 3 + 1]!), c[k * 3 + 2]! * zoom);
    }
    ctx.stroke();
    const k = v.selected;
    if (k < 0 || k >= v.count) return;
    const x = camera.screenX(c[k * 3]!);
    const y = camera.screenY(c[k * 3 + 1]!);
    ctx.strokeStyle = SELECTED_VIEW;
    ctx.lineWidth = 2;
    ctx.beginPath();
    this.circle(x, y, c[k * 3 + 2]! * zoom);
    ctx.stroke();
    if (Number.isFinite(v.leave)) {
      // The leave radius (cells beyond it leave the view), dashed.
      ctx.lineWidth = 1;
      ctx.setLineDash([5, 5]);
      ctx.beginPath();
      this.circle(x, y, v.leave * zoom);
      ctx.stroke();
      ctx.setLineDash([]);
    }
  }

  /** A circle added to the current path (pixels), unless it is wholly outside the canvas. */
  private circle(x: number, y: number, r: number): void {
    if (!(r > 0) || x + r < 0 || y + r < 0 || x - r > this.w || y - r > this.h) return;
    this.ctx.moveTo(x + r, y);
    this.ctx.arc(x, y, r, 0, Math.PI * 2);
  }

  /** What is drawn as vectors over the pixels: zone labels, the selection. */
  private vectors(scene: Scene, camera: Camera, o: Overlays, s: number): void {
    const ctx = this.ctx;
    if (o.zones.length > 1) {
      ctx.fillStyle = "rgba(230, 200, 60, 0.9)";
      ctx.font = "12px sans-serif";
      for (const z of o.zones) ctx.fillText(z.label, camera.screenX(z.rect.x0) + 6, camera.screenY(z.rect.y0) + 16);
    }
    const i = o.selected;
    if (i >= 0 && i < scene.count) {
      const x = camera.screenX(scene.xs[i]!);
      const y = camera.screenY(scene.ys[i]!);
      ctx.strokeStyle = "#ffffff";
      ctx.lineWidth = 2;
      ctx.beginPath();
      ctx.arc(x, y, Math.max(8, s + 4), 0, Math.PI * 2);
      ctx.stroke();
    }
  }
}

/** The column and row of a cell key of a grid (keys count a border of one cell around it; band keys fold back). -1 when outside. */
export function cellOf(key: number, cols: number, rows: number): { col: number; row: number } {
  const space = (cols + 2) * (rows + 2);
  const k = key % space;
  const col = (k % (cols + 2)) - 1;
  const row = Math.floor(k / (cols + 2)) - 1;
  if (col < 0 || row < 0 || col >= cols || row >= rows) return { col: -1, row: -1 };
  return { col, row };
}
