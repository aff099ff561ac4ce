// The map's camera: which world point is at the canvas centre, and how many pixels a metre is.
// World coordinates are metres with y growing downwards, as on the screen (the server's x and y
// as they are: row 0 of the grid is at the top).

export interface Rect {
  x0: number;
  y0: number;
  x1: number;
  y1: number;
}

export class Camera {
  /** The world point (metres) at the canvas centre. */
  cx = 0;
  cy = 0;
  /** Pixels per metre. */
  zoom = 1;
  /** The viewport in pixels. */
  width = 1;
  height = 1;
  readonly minZoom: number;
  readonly maxZoom: number;

  constructor(minZoom = 1e-4, maxZoom = 512) {
    this.minZoom = minZoom;
    this.maxZoom = maxZoom;
  }

  resize(width: number, height: number): void {
    this.width = Math.max(1, width);
    this.height = Math.max(1, height);
  }

  screenX(x: number): number {
    return (x - this.cx) * this.zoom + this.width / 2;
  }

  screenY(y: number): number {
    return (y - this.cy) * this.zoom + this.height / 2;
  }

  worldX(sx: number): number {
    return (sx - this.width / 2) / this.zoom + this.cx;
  }

  worldY(sy: number): number {
    return (sy - this.height / 2) / this.zoom + this.cy;
  }

  /** Moves the view by a drag of (dx, dy) pixels: what was under the pointer stays under it. */
  panBy(dx: number, dy: number): void {
    this.cx -= dx / this.zoom;
    this.cy -= dy / this.zoom;
  }

  /** Zooms by `factor` keeping the world point under the screen point (sx, sy) where it is. */
  zoomAt(sx: number, sy: number, factor: number): void {
    if (!(factor > 0) || !Number.isFinite(factor)) return;
    const x = this.worldX(sx);
    const y = this.worldY(sy);
    this.zoom = clamp(this.zoom * factor, this.minZoom, this.maxZoom);
    this.cx = x - (sx - this.width / 2) / this.zoom;
    this.cy = y - (sy - this.height / 2) / this.zoom;
  }

  centreOn(x: number, y: number): void {
    this.cx = x;
    this.cy = y;
  }

  /** Shows the whole rectangle (metres), centred, with `margin` (a fraction of the viewport) around it. */
  fit(r: Rect, margin = 0.03): void {
    const w = Math.max(r.x1 - r.x0, 1e-6);
    const h = Math.max(r.y1 - r.y0, 1e-6);
    const scale = 1 - 2 * margin;
    this.zoom = clamp(Math.min((this.width * scale) / w, (this.height * scale) / h), this.minZoom, this.maxZoom);
    this.cx = (r.x0 + r.x1) / 2;
    this.cy = (r.y0 + r.y1) / 2;
  }

  /** The world rectangle the viewport shows (metres). */
  visible(): Rect {
    return { x0: this.worldX(0), y0: this.worldY(0), x1: this.worldX(this.width), y1: this.worldY(this.height) };
  }
}

/**
 * The zoom factor of a wheel event: exponential in the scroll distance, so zooming in then out
 * by the same distance comes back; a line is 16 pixels, a page 400. Scrolling down zooms out.
 */
export function wheelFactor(deltaY: number, deltaMode = 0): number {
  const px = deltaMode === 1 ? deltaY * 16 : deltaMode === 2 ? deltaY * 400 : deltaY;
  return Math.exp(-clamp(px, -500, 500) * 0.0015);
}

export function clamp(v: number, lo: number, hi: number): number {
  return v < lo ? lo : v > hi ? hi : v;
}
