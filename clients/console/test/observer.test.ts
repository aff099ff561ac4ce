import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { encodeHandshake, encodeSnapshot, error, FakeSocket, GOBLIN, PLAYER, pong, qm } from "../../typescript/test/helpers.js";
import { ObserverConnection, observerUrl, readBaseline } from "../src/observer.js";

const templates = [GOBLIN, PLAYER];
const goblin = (id: number, x: number, y: number) => ({ id, template: 0, q: [qm(x), qm(y), 0, 0, 0] });

describe("ObserverConnection", () => {
  let now = 0;
  beforeEach(() => {
    FakeSocket.reset();
    vi.useFakeTimers();
    now = 0;
  });
  afterEach(() => vi.useRealTimers());

  const open = (events: Record<string, unknown[]> = {}) => {
    const push = (k: string) => (v: unknown) => (events[k] ??= []).push(v);
    const c = new ObserverConnection("ws://h/ws?zone=goblins", () => "op-token", {
      WebSocket: FakeSocket as never,
      now: () => now,
      onHandshake: push("handshake"),
      onSnapshot: (_v, tick) => push("snapshot")(tick),
      onError: push("error"),
      onClose: push("close"),
    });
    return { c, ws: FakeSocket.last(), events };
  };

  it("says HELLO with the operator token, takes the handshake's grid, applies snapshots with the SDK's WorldView", () => {
    const { c, ws, events } = open();
    expect(ws.url).toBe("ws://h/ws?zone=goblins");
    ws.accept();
    expect(ws.of("hello")).toEqual([{ type: "hello", version: 2, token: "op-token" }]);
    ws.deliver(encodeHandshake({ entityId: 0, cols: 27, rows: 27, templates }));
    expect(c.state).toBe("open");
    expect(c.handshake).toMatchObject({ entityId: 0, cols: 27, rows: 27, cellSize: 12, width: 316 });
    expect(c.world.space).toBe(29 * 29);
    ws.deliver(encodeSnapshot({ tick: 5, cells: [{ key: 40, entities: [goblin(1, 10, 10), goblin(2, 11, 10)] }], templates }));
    expect(events.snapshot).toEqual([5]);
    expect(c.world.entities().size).toBe(2);
    expect(c.stats.snapshots).toBe(1);
    // A PING went with the handshake; its PONG gives the round trip.
    const ping = ws.of("ping")[0]!;
    now = 40;
    ws.deliver(pong(ping.client_time, 5));
    expect(c.rtt).toBe(40);
  });

  it("answers a snapshot it cannot apply with one RESYNC a second at most (reason 1 for a missed baseline)", () => {
    const { c, ws } = open();
    ws.accept();
    ws.deliver(encodeHandshake({ entityId: 0, templates }));
    ws.deliver(encodeSnapshot({ tick: 5, cells: [{ key: 40, entities: [goblin(1, 1, 1)] }], templates }));
    const gap = encodeSnapshot({ tick: 9, baseline: 8, cells: [], templates });
    expect(readBaseline(gap)).toBe(8);
    ws.deliver(gap);
    ws.deliver(gap);
    expect(ws.of("resync")).toEqual([{ type: "resync", reason: 1, last_tick: 5 }]);
    expect(c.stats.refused).toBe(2);
    // The view is as it was.
    expect(c.world.tick).toBe(5);
    now = 1500;
    ws.deliver(encodeSnapshot({ tick: 9, baseline: 3, cells: [], templates }));
    expect(ws.of("resync")[1]).toEqual({ type: "resync", reason: 2, last_tick: 5 });
  });

  it("a refused token (4003) is final; an ERROR is told", () => {
    const { c, ws, events } = open();
    ws.accept();
    ws.deliver(error(3, "unauthorized"));
    ws.drop(4003, "unauthorized");
    expect(events.error).toEqual([{ code: 3, message: "unauthorized" }]);
    expect(events.close).toEqual([{ code: 4003, reason: "unauthorized", final: true }]);
    expect(c.state).toBe("closed");
    vi.advanceTimersByTime(60_000);
    expect(FakeSocket.instances).toHaveLength(1);
  });

  it("reconnects after a dropped connection, with a new view", () => {
    const { c, ws, events } = open();
    ws.accept();
    ws.deliver(encodeHandshake({ entityId: 0, templates }));
    ws.deliver(encodeSnapshot({ tick: 5, cells: [{ key: 40, entities: [goblin(1, 1, 1)] }], templates }));
    const first = c.world;
    ws.drop(1006);
    expect(events.close).toEqual([{ code: 1006, reason: "", final: false }]);
    expect(c.state).toBe("reconnecting");
    vi.advanceTimersByTime(1000);
    expect(FakeSocket.instances).toHaveLength(2);
    expect(c.world).not.toBe(first);
    const again = FakeSocket.last();
    again.accept();
    expect(again.of("hello")).toHaveLength(1);
    again.deliver(encodeHandshake({ entityId: 0, templates }));
    expect(c.state).toBe("open");
    c.close();
    expect(c.state).toBe("closed");
    expect(again.closedWith?.code).toBe(1000);
  });

  it("gives up on a server that stays silent, then tries again", () => {
    const { ws } = open();
    ws.accept();
    ws.deliver(encodeHandshake({ entityId: 0, templates }));
    now = 25_000;
    vi.advanceTimersByTime(5000);
    expect(ws.closedWith?.code).toBe(1000);
    vi.advanceTimersByTime(1000);
    expect(FakeSocket.instances).toHaveLength(2);
  });
});

describe("observerUrl", () => {
  it("the page's own server, ws or wss, the zone as a query parameter", () => {
    expect(observerUrl("goblins", "http://h:4000/console?x=1")).toBe("ws://h:4000/ws?zone=goblins");
    expect(observerUrl("a b/c", "https://h/console")).toBe("wss://h/ws?zone=a+b%2Fc");
  });
});
