// The charts' memory: fixed-size ring buffers of (time, value) points, and the status history
// made of them (the last five minutes of GET /api/v1/status, polled every second). Counters the
// server sends as totals since it started (bytes out, overruns, inputs dropped) become rates
// per second between two polls.
import type { StatusReply } from "./api.js";

/** A ring of (time, value) points: pushing past the capacity drops the oldest. */
export class Series {
  readonly capacity: number;
  private readonly t: Float64Array;
  private readonly v: Float64Array;
  private start = 0;
  private n = 0;

  constructor(capacity: number) {
    if (!(capacity >= 1)) throw new RangeError("a series holds at least one point");
    this.capacity = Math.floor(capacity);
    this.t = new Float64Array(this.capacity);
    this.v = new Float64Array(this.capacity);
  }

  get length(): number {
    return this.n;
  }

  push(time: number, value: number): void {
    const i = (this.start + this.n) % this.capacity;
    this.t[i] = time;
    this.v[i] = value;
    if (this.n < this.capacity) this.n++;
    else this.start = (this.start + 1) % this.capacity;
  }

  /** The i-th point, oldest first. */
  time(i: number): number {
    return this.t[(this.start + i) % this.capacity]!;
  }

  value(i: number): number {
    return this.v[(this.start + i) % this.capacity]!;
  }

  /** The newest value (NaN when empty). */
  last(): number {
    return this.n === 0 ? NaN : this.value(this.n - 1);
  }

  lastTime(): number {
    return this.n === 0 ? NaN : this.time(this.n - 1);
  }

  /** Drops the points older than `time`. */
  dropBefore(time: number): void {
    while (this.n > 0 && this.t[this.start]! < time) {
      this.start = (this.start + 1) % this.capacity;
      this.n--;
    }
  }

  /** The largest finite value of the points at or after `since` (0 when none). */
  max(since = -Infinity): number {
    let m = 0;
    for (let i = 0; i < this.n; i++) {
      if (this.time(i) < since) continue;
      const v = this.value(i);
      if (Number.isFinite(v) && v > m) m = v;
    }
    return m;
  }

  toArray(): Array<[number, number]> {
    const out: Array<[number, number]> = [];
    for (let i = 0; i < this.n; i++) out.push([this.time(i), this.value(i)]);
    return out;
  }
}

/**
 * The rate per second of a counter between two readings `dt` ms apart: NaN when there is no
 * earlier reading, the time did not advance, or the counter went back (the server restarted).
 */
export function rate(previous: number | undefined, current: number | undefined, dtMs: number): number {
  if (previous === undefined || current === undefined || !Number.isFinite(previous) || !Number.isFinite(current)) return NaN;
  if (!(dtMs > 0) || current < previous) return NaN;
  return ((current - previous) * 1000) / dtMs;
}

interface Counters {
  at: number;
  values: Map<string, number>;
}

const num = (v: unknown): number | undefined => (typeof v === "number" && Number.isFinite(v) ? v : undefined);

/**
 * The last `windowMs` of the server's status, per zone and for the server. Each `ingest` adds a
 * point to every series (NaN where the status lacks the field: a gap in the line).
 */
export class StatusHistory {
  readonly windowMs: number;
  readonly server = new Map<string, Series>();
  readonly zones = new Map<string, Map<string, Series>>();
  private readonly capacity: number;
  private previous: Counters | undefined;

  constructor(windowMs = 5 * 60_000, capacity = 330) {
    this.windowMs = windowMs;
    this.capacity = capacity;
  }

  private series(group: Map<string, Series>, name: string): Series {
    let s = group.get(name);
    if (s === undefined) group.set(name, (s = new Series(this.capacity)));
    return s;
  }

  /** Adds a poll's status, taken at local time `now` (ms). */
  ingest(status: StatusReply, now: number): void {
    // The server's own clock spaces the counters when it sends it (a late answer is not a spike).
    const at = num(status.now_ms) ?? now;
    const prev = this.previous;
    const dt = prev === undefined ? 0 : at - prev.at;
    const counters = new Map<string, number>();
    const counted = (key: string, v: unknown): number => {
      const c = num(v);
      if (c !== undefined) counters.set(key, c);
      return rate(prev?.values.get(key), c, dt);
    };
    const s = (name: string) => this.series(this.server, name);
    s("sessions").push(now, num(status.sessions) ?? NaN);
    s("bytes_out_per_s").push(now, counted("bytes_out", status.bytes_out));
    s("inputs_dropped_per_s").push(now, counted("inputs_dropped", status.inputs_dropped));
    for (const z of status.zones ?? []) {
      if (typeof z.name !== "string") continue;
      let group = this.zones.get(z.name);
      if (group === undefined) this.zones.set(z.name, (group = new Map()));
      const zs = (name: string) => this.series(group!, name);
      const ms = (recent: unknown, all: unknown) => {
        const us = num(recent) ?? num(all);
        return us === undefined ? NaN : us / 1000;
      };
      zs("tick_p50_ms").push(now, ms(z.recent_tick_p50_us, z.tick_p50_us));
      zs("tick_p99_ms").push(now, ms(z.recent_tick_p99_us, z.tick_p99_us));
      zs("overruns_per_s").push(now, counted(`overruns:${z.name}`, z.overruns));
      zs("entities").push(now, num(z.entities) ?? NaN);
      zs("players").push(now, num(z.players) ?? NaN);
      // The tick's phases, when the server reports them (name → µs): one series each.
      const phases = z.phases_us ?? z.phases;
      if (phases !== null && typeof phases === "object")
        for (const [phase, us] of Object.entries(phases)) {
          const v = num(us);
          if (v !== undefined) zs(`phase:${phase}`).push(now, v / 1000);
        }
    }
    this.previous = { at, values: counters };
    this.prune(now);
  }

  /** Forgets points older than the window, and zones with none left. */
  prune(now: number): void {
    const since = now - this.windowMs;
    for (const s of this.server.values()) s.dropBefore(since);
    for (const [name, group] of this.zones) {
      let any = false;
      for (const s of group.values()) {
        s.dropBefore(since);
        if (s.length > 0) any = true;
      }
      if (!any) this.zones.delete(name);
    }
  }
}
