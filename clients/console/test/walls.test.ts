import { describe, expect, it } from "vitest";
import type { Obstacles } from "../src/api.js";
import { Camera } from "../src/camera.js";
import { boxOnCanvas, drawWalls, fillDisc } from "../src/walls.js";

/** A camera on a `w × h` canvas with world point (cx, cy) at its centre, `zoom` pixels per metre. */
const camera = (w: number, h: number, cx: number, cy: number, zoom: number) => {
  const c = new Camera();
  c.resize(w, h);
  c.centreOn(cx, cy);
  c.zoom = zoom;
  return c;
};

/** The buffer's rows as strings: `#` where a pixel is `c`, `.` elsewhere. */
const rows = (px: Uint32Array, w: number, c = 7) => {
  const out: string[] = [];
  for (let y = 0; y < px.length / w; y++) out.push([...px.subarray(y * w, (y + 1) * w)].map((v) => (v === c ? "#" : ".")).join(""));
  return out;
};

describe("walls on the canvas", () => {
  it("a box's edges go through the camera to whole pixels", () => {
    // World (0, 0) at the canvas's top left corner, 4 pixels a metre.
    const c = camera(400, 300, 50, 37.5, 4);
    expect(boxOnCanvas(30, 20, 40, 22.5, c, 400, 300)).toEqual({ xa: 120, xb: 160, ya: 80, yb: 90 });
    // Dragged by (-100, -60) pixels, then zoomed twice as close about the top left corner:
    // world (25, 15) there, 8 pixels a metre.
    c.panBy(-100, -60);
    c.zoomAt(0, 0, 2);
    expect(boxOnCanvas(30, 20, 40, 22.5, c, 400, 300)).toEqual({ xa: 40, xb: 120, ya: 40, yb: 60 });
  });

  it("a box is clipped to the canvas, at least a pixel thick, and null off it", () => {
    const c = camera(100, 100, 50, 50, 1);
    expect(boxOnCanvas(-30, 40, 130, 60, c, 100, 100)).toEqual({ xa: 0, xb: 100, ya: 40, yb: 60 });
    // A wall 0.2 m thick at 1 pixel a metre: one pixel.
    expect(boxOnCanvas(10, 20.1, 30, 20.3, c, 100, 100)).toEqual({ xa: 10, xb: 30, ya: 20, yb: 21 });
    expect(boxOnCanvas(101, 0, 150, 10, c, 100, 100)).toBeNull();
    expect(boxOnCanvas(0, -20, 10, -1, c, 100, 100)).toBeNull();
  });

  it("a disc fills the pixels whose centre is inside it, clipped; a tiny one is a pixel", () => {
    const w = 9;
    const px = new Uint32Array(w * 9);
    expect(fillDisc(px, w, 9, 4.5, 4.5, 3, 7)).toBe(true);
    expect(rows(px, w)).toEqual([
      ".........",
      "....#....",
      "..#####..",
      "..#####..",
      ".#######.",
      "..#####..",
      "..#####..",
      "....#....",
      ".........",
    ]);
    // Symmetric, and every pixel filled within the radius of the centre.
    for (let y = 0; y < 9; y++)
      for (let x = 0; x < 9; x++) if (Math.hypot(x + 0.5 - 4.5, y + 0.5 - 4.5) < 2.9) expect(px[y * w + x], `${x},${y}`).toBe(7);

    const small = new Uint32Array(w * 9);
    expect(fillDisc(small, w, 9, 2.2, 6.9, 0.3, 7)).toBe(true);
    expect(rows(small, w).join("").indexOf("#")).toBe(6 * w + 2);
    expect(small.filter((v) => v === 7).length).toBe(1);

    // Half off the canvas's left edge; wholly off it; no radius.
    const edge = new Uint32Array(w * 9);
    expect(fillDisc(edge, w, 9, 0, 4.5, 2, 7)).toBe(true);
    expect(rows(edge, w).map((r) => r[0])).toEqual([".", ".", ".", "#", "#", "#", ".", ".", "."]);
    expect(fillDisc(edge, w, 9, -3, 4.5, 2, 7)).toBe(false);
    expect(fillDisc(edge, w, 9, 4, 4, 0, 7)).toBe(false);
    expect(fillDisc(edge, w, 9, 4, 4, NaN, 7)).toBe(false);
  });

  it("draws a map's boxes and circles through the camera and counts those on the canvas", () => {
    const walls: Obstacles = {
      width: 20,
      height: 10,
      boxes: [
        [0, 0, 20, 1],
        [9, 1, 10, 6],
        [30, 0, 40, 10],
      ],
      circles: [
        [4.5, 6.5, 2],
        [-10, -10, 1],
      ],
    };
    // The 20 × 10 m world at 1 pixel a metre on a canvas of its size.
    const c = camera(20, 10, 10, 5, 1);
    const px = new Uint32Array(20 * 10);
    expect(drawWalls(px, 20, 10, walls, c, 7)).toEqual({ boxes: 2, circles: 1 });
    expect(rows(px, 20)).toEqual([
      "####################",
      ".........#..........",
      ".........#..........",
      ".........#..........",
      "....#....#..........",
      "...###...#..........",
      "..#####.............",
      "...###..............",
      "....#...............",
      "....................",
    ]);
    // Zoomed out to a quarter: every wall on the canvas, each at least a pixel.
    c.zoom = 0.25;
    const out = new Uint32Array(20 * 10);
    expect(drawWalls(out, 20, 10, walls, c, 7)).toEqual({ boxes: 3, circles: 2 });
    expect(out.filter((v) => v === 7).length).toBeGreaterThan(0);
  });
});
