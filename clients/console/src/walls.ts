// The walls of the zone watched: the static obstacles of its physics map (the operator API's
// `zones/:ref/obstacles`, metres, the same world coordinates as the entities), fetched once
// when the map starts watching and written into the frame's pixels each frame (src/render.ts),
// after the grid and before the entities: under them, as the floor is. Boxes are filled
// rectangles, circles filled discs, each at least one pixel, so a thin wall stays visible when
// the whole world is fitted.
import type { Obstacles } from "./api.js";
import type { Camera, Rect } from "./camera.js";

/** A rectangle of canvas pixels: columns `xa` to `xb - 1`, rows `ya` to `yb - 1`. */
export interface PixelRect {
  xa: number;
  xb: number;
  ya: number;
  yb: number;
}

/** What a frame drew of the walls: the boxes and circles with a pixel on the canvas. */
export interface WallsDrawn {
  boxes: number;
  circles: number;
}

/** A rectangle of the world (metres) on the canvas through the camera: its edges rounded to whole pixels. */
export function screenRect(r: Rect, camera: Camera): PixelRect {
  return {
    xa: Math.round(camera.screenX(r.x0)),
    xb: Math.round(camera.screenX(r.x1)),
    ya: Math.round(camera.screenY(r.y0)),
    yb: Math.round(camera.screenY(r.y1)),
  };
}

/**
 * A box of the world (metres, `x0 ≤ x1`, `y0 ≤ y1`) on a canvas of `w × h` pixels through the
 * camera: its edges rounded to whole pixels (`screenRect`, as the world's and the grid's are), at
 * least one pixel wide and high, clipped to the canvas; null when none of it is on the canvas.
 */
export function boxOnCanvas(x0: number, y0: number, x1: number, y1: number, camera: Camera, w: number, h: number): PixelRect | null {
  let { xa, xb, ya, yb } = screenRect({ x0, y0, x1, y1 }, camera);
  if (xb <= xa) xb = xa + 1;
  if (yb <= ya) yb = ya + 1;
  xa = Math.max(0, xa);
  ya = Math.max(0, ya);
  xb = Math.min(w, xb);
  yb = Math.min(h, yb);
  return xa < xb && ya < yb ? { xa, xb, ya, yb } : null;
}

/**
 * Fills a disc of centre (sx, sy) and radius `r` (canvas pixels) into a `w × h` buffer: the
 * pixels whose centre is inside it, row by row (a disc too small for any: the pixel under its
 * centre). Answers whether any pixel was on the canvas.
 */
export function fillDisc(px: Uint32Array, w: number, h: number, sx: number, sy: number, r: number, c: number): boolean {
  if (!(r > 0) || sx + r < 0 || sy + r < 0 || sx - r >= w || sy - r >= h) return false;
  let any = false;
  // (Pixel x's centre is x + 0.5: the rows and columns whose centre is within [a, b] are
  // ceil(a - 0.5) to floor(b - 0.5), so a disc comes out symmetric about its centre.)
  const ya = Math.max(0, Math.ceil(sy - r - 0.5));
  const yb = Math.min(h - 1, Math.floor(sy + r - 0.5));
  for (let y = ya; y <= yb; y++) {
    const dy = y + 0.5 - sy;
    const q = r * r - dy * dy;
    if (q < 0) continue;
    const half = Math.sqrt(q);
    const xa = Math.max(0, Math.ceil(sx - half - 0.5));
    const xb = Math.min(w, Math.floor(sx + half - 0.5) + 1);
    if (xa >= xb) continue;
    px.fill(c, y * w + xa, y * w + xb);
    any = true;
  }
  if (any) return true;
  // (No pixel's centre inside it: the pixel under its centre.)
  const x = Math.floor(sx);
  const y = Math.floor(sy);
  if (x < 0 || y < 0 || x >= w || y >= h) return false;
  px[y * w + x] = c;
  return true;
}

/** Writes the walls into a `w × h` pixel buffer in colour `c` through the camera; counts what is on the canvas. */
export function drawWalls(px: Uint32Array, w: number, h: number, walls: Obstacles, camera: Camera, c: number): WallsDrawn {
  let boxes = 0;
  for (const [x0, y0, x1, y1] of walls.boxes) {
    const r = boxOnCanvas(x0, y0, x1, y1, camera, w, h);
    if (r === null) continue;
    boxes++;
    for (let y = r.ya; y < r.yb; y++) px.fill(c, y * w + r.xa, y * w + r.xb);
  }
  let circles = 0;
  for (const [cx, cy, r] of walls.circles) if (fillDisc(px, w, h, camera.screenX(cx), camera.screenY(cy), r * camera.zoom, c)) circles++;
  return { boxes, circles };
}
