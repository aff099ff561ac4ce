import { describe, expect, it } from "vitest";
import { Api, type FetchFn, type SessionInfo } from "../src/api.js";
import { formatMs } from "../src/players-panel.js";
import { PlayerStats } from "../src/players.js";
import { Scene } from "../src/scene.js";
import { PlayerViews } from "../src/views.js";

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

/** An Api whose interest calls answer from a table of users (404 for the others), counting the calls. */
function interestApi(views: Record<string, unknown>) {
  const calls: string[] = [];
  const f: FetchFn = async (url) => {
    const user = decodeURIComponent(/sessions\/([^/]+)\/interest$/.exec(url)?.[1] ?? "");
    calls.push(user);
    const v = views[user];
    const [status, body] = v === undefined ? [404, { error: "not_found", message: "no session" }] : [200, v];
    return { status, text: async () => JSON.stringify(body) };
  };
  return { calls, api: new Api({ fetch: f, token: () => "tok" }) };
}

function scene(entities: Array<[number, number, number]>, tick = 1): Scene {
  const s = new Scene();
  s.reserve(entities.length);
  entities.forEach(([id, x, y], i) => {
    s.ids[i] = id;
    s.xs[i] = x;
    s.ys[i] = y;
  });
  s.count = entities.length;
  s.tick = tick;
  return s;
}

describe("PlayerViews (the players' views on the map)", () => {
  const held = [
    [3, 4, 9, 100],
    [4, 5, 6, 100],
  ];

  it("a circle of its view radius around each player's entity in the scene; the selected player's held cells", async () => {
    const { api, calls } = interestApi({
      a: { radius_m: 90, leave_m: 114, held },
      b: { radius_m: 50, leave_m: 74, held: [] },
    });
    const failed: unknown[] = [];
    const v = new PlayerViews(api, (e) => failed.push(e));
    v.setPlayers([session("a", { entity: 7 }), session("b", { entity: 9 }), session("c", { entity: 11 }), session("d")]);
    expect([v.userOf(9), v.userOf(3), v.userOf(null), v.entityOf("a"), v.entityOf("d")]).toEqual(["b", null, null, 7, null]);
    // No radius known yet: no circle.
    const s = scene([
      [1, 0, 0],
      [9, 20, 30],
      [5, 1, 1],
      [7, 100, 200],
    ]);
    expect(v.overlay(s, 12, true)).toBeNull();
    expect(v.drawn).toEqual({ on: true, selected: null, heldCells: 0, circles: 0 });

    await v.loadRadii(100_000);
    // (c has no session any more: 404, asked again later; d's entity is not known.)
    expect(calls.sort()).toEqual(["a", "b", "c", "d"]);
    expect(failed).toEqual([]);
    let o = v.overlay(s, 12, true)!;
    expect(o.count).toBe(2);
    expect([...o.circles.subarray(0, 6)]).toEqual([100, 200, 90, 20, 30, 50]);
    expect(o.selected).toBe(-1);
    expect(o.held).toEqual([]);
    expect(v.drawn).toMatchObject({ circles: 2, heldCells: 0 });

    // Known radii are not asked again soon; the unknown ones are.
    calls.length = 0;
    await v.loadRadii(100_500);
    expect(calls.sort()).toEqual(["c", "d"]);

    // The selected player: its held cells (6 + 2), its circle and leave radius.
    v.select("a");
    await v.loadHeld();
    o = v.overlay(s, 12, true)!;
    expect(o.selected).toBe(0);
    expect(o.leave).toBe(114);
    expect(o.held.map((r) => [r.row, r.first, r.last])).toEqual([
      [3, 4, 9],
      [4, 5, 6],
    ]);
    expect(o.cellSize).toBe(12);
    expect(v.drawn).toEqual({ on: true, selected: "a", heldCells: 8, circles: 2 });

    // Players move: the next scene has them elsewhere (found again once per scene).
    const s2 = scene(
      [
        [7, 101, 199],
        [9, 21, 31],
      ],
      2,
    );
    o = v.overlay(s2, 12, true)!;
    expect([...o.circles.subarray(0, 6)]).toEqual([101, 199, 90, 21, 31, 50]);

    // Off: nothing drawn.
    expect(v.overlay(s2, 12, false)).toBeNull();
    expect(v.drawn).toEqual({ on: false, selected: "a", heldCells: 0, circles: 0 });

    // A player gone from the sessions: no circle.
    v.setPlayers([session("a", { entity: 7 })]);
    expect(v.overlay(s2, 12, true)!.count).toBe(1);

    // Another target: nothing known.
    v.reset();
    expect(v.selected).toBeNull();
    expect(v.overlay(s2, 12, true)).toBeNull();
  });

  it("a selected player without a view (409) or gone (404) shades nothing; a 401 is the app's", async () => {
    const { api } = interestApi({ a: { radius_m: 90, held } });
    const failed: unknown[] = [];
    const v = new PlayerViews(api, (e) => failed.push(e));
    v.setPlayers([session("a", { entity: 7 }), session("gone", { entity: 8 })]);
    v.select("a");
    await v.loadHeld();
    const s = scene([
      [7, 10, 10],
      [8, 50, 50],
    ]);
    expect(v.overlay(s, 12, true)!.held.length).toBe(2);
    v.select("gone");
    await v.loadHeld();
    expect(v.overlay(s, 12, true)!.held).toEqual([]);
    expect(v.drawn).toMatchObject({ selected: "gone", heldCells: 0, circles: 1 });
    expect(failed).toEqual([]);

    const unauthorized: FetchFn = async () => ({ status: 401, text: async () => JSON.stringify({ error: "invalid_token", message: "expired" }) });
    const w = new PlayerViews(new Api({ fetch: unauthorized, token: () => "tok" }), (e) => failed.push(e));
    w.setPlayers([session("a", { entity: 7 })]);
    w.select("a");
    await w.loadHeld();
    await w.loadRadii();
    expect(failed.map((e) => (e as { status: number }).status)).toEqual([401, 401]);
  });
});
