import { describe, expect, it } from "vitest";
import type { SessionInfo } from "../src/api.js";
import { formatMs } from "../src/players-panel.js";
import { PlayerStats } from "../src/players.js";

function session(userId: string, more: Partial<SessionInfo> = {}): SessionInfo {
  return {
    userId,
    entity: null,
    connected: true,
    connectedAt: 1700000000,
    address: "127.0.0.1:5000",
    bytesOut: null,
    rttMs: null,
    frames: null,
    frameIntervalMs: null,
    frameJitterMs: null,
    deferred: null,
    node: "n@h",
    ...more,
  };
}

describe("PlayerStats (the players' table's figures)", () => {
  it("bandwidth and deferrals per second from the differences of the totals between two polls", () => {
    const p = new PlayerStats();
    const first = p.update([session("a", { bytesOut: 1000, deferred: 2, rttMs: 0.05, frameIntervalMs: 33, frameJitterMs: 1.5 }), session("b")], 10_000);
    expect(first.map((r) => [r.session.userId, r.bandwidth, r.deferredPerS])).toEqual([
      ["a", NaN, NaN],
      ["b", NaN, NaN],
    ]);
    // 2 s later: 8000 bytes and 4 deferrals more.
    const second = p.update([session("a", { bytesOut: 9000, deferred: 6, rttMs: 0.07 }), session("b", { bytesOut: 10 })], 12_000);
    expect(second[0]).toMatchObject({ bandwidth: 4000, deferredPerS: 2 });
    // (b had no total before: no rate yet.)
    expect(second[1]!.bandwidth).toBeNaN();
    const a = p.get("a")!;
    expect(a.bandwidth.toArray()).toEqual([
      [10_000, NaN],
      [12_000, 4000],
    ]);
    expect(a.rtt.toArray()).toEqual([
      [10_000, 0.05],
      [12_000, 0.07],
    ]);
    // Fields not sent: gaps in the lines.
    expect(a.interval.last()).toBeNaN();
    expect(a.jitter.toArray()[0]).toEqual([10_000, 1.5]);
  });

  it("a counter that went back (a new session) has no rate; players gone are forgotten; the window is kept", () => {
    const p = new PlayerStats(5_000, 100);
    p.update([session("a", { bytesOut: 5000 })], 0);
    expect(p.update([session("a", { bytesOut: 100 })], 2_000)[0]!.bandwidth).toBeNaN();
    expect(p.update([session("a", { bytesOut: 2100 })], 4_000)[0]!.bandwidth).toBe(1000);
    p.update([session("a", { bytesOut: 4100 })], 8_000);
    // (Points older than 5 s are dropped.)
    expect(p.get("a")!.bandwidth.toArray().map(([t]) => t)).toEqual([4_000, 8_000]);
    p.update([session("b")], 10_000);
    expect(p.get("a")).toBeUndefined();
    expect(p.update([session("a", { bytesOut: 9000 })], 12_000)[0]!.bandwidth).toBeNaN();
    p.clear();
    expect(p.get("a")).toBeUndefined();
  });

  it("milliseconds shown with the digits that matter", () => {
    expect([formatMs(0.052), formatMs(33.333), formatMs(150.4), formatMs(null), formatMs(NaN)]).toEqual(["0.05 ms", "33.3 ms", "150 ms", "–", "–"]);
  });
});
