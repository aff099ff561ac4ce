// A line chart on a canvas: a few series over the last minutes, the y axis from 0 to a round
// number above the largest value, a legend with each series' newest value. No library.
import type { Series } from "./ring.js";

export interface Line {
  label: string;
  colour: string;
  series: Series;
}

/** The smallest 1, 2 or 5 × 10^k at or above `v` (1 for nothing to show). */
export function niceCeiling(v: number): number {
  if (!(v > 0) || !Number.isFinite(v)) return 1;
  const p = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 5, 10]) if (m * p >= v - p * 1e-9) return m * p;
  return 10 * p;
}

/** A value for a legend: 3 significant digits, k/M/G for large ones. */
export function formatValue(v: number, unit = ""): string {
  if (!Number.isFinite(v)) return "–";
  const a = Math.abs(v);
  const u = unit === "" ? "" : ` ${unit}`;
  if (a >= 1e9) return `${(v / 1e9).toPrecision(3)} G${unit}`;
  if (a >= 1e6) return `${(v / 1e6).toPrecision(3)} M${unit}`;
  if (a >= 1e4) return `${(v / 1e3).toPrecision(3)} k${unit}`;
  if (a >= 100 || Number.isInteger(v)) return `${Math.round(v)}${u}`;
  return `${v.toPrecision(3)}${u}`;
}

export function drawChart(canvas: HTMLCanvasElement, title: string, unit: string, lines: Line[], now: number, windowMs: number): void {
  const width = Math.max(1, Math.floor(canvas.clientWidth));
  const height = Math.max(1, Math.floor(canvas.clientHeight));
  if (canvas.width !== width) canvas.width = width;
  if (canvas.height !== height) canvas.height = height;
  const ctx = canvas.getContext("2d");
  if (ctx === null) return;
  ctx.fillStyle = "#161a21";
  ctx.fillRect(0, 0, width, height);
  const left = 44;
  const top = 20;
  const right = 8;
  const bottom = 16;
  const pw = width - left - right;
  const ph = height - top - bottom;
  if (pw <= 0 || ph <= 0) return;
  const since = now - windowMs;
  let max = 0;
  for (const l of lines) max = Math.max(max, l.series.max(since));
  const top_ = niceCeiling(max);
  ctx.strokeStyle = "#2c323e";
  ctx.lineWidth = 1;
  ctx.beginPath();
  for (let k = 0; k <= 4; k++) {
    const y = Math.round(top + (ph * k) / 4) + 0.5;
    ctx.moveTo(left, y);
    ctx.lineTo(left + pw, y);
  }
  ctx.stroke();
  ctx.fillStyle = "#8a93a3";
  ctx.font = "11px sans-serif";
  ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  ctx.fillText(formatValue(top_), left - 4, top);
  ctx.fillText("0", left - 4, top + ph);
  ctx.textAlign = "left";
  ctx.fillText(`−${Math.round(windowMs / 60_000)} min`, left, height - 7);
  ctx.textAlign = "right";
  ctx.fillText("now", left + pw, height - 7);
  ctx.textAlign = "left";
  ctx.fillStyle = "#d6dbe4";
  ctx.font = "12px sans-serif";
  ctx.fillText(title, 4, 10);
  let lx = Math.min(width - 10, ctx.measureText(title).width + 16);
  ctx.font = "11px sans-serif";
  for (const l of lines) {
    const s = l.series;
    ctx.strokeStyle = l.colour;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    let pen = false;
    for (let i = 0; i < s.length; i++) {
      const t = s.time(i);
      const v = s.value(i);
      if (t < since || !Number.isFinite(v)) {
        pen = false;
        continue;
      }
      const x = left + ((t - since) / windowMs) * pw;
      const y = top + ph - (Math.min(v, top_) / top_) * ph;
      if (pen) ctx.lineTo(x, y);
      else ctx.moveTo(x, y);
      pen = true;
    }
    ctx.stroke();
    const text = `${l.label} ${formatValue(s.last(), unit)}`;
    ctx.fillStyle = l.colour;
    ctx.fillText(text, lx, 10);
    lx += ctx.measureText(text).width + 12;
  }
}
