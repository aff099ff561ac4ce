import { describe, expect, it } from "vitest";
import { Series, StatusHistory, rate } from "../src/ring.js";
import { formatValue, niceCeiling } from "../src/chart.js";
import { FpsMeter, type OverworldStats } from "../src/stats.js";

describe("Series (a ring of points)", () => {
  it("keeps the newest `capacity` points, oldest first", () => {
    const s = new Series(3);
    expect(s.length).toBe(0);
    expect(s.last()).toBeNaN();
    for (let i = 1; i <= 5; i++) s.push(i * 10, i);
    expect(s.length).toBe(3);
    expect(s.toArray()).toEqual([
      [30, 3],
      [40, 4],
      [50, 5],
    ]);
    expect(s.last()).toBe(5);
    expect(s.lastTime()).toBe(50);
  });

  it("drops points older than a time, and answers the largest finite value since a time", () => {
    const s = new Series(10);
    [5, NaN, 9, 2, Infinity, 4].forEach((v, i) => s.push(i, v));
    expect(s.max()).toBe(9);
    expect(s.max(3)).toBe(4);
    s.dropBefore(3);
    expect(s.toArray().map(([t]) => t)).toEqual([3, 4, 5]);
    s.dropBefore(100);
    expect(s.length).toBe(0);
    expect(s.max()).toBe(0);
    s.push(7, 1);
    expect(s.toArray()).toEqual([[7, 1]]);
  });

  it("refuses a capacity under one", () => {
    expect(() => new Series(0)).toThrow(RangeError);
  });
});

describe("rate", () => {
  it("per second between two readings; NaN without an earlier one, a time step, or when the counter went back", () => {
    expect(rate(100, 400, 500)).toBe(600);
    expect(rate(undefined, 400, 500)).toBeNaN();
    expect(rate(100, 400, 0)).toBeNaN();
    expect(rate(400, 100, 1000)).toBeNaN();
    expect(rate(1, undefined, 1000)).toBeNaN();
  });
});

const status = (now: number, bytes: number, overruns: number, extra: Record<string, unknown> = {}) => ({
  now_ms: now,
  sessions: 3,
  bytes_out: bytes,
  inputs_dropped: 0,
  zones: [
    {
      name: "w/0,0",
      world: "w",
      entities: 100,
      players: 2,
      tick_p50_us: 1500,
      tick_p99_us: 4000,
      recent_tick_p50_us: 1000,
      recent_tick_p99_us: null,
      overruns,
      ...extra,
    },
  ],
});

describe("StatusHistory", () => {
  it("keeps gauges, turns counters into rates by the server's clock, milliseconds from microseconds", () => {
    const h = new StatusHistory(60_000);
    h.ingest(status(10_000, 1000, 5), 1);
    // The answer came late by the local clock: the server's clock spaces the counters.
    h.ingest(status(11_000, 3000, 7), 1900);
    const b = h.server.get("bytes_out_per_s")!;
    expect(b.length).toBe(2);
    expect(b.value(0)).toBeNaN();
    expect(b.last()).toBe(2000);
    expect(h.server.get("sessions")!.last()).toBe(3);
    const z = h.zones.get("w/0,0")!;
    expect(z.get("overruns_per_s")!.last()).toBe(2);
    expect(z.get("entities")!.last()).toBe(100);
    expect(z.get("players")!.last()).toBe(2);
    // The recent percentile when there is one, else the one since the start.
    expect(z.get("tick_p50_ms")!.last()).toBe(1);
    expect(z.get("tick_p99_ms")!.last()).toBe(4);
  });

  it("tolerates missing fields (gaps) and charts the tick's phases when the server sends them", () => {
    const h = new StatusHistory(60_000);
    h.ingest({ zones: [{ name: "a" }, { nameless: true } as never] }, 0);
    expect(h.server.get("sessions")!.last()).toBeNaN();
    expect(h.zones.get("a")!.get("entities")!.last()).toBeNaN();
    expect([...h.zones.keys()]).toEqual(["a"]);
    h.ingest(status(1000, 0, 0, { phases_us: { movement: 800, encode: 1200, bad: "x" } }), 1000);
    const z = h.zones.get("w/0,0")!;
    expect(z.get("phase:movement")!.last()).toBe(0.8);
    expect(z.get("phase:encode")!.last()).toBe(1.2);
    expect(z.has("phase:bad")).toBe(false);
  });

  it("forgets points past its window, and zones with none left", () => {
    const h = new StatusHistory(10_000);
    h.ingest(status(0, 0, 0), 0);
    h.ingest({ now_ms: 5000, zones: [] }, 5000);
    expect(h.zones.has("w/0,0")).toBe(true);
    h.ingest({ now_ms: 12_000, zones: [] }, 12_000);
    expect(h.zones.has("w/0,0")).toBe(false);
    expect(h.server.get("sessions")!.length).toBe(2);
  });
});

describe("chart scale and labels", () => {
  it("a round ceiling: 1, 2 or 5 times a power of ten", () => {
    expect(niceCeiling(0)).toBe(1);
    expect(niceCeiling(NaN)).toBe(1);
    expect(niceCeiling(0.7)).toBeCloseTo(1, 12);
    expect(niceCeiling(3)).toBe(5);
    expect(niceCeiling(5)).toBe(5);
    expect(niceCeiling(12)).toBe(20);
    expect(niceCeiling(2001)).toBe(5000);
  });

  it("values with k, M and G", () => {
    expect(formatValue(NaN)).toBe("–");
    expect(formatValue(42)).toBe("42");
    expect(formatValue(1.234, "ms")).toBe("1.23 ms");
    expect(formatValue(25_300, "B/s")).toBe("25.3 kB/s");
    expect(formatValue(4_560_000)).toBe("4.56 M");
  });
});

describe("FpsMeter", () => {
  it("counts frames and full frames over whole seconds", () => {
    const into = { fps: 0, fullFps: 0 } as OverworldStats;
    const m = new FpsMeter();
    let ended = false;
    for (let i = 0; i <= 30; i++) ended = m.frame(i * (1000 / 30), i % 3 !== 0, into);
    expect(ended).toBe(true);
    expect(into.fps).toBe(30);
    expect(into.fullFps).toBe(20);
  });
});
