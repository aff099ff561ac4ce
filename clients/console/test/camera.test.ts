import { describe, expect, it } from "vitest";
import { Camera, wheelFactor } from "../src/camera.js";

const camera = () => {
  const c = new Camera();
  c.resize(800, 600);
  return c;
};

describe("Camera", () => {
  it("puts its centre point at the canvas centre, at zoom pixels per metre", () => {
    const c = camera();
    c.centreOn(100, 50);
    c.zoom = 2;
    expect(c.screenX(100)).toBe(400);
    expect(c.screenY(50)).toBe(300);
    expect(c.screenX(110)).toBe(420);
    expect(c.screenY(40)).toBe(280);
  });

  it("maps screen points back to the same world points", () => {
    const c = camera();
    c.centreOn(-12.5, 333);
    c.zoom = 0.37;
    for (const [x, y] of [
      [0, 0],
      [800, 600],
      [123.4, 567.8],
    ] as const) {
      expect(c.screenX(c.worldX(x))).toBeCloseTo(x, 9);
      expect(c.screenY(c.worldY(y))).toBeCloseTo(y, 9);
    }
  });

  it("pans so that what was under the pointer stays under it", () => {
    const c = camera();
    c.zoom = 4;
    const wx = c.worldX(200);
    const wy = c.worldY(100);
    c.panBy(30, -20);
    expect(c.worldX(230)).toBeCloseTo(wx, 9);
    expect(c.worldY(80)).toBeCloseTo(wy, 9);
  });

  it("zooms about the pointer: the world point under it stays", () => {
    const c = camera();
    c.centreOn(500, 500);
    const wx = c.worldX(100);
    const wy = c.worldY(500);
    c.zoomAt(100, 500, 3);
    expect(c.zoom).toBe(3);
    expect(c.screenX(wx)).toBeCloseTo(100, 9);
    expect(c.screenY(wy)).toBeCloseTo(500, 9);
    c.zoomAt(100, 500, 1 / 3);
    expect(c.zoom).toBeCloseTo(1, 12);
    expect(c.cx).toBeCloseTo(500, 9);
  });

  it("keeps the zoom within its bounds, and ignores factors that are not positive numbers", () => {
    const c = camera();
    c.zoomAt(0, 0, 1e9);
    expect(c.zoom).toBe(c.maxZoom);
    c.zoomAt(0, 0, 1e-12);
    expect(c.zoom).toBe(c.minZoom);
    const before = { ...c };
    c.zoomAt(10, 10, NaN);
    c.zoomAt(10, 10, -2);
    c.zoomAt(10, 10, 0);
    expect({ ...c }).toEqual(before);
  });

  it("fits a rectangle: centred, whole, the tighter axis deciding", () => {
    const c = camera();
    c.fit({ x0: 0, y0: 0, x1: 1000, y1: 1000 }, 0);
    expect(c.zoom).toBe(0.6);
    expect([c.cx, c.cy]).toEqual([500, 500]);
    const v = c.visible();
    expect(v.y0).toBeCloseTo(0, 9);
    expect(v.y1).toBeCloseTo(1000, 9);
    expect(v.x0).toBeLessThan(0);
    c.fit({ x0: 0, y0: 0, x1: 1000, y1: 1000 }, 0.05);
    expect(c.zoom).toBeCloseTo(0.54, 12);
  });

  it("a wheel's zoom factor: down zooms out, up by the same amount undoes it, lines and pages scaled", () => {
    expect(wheelFactor(100)).toBeLessThan(1);
    expect(wheelFactor(-100)).toBeGreaterThan(1);
    expect(wheelFactor(100) * wheelFactor(-100)).toBeCloseTo(1, 12);
    expect(wheelFactor(3, 1)).toBeCloseTo(wheelFactor(48), 12);
    expect(wheelFactor(1, 2)).toBeCloseTo(wheelFactor(400), 12);
    // A huge scroll is bounded.
    expect(wheelFactor(1e6)).toBeCloseTo(wheelFactor(500), 12);
  });
});
