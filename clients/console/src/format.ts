// How values are shown: times, byte counts, JSON.

/**
 * A time as the server may send it: milliseconds or seconds since the epoch, or ISO 8601 text;
 * shown in the browser's local time ("–" for none).
 */
export function formatTime(v: string | number | null | undefined): string {
  if (v === null || v === undefined || v === "") return "–";
  let ms: number;
  if (typeof v === "number") ms = v > 1e11 ? v : v * 1000;
  else if (/^\d+$/.test(v)) ms = Number(v) > 1e11 ? Number(v) : Number(v) * 1000;
  else ms = Date.parse(v);
  if (!Number.isFinite(ms)) return String(v);
  const d = new Date(ms);
  const p = (n: number) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

export function formatBytes(v: number | null | undefined): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return "–";
  if (v >= 1 << 30) return `${(v / (1 << 30)).toFixed(1)} GiB`;
  if (v >= 1 << 20) return `${(v / (1 << 20)).toFixed(1)} MiB`;
  if (v >= 1 << 10) return `${(v / (1 << 10)).toFixed(1)} KiB`;
  return `${v} B`;
}

export function formatNumber(v: number | null | undefined, digits = 1): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return "–";
  return Number.isInteger(v) ? String(v) : v.toFixed(digits);
}

/** Any JSON value, indented (the server-side state of an entity). */
export function formatJson(v: unknown): string {
  try {
    return JSON.stringify(v, null, 2) ?? String(v);
  } catch {
    return String(v);
  }
}

/** A decoded field value: numbers to 3 decimals, others as they are. */
export function formatField(v: unknown): string {
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toFixed(3);
  return String(v);
}
