import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  Client,
  ConnectError,
  FULL,
  retryAfter,
  socketUrl,
  OverworldHttpError,
  ZoneConnection,
  type CloseInfo,
  type ConnectOptions,
  type Entity,
  type FetchLike,
  type Session,
  type ServerError,
} from "../src/index.js";
import { FakeSocket, MOVE, PLAYER, encodeHandshake, encodeSnapshot, error, pong, qm, type TestEntity } from "./helpers.js";

const session = (token = "tok-1"): Session => ({
  userId: "7",
  token,
  refreshToken: "ref-1",
  expiresAt: Date.now() + 3_600_000,
  refreshExpiresAt: Date.now() + 7 * 86_400_000,
  created: true,
});
const goblin = (id: number, x: number): TestEntity => ({ id, template: 0, q: [qm(x), qm(10), 0, 1, 0] });
const me = (id: number, x: number): TestEntity => ({ id, template: 1, q: [qm(x), 0, 0] });
const snap = (tick: number, entities: TestEntity[], extra: { baseline?: number; ack?: number } = {}) =>
  encodeSnapshot({ tick, ...extra, cells: [{ key: 40, entities }] });

function connect(options: ConnectOptions = {}, s = session()) {
  const conn = new ZoneConnection("ws://127.0.0.1:4000/ws?zone=goblins", s, {
    WebSocket: FakeSocket,
    now: () => Date.now(),
    random: () => 0.5,
    ...options,
  });
  const closes: CloseInfo[] = [];
  const errors: ServerError[] = [];
  conn.onClose((c) => closes.push(c));
  conn.onError((e) => errors.push(e));
  return { conn, closes, errors, socket: FakeSocket.last() };
}

/** Opens the fake socket and plays the handshake. */
function establish(socket: FakeSocket, entityId = 42) {
  socket.accept();
  socket.deliver(encodeHandshake({ entityId }));
}

/** Establishes the first socket, then drops it: the connection is reconnecting (after 125 ms). */
function established(options: ConnectOptions = {}, s = session()) {
  const c = connect(options, s);
  establish(c.socket);
  c.socket.drop(1006);
  c.closes.length = 0;
  return c;
}

beforeEach(() => {
  vi.useFakeTimers();
  vi.setSystemTime(1_000_000);
  FakeSocket.reset();
});
afterEach(() => {
  vi.useRealTimers();
});

describe("ZoneConnection: the connection sequence", () => {
  it("opens the socket in binary mode and sends HELLO with the token first", () => {
    const { conn, socket } = connect();
    expect(socket.url).toBe("ws://127.0.0.1:4000/ws?zone=goblins");
    expect(socket.binaryType).toBe("arraybuffer");
    expect(conn.state).toBe("connecting");
    socket.accept();
    expect(socket.sent).toEqual([{ type: "hello", version: 2, token: "tok-1" }]);
  });

  it("handles the handshake: templates, tick rate, entity id, world size in metres; pings at once", () => {
    const { conn, socket } = connect();
    const seen: unknown[] = [];
    conn.onHandshake((h) => seen.push(h));
    establish(socket, 42);
    expect(conn.state).toBe("open");
    expect(conn.entityId).toBe(42);
    expect(seen).toEqual([
      { version: 2, tickRate: 30, entityId: 42, width: 316, height: 316, cellSize: 12, cols: 27, rows: 27, templates: expect.any(Array), input: null },
    ]);
    expect(conn.handshake!.templates.map((t) => t.name)).toEqual(["goblin", "player"]);
    expect(conn.handshake!.templates[1]).toEqual(PLAYER);
    expect(socket.sent.map((m) => m.type)).toEqual(["hello", "ping"]);
  });

  it("measures the round trip from PING/PONG, smoothed, and pings every pingInterval", () => {
    const { conn, socket } = connect({ pingInterval: 1000, heartbeatTimeout: 60_000 });
    establish(socket);
    expect(conn.rtt).toBeUndefined();
    const first = socket.of("ping")[0]!;
    vi.advanceTimersByTime(40);
    socket.deliver(pong(first.client_time, 100));
    expect(conn.rtt).toBe(40);
    vi.advanceTimersByTime(960);
    const pings = socket.of("ping");
    expect(pings.length).toBe(2);
    vi.advanceTimersByTime(120);
    socket.deliver(pong(pings[1]!.client_time, 130));
    expect(conn.rtt).toBe(40 + (120 - 40) / 8);
    // An unknown or repeated PONG changes nothing.
    socket.deliver(pong(pings[1]!.client_time, 130));
    socket.deliver(pong(12345, 1));
    expect(conn.rtt).toBe(50);
    vi.advanceTimersByTime(3000);
    expect(socket.of("ping").length).toBe(5);
  });

  it("applies snapshots to the world view and reports entering and leaving entities", () => {
    const { conn, socket } = connect();
    establish(socket, 3);
    const enters: Entity[] = [];
    const leaves: number[] = [];
    const ticks: number[] = [];
    conn.onEnter((e) => enters.push(e));
    conn.onLeave((id) => leaves.push(id));
    conn.onSnapshot((view, tick) => {
      expect(view).toBe(conn.world);
      ticks.push(tick);
    });
    socket.deliver(snap(100, [goblin(1, 5), goblin(2, 6), me(3, 0)]));
    expect(enters.map((e) => e.id)).toEqual([1, 2, 3]);
    expect(enters[0]!.values).toEqual({ x: 5, y: 10, heading: 0, state: "wander", kind: "goblin" });
    expect(enters[2]!.template.name).toBe("player");
    socket.deliver(snap(101, [goblin(2, 7), me(3, 1), goblin(9, 1)]));
    expect(enters.map((e) => e.id)).toEqual([1, 2, 3, 9]);
    expect(leaves).toEqual([1]);
    expect(ticks).toEqual([100, 101]);
    expect(conn.tick).toBe(101);
    expect([...conn.world.entities().keys()].sort()).toEqual([2, 3, 9]);
    // The entity view has both samples: x of entity 3 half way is 0.5 m.
    expect(conn.entities.sampleOne(3, 100.5 / 30)!.values.x).toBeCloseTo(0.5, 9);
  });

  it("estimates the server time from the ticks, running on between snapshots", () => {
    const { conn, socket } = connect();
    establish(socket);
    expect(conn.serverTime()).toBe(0);
    socket.deliver(snap(300, [goblin(1, 0)]));
    expect(conn.serverTime()).toBeCloseTo(10, 9);
    vi.advanceTimersByTime(20);
    expect(conn.serverTime()).toBeCloseTo(10.02, 9);
    vi.advanceTimersByTime(13);
    socket.deliver(snap(301, [goblin(1, 3)]));
    expect(conn.serverTime()).toBeCloseTo(10.033, 3);
    // sample(): render time = server time - 100 ms, i.e. about tick 298: before the first sample.
    expect(conn.sample().size).toBe(0);
    vi.advanceTimersByTime(100);
    expect(conn.sample().get(1)!.values.x).toBeCloseTo(3, 1);
  });
});

describe("ZoneConnection: inputs", () => {
  it("numbers inputs 1, 2, ... with the newest snapshot tick as ack; drops them before the handshake", () => {
    const { conn, socket } = connect();
    expect(conn.sendInput(new Uint8Array([1, 2]))).toBe(0);
    socket.accept();
    expect(conn.sendInput(new Uint8Array([1, 2]))).toBe(0);
    socket.deliver(encodeHandshake({ entityId: 1 }));
    expect(conn.sendInput(new Uint8Array([100, 0]))).toBe(1);
    socket.deliver(snap(50, [me(1, 0)], { ack: 1 }));
    expect(conn.inputAck).toBe(1);
    expect(conn.sendInput(new Uint8Array([100, 0]))).toBe(2);
    expect(conn.sendInput(new Uint8Array([0x9c, 0x01]))).toBe(3);
    socket.deliver(snap(51, [me(1, 0.1)], { ack: 3 }));
    expect(conn.sendInput(new Uint8Array([]))).toBe(4);
    expect(socket.of("input")).toEqual([
      { type: "input", seq: 1, ack: 0, payload: [100, 0] },
      { type: "input", seq: 2, ack: 50, payload: [100, 0] },
      { type: "input", seq: 3, ack: 50, payload: [0x9c, 0x01] },
      { type: "input", seq: 4, ack: 51, payload: [] },
    ]);
    expect(conn.inputAck).toBe(3);
    expect(conn.inputSeq).toBe(4);
  });

  it("sends typed inputs with the handshake's input layout; raw bytes still go as they are", () => {
    const { conn, socket } = connect();
    // Before a handshake the layout is unknown: dropped like any input then.
    expect(conn.sendInput({ mx: 100, my: 0 })).toBe(0);
    socket.accept();
    socket.deliver(encodeHandshake({ entityId: 1, input: MOVE }));
    expect(conn.handshake!.input).toEqual(MOVE);
    expect(conn.sendInput({ mx: 100, my: 0 })).toBe(1);
    // Clamped to -127..127 (q 0..254 of 8 bits: 227 = 100 + 127, 127 = 0 + 127), as the server.
    expect(conn.sendInput({ mx: -1000, my: 127 })).toBe(2);
    expect(conn.sendInput(new Uint8Array([9, 9, 9]))).toBe(3);
    expect(conn.sendInput(Buffer.from([1, 2]))).toBe(4);
    expect(socket.of("input").map((m) => m.payload)).toEqual([[227, 127], [0, 254], [9, 9, 9], [1, 2]]);
    // A missing field or a bad value is a TypeError; nothing is sent, the sequence is unchanged.
    expect(() => conn.sendInput({ mx: 1 })).toThrow(new TypeError("input move: field my is missing"));
    expect(() => conn.sendInput({ mx: 1.5, my: 0 })).toThrow(TypeError);
    expect(() => conn.sendInput({ mx: "1", my: 0 })).toThrow(/mx \(int\): expected an integer, got: "1"/);
    expect(conn.inputSeq).toBe(4);
    expect(socket.of("input").length).toBe(4);
    // While reconnecting: still checked against the layout, then dropped.
    socket.drop(1006);
    expect(conn.sendInput({ mx: 0, my: 0 })).toBe(0);
    expect(() => conn.sendInput({ my: 0 })).toThrow(TypeError);
    conn.close();
  });

  it("refuses typed inputs for a zone without an input layout", () => {
    const { conn, socket } = connect();
    establish(socket, 1);
    expect(conn.handshake!.input).toBeNull();
    expect(() => conn.sendInput({ mx: 100, my: 0 })).toThrow(TypeError);
    expect(() => conn.sendInput({ mx: 100, my: 0 })).toThrow(/declares no input layout/);
    expect(conn.sendInput(new Uint8Array([100, 0]))).toBe(1);
  });

  it("encodes angles in the view's unit (radians by default, or turns)", () => {
    const AIM = { id: 0, name: "aim", fields: [{ name: "a", type: "angle" as const, bits: 8, min: 0, step: 1, diff_bits: 3, values: null }] };
    const radians = connect();
    establish(radians.socket, 1);
    radians.socket.deliver(encodeHandshake({ entityId: 1, input: AIM }));
    radians.conn.sendInput({ a: Math.PI / 2 });
    expect(radians.socket.of("input")[0]!.payload).toEqual([64]);
    const turns = connect({ angleUnit: "turns" });
    turns.socket.accept();
    turns.socket.deliver(encodeHandshake({ entityId: 1, input: AIM }));
    turns.conn.sendInput({ a: 0.75 });
    expect(turns.socket.of("input")[0]!.payload).toEqual([192]);
  });
});

describe("ZoneConnection: the first connection (connected(), Client.connect)", () => {
  it("connected() resolves with the first handshake", async () => {
    const { conn, socket } = connect();
    let settled = false;
    const p = conn.connected().then((h) => ((settled = true), h));
    await vi.advanceTimersByTimeAsync(0);
    expect(settled).toBe(false);
    establish(socket, 42);
    const h = await p;
    expect(h).toBe(conn.handshake);
    expect(h.entityId).toBe(42);
    // Later handshakes (reconnections) do not change it.
    socket.drop(1006);
    await vi.advanceTimersByTimeAsync(125);
    establish(FakeSocket.last(), 42);
    expect(await conn.connected()).toBe(h);
  });

  it("rejects with a ConnectError (close code, reason, the server's ERROR) when the first socket closes before a handshake; no retry", async () => {
    const { conn, closes, socket } = connect({ refresh: vi.fn(async (s: Session) => s) });
    socket.accept();
    socket.deliver(error(1, "unsupported protocol version 2, this server speaks 3"));
    socket.drop(4001, "unsupported version");
    const e = await conn.connected().catch((e: unknown) => e);
    expect(e).toBeInstanceOf(ConnectError);
    expect(e).toBeInstanceOf(Error);
    expect(e).toMatchObject({
      name: "ConnectError",
      code: 4001,
      reason: "unsupported version",
      error: { code: 1, message: "unsupported protocol version 2, this server speaks 3" },
    });
    expect((e as Error).message).toContain("unsupported protocol version 2");
    expect(closes).toEqual([{ code: 4001, reason: "unsupported version", willReconnect: false }]);
    expect(conn.state).toBe("closed");
    // A refused token (4003) before the first handshake is not refreshed and tried again either.
    FakeSocket.reset();
    const refresh = vi.fn(async (s: Session) => s);
    const b = connect({ refresh });
    b.socket.accept();
    b.socket.deliver(error(3, "unauthorized"));
    b.socket.drop(4003, "unauthorized");
    await expect(b.conn.connected()).rejects.toMatchObject({ code: 4003, error: { code: 3 } });
    await vi.advanceTimersByTimeAsync(60_000);
    expect(refresh).not.toHaveBeenCalled();
    expect(FakeSocket.instances.length).toBe(1);
  });

  it("rejects when the socket cannot open, never opens in time, or close() comes first", async () => {
    // The upgrade refused ('ws' reports an error, then a close 1006).
    const a = connect();
    a.socket.onerror!({ message: "Unexpected server response: 404" });
    a.socket.drop(1006);
    await expect(a.conn.connected()).rejects.toMatchObject({ code: 1006, reason: "Unexpected server response: 404", error: undefined });
    expect(a.closes).toEqual([{ code: 1006, reason: "Unexpected server response: 404", willReconnect: false }]);
    // A WebSocket constructor that throws (e.g. a bad URL for the browser's).
    class Throwing {
      constructor() {
        throw new SyntaxError("bad url");
      }
    }
    const b = new ZoneConnection("ws://127.0.0.1:1/ws", session(), { WebSocket: Throwing as never });
    await expect(b.connected()).rejects.toMatchObject({ code: 1006, reason: "cannot open a WebSocket: bad url" });
    // No answer within heartbeatTimeout.
    FakeSocket.reset();
    const c = connect({ heartbeatTimeout: 5000 });
    const rejected = expect(c.conn.connected()).rejects.toMatchObject({ code: 4007 });
    await vi.advanceTimersByTimeAsync(5000);
    await rejected;
    expect(FakeSocket.instances.length).toBe(1);
    // close() before the handshake.
    const d = connect();
    d.socket.accept();
    d.conn.close();
    await expect(d.conn.connected()).rejects.toMatchObject({ code: 1000, reason: "client closed" });
    await vi.advanceTimersByTimeAsync(60_000);
    expect(FakeSocket.instances.length).toBe(2);
  });

  it("a full server (4008, ERROR 8): the ConnectError carries retryAfter; a reconnect waits at least that", async () => {
    expect(FULL).toBe(4008);
    expect(retryAfter("retry_after=7; the zone holds 2 players (at most 2)")).toBe(7);
    expect(retryAfter("the zone is full")).toBeUndefined();
    const { conn, socket } = connect();
    socket.accept();
    socket.deliver(error(8, "retry_after=7; the zone holds 2 players (at most 2)"));
    socket.drop(4008, "full");
    const e = await conn.connected().catch((e: unknown) => e);
    expect(e).toBeInstanceOf(ConnectError);
    expect(e).toMatchObject({ code: 4008, retryAfter: 7, error: { code: 8 } });
    // Another failure has no retryAfter.
    FakeSocket.reset();
    const b = connect();
    b.socket.accept();
    b.socket.drop(1006);
    expect(await b.conn.connected().catch((e: unknown) => (e as ConnectError).retryAfter)).toBeUndefined();
    // An established connection that comes back to a full server tries again only after 7 s.
    FakeSocket.reset();
    const c = established();
    await vi.advanceTimersByTimeAsync(125);
    const second = FakeSocket.last();
    second.accept();
    second.deliver(error(8, "retry_after=7; the server is saturated"));
    second.drop(4008, "full");
    expect(c.closes.at(-1)).toMatchObject({ code: 4008, willReconnect: true });
    const count = FakeSocket.instances.length;
    await vi.advanceTimersByTimeAsync(6_900);
    expect(FakeSocket.instances.length).toBe(count);
    await vi.advanceTimersByTimeAsync(200);
    expect(FakeSocket.instances.length).toBe(count + 1);
  });

  it("follows the send interval a snapshot announces (extension 1): the view's and the interpolation's", () => {
    const { conn, socket } = connect();
    establish(socket);
    socket.deliver(snap(10, [goblin(5, 1)]));
    expect(conn.world.sendInterval).toBe(1);
    const ext = [{ type: 1, bytes: new Uint8Array([2]) }];
    socket.deliver(encodeSnapshot({ tick: 12, baseline: 10, cells: [], extensions: ext }));
    expect(conn.world.sendInterval).toBe(2);
    expect(conn.entities.sendInterval).toBe(2);
    expect(conn.entities.interpolationDelay).toBe(100);
    socket.deliver(encodeSnapshot({ tick: 15, baseline: 12, cells: [], extensions: [{ type: 1, bytes: new Uint8Array([4]) }] }));
    expect(conn.entities.interpolationDelay).toBeCloseTo(5000 / 30, 9);
  });

  it("a connection nobody awaits fails without an unhandled rejection", async () => {
    const unhandled = vi.fn();
    process.on("unhandledRejection", unhandled);
    try {
      const { socket } = connect();
      socket.drop(1006);
      await vi.advanceTimersByTimeAsync(10);
      vi.useRealTimers();
      await new Promise((r) => setTimeout(r, 20));
      expect(unhandled).not.toHaveBeenCalled();
    } finally {
      process.off("unhandledRejection", unhandled);
    }
  });

  it("Client.connect resolves with the connection on the handshake, or rejects with the ConnectError", async () => {
    const client = new Client({ baseUrl: "http://127.0.0.1:4000", fetch: async () => ({ status: 500, text: async () => "" }), WebSocket: FakeSocket });
    const ok = client.connect(session(), { zone: "goblins" });
    establish(FakeSocket.last(), 7);
    const conn = await ok;
    expect(conn).toBeInstanceOf(ZoneConnection);
    expect(conn.state).toBe("open");
    expect(conn.handshake!.entityId).toBe(7);
    conn.close();

    const refused = client.connect(session("bad"), { zone: "goblins" });
    const socket = FakeSocket.last();
    socket.accept();
    socket.deliver(error(3, "unauthorized"));
    socket.drop(4003, "unauthorized");
    const e = await refused.catch((e: unknown) => e);
    expect(e).toBeInstanceOf(ConnectError);
    expect(e).toMatchObject({ code: 4003, reason: "unauthorized", error: { code: 3, message: "unauthorized" } });
    await vi.advanceTimersByTimeAsync(60_000);
    expect(FakeSocket.instances.length).toBe(2);
  });
});

describe("ZoneConnection: cells held back", () => {
  it("an entity that moved out of a held-back cell is its newest copy, neither leaving nor entering again", () => {
    const { conn, socket } = connect();
    establish(socket, 3);
    const enters: number[] = [];
    const leaves: number[] = [];
    conn.onEnter((e) => enters.push(e.id));
    conn.onLeave((id) => leaves.push(id));
    socket.deliver(encodeSnapshot({ tick: 10, cells: [{ key: 40, entities: [goblin(1, 0), me(3, 0)] }] }));
    // Tick 11: cell 40 held back; entity 1 now in cell 41.
    socket.deliver(encodeSnapshot({ tick: 11, baseline: 10, cells: [{ key: 41, entities: [goblin(1, 12)] }], behind: [[40, 1]] }));
    expect(conn.world.cellTick(40)).toBe(10);
    expect(conn.world.cellTick(41)).toBe(11);
    expect(conn.world.entities().get(1)!.q[0]).toBe(qm(12));
    expect(conn.entities.samples(1).map((s) => s.values[0])).toEqual([0, 12]);
    // Tick 12: cell 40 comes without it.
    socket.deliver(encodeSnapshot({ tick: 12, baseline: 11, cells: [{ key: 40, entities: [me(3, 0)] }] }));
    expect(conn.world.entities().get(1)!.q[0]).toBe(qm(12));
    expect(enters).toEqual([1, 3]);
    expect(leaves).toEqual([]);
    expect(conn.stats.refused).toBe(0);
  });
});

describe("ZoneConnection: resync", () => {
  it("answers a refused snapshot with RESYNC (1 gap, 2 unknown baseline, 3 undecodable) and keeps going", () => {
    const { conn, socket } = connect();
    establish(socket);
    socket.deliver(snap(10, [goblin(1, 0)]));
    // Baseline 12: newer than the tick held (a snapshot was missed).
    socket.deliver(snap(13, [goblin(1, 0)], { baseline: 12 }));
    expect(socket.of("resync")).toEqual([{ type: "resync", reason: 1, last_tick: 10 }]);
    // At most one RESYNC a second while snapshots keep being refused.
    socket.deliver(snap(14, [goblin(1, 0)], { baseline: 13 }));
    expect(socket.of("resync").length).toBe(1);
    // Baseline 0 applies: the view is back.
    socket.deliver(snap(15, [goblin(1, 1)]));
    expect(conn.tick).toBe(15);
    socket.deliver(snap(16, [goblin(1, 1)], { baseline: 3 }));
    expect(socket.of("resync")[1]).toEqual({ type: "resync", reason: 2, last_tick: 15 });
    socket.deliver(snap(17, [goblin(1, 1)]));
    const bad = snap(18, [goblin(1, 1)]).subarray(0, 8);
    socket.deliver(bad);
    expect(socket.of("resync")[2]).toEqual({ type: "resync", reason: 3, last_tick: 17 });
    expect(conn.stats.refused).toBe(4);
    expect(conn.stats.resyncs).toBe(3);
    expect(conn.state).toBe("open");
    socket.deliver(snap(19, [goblin(1, 2)]));
    expect(conn.tick).toBe(19);
  });

  it("sends RESYNC again after a second of refused snapshots", () => {
    const { socket } = connect();
    establish(socket);
    socket.deliver(snap(10, [goblin(1, 0)]));
    socket.deliver(snap(12, [goblin(1, 0)], { baseline: 11 }));
    vi.advanceTimersByTime(999);
    socket.deliver(snap(13, [goblin(1, 0)], { baseline: 12 }));
    expect(socket.of("resync").length).toBe(1);
    vi.advanceTimersByTime(1);
    socket.deliver(snap(14, [goblin(1, 0)], { baseline: 13 }));
    expect(socket.of("resync").length).toBe(2);
  });
});

describe("ZoneConnection: closing and reconnecting", () => {
  it("reports ERROR messages, then reconnects after an unexpected close with back-off and jitter", () => {
    const { conn, closes, errors, socket } = connect({ random: () => 0.5 });
    establish(socket, 42);
    socket.deliver(snap(10, [me(42, 0)]));
    conn.sendInput(new Uint8Array([100, 0]));
    conn.sendInput(new Uint8Array([100, 0]));
    socket.deliver(error(5, "too slow"));
    socket.drop(4005, "too slow");
    expect(errors).toEqual([{ code: 5, message: "too slow" }]);
    expect(closes).toEqual([{ code: 4005, reason: "too slow", willReconnect: true }]);
    expect(conn.state).toBe("reconnecting");
    expect(conn.sendInput(new Uint8Array([1, 1]))).toBe(0);
    // Attempt 0: uniform in [0, 250) ms; random 0.5 → 125 ms.
    vi.advanceTimersByTime(124);
    expect(FakeSocket.instances.length).toBe(1);
    vi.advanceTimersByTime(1);
    expect(FakeSocket.instances.length).toBe(2);
    const second = FakeSocket.last();
    establish(second, 42);
    expect(second.sent[0]).toEqual({ type: "hello", version: 2, token: "tok-1" });
    expect(conn.entityId).toBe(42);
    expect(conn.state).toBe("open");
    // The input sequence goes on; the new socket's view starts over.
    expect(conn.sendInput(new Uint8Array([100, 0]))).toBe(3);
    expect(second.of("input")[0]).toMatchObject({ seq: 3, ack: 0 });
    expect(conn.stats.connects).toBe(2);
  });

  it("backs off exponentially while attempts fail, and starts over after a handshake", () => {
    const { closes } = connect({ random: () => 0.5 });
    establish(FakeSocket.last());
    const delays: number[] = [];
    for (let attempt = 0; attempt < 8; attempt++) {
      const n = FakeSocket.instances.length;
      FakeSocket.last().drop(1006);
      let waited = 0;
      while (FakeSocket.instances.length === n) {
        vi.advanceTimersByTime(1);
        waited++;
      }
      delays.push(waited);
    }
    expect(delays).toEqual([125, 250, 500, 1000, 2000, 4000, 5000, 5000]);
    expect(closes.every((c) => c.willReconnect && c.code === 1006)).toBe(true);
    establish(FakeSocket.last());
    FakeSocket.last().drop(1001);
    vi.advanceTimersByTime(125);
    expect(FakeSocket.instances.length).toBe(10);
  });

  it("after a reconnection, holds the previous view's entities over until their cell comes again", () => {
    const { conn, socket } = connect({ settle: 1000 });
    establish(socket, 3);
    const enters: number[] = [];
    const leaves: number[] = [];
    conn.onEnter((e) => enters.push(e.id));
    conn.onLeave((id) => leaves.push(id));
    const cells = (tick: number, c: Array<{ key: number; entities: TestEntity[] }>) => encodeSnapshot({ tick, cells: c });
    socket.deliver(cells(10, [{ key: 40, entities: [goblin(1, 0), goblin(2, 0), me(3, 0)] }, { key: 41, entities: [goblin(4, 20)] }]));
    expect(enters).toEqual([1, 2, 3, 4]);
    socket.drop(1006);
    vi.advanceTimersByTime(125);
    const second = FakeSocket.last();
    establish(second, 3);
    // The first frame of the new socket holds nothing yet (keyframes come with the next ticks).
    second.deliver(cells(20, []));
    expect(leaves).toEqual([]);
    expect(conn.entities.sampleOne(4, 10 / 30)).toBeDefined();
    // Cell 40 comes again without entity 2: 2 left; 1 and 3 simply go on.
    second.deliver(encodeSnapshot({ tick: 21, baseline: 20, cells: [{ key: 40, entities: [goblin(1, 1), me(3, 1)] }] }));
    expect(leaves).toEqual([2]);
    expect(enters).toEqual([1, 2, 3, 4]);
    // Entity 1 continues its history across the outage.
    expect(conn.entities.samples(1).map((s) => Math.round(s.time * 30))).toEqual([10, 21]);
    // Cell 41 never comes again (it left the view meanwhile): 4 is gone after `settle`.
    vi.advanceTimersByTime(999);
    second.deliver(encodeSnapshot({ tick: 22, baseline: 21, cells: [] }));
    expect(leaves).toEqual([2]);
    vi.advanceTimersByTime(1);
    second.deliver(encodeSnapshot({ tick: 23, baseline: 22, cells: [] }));
    expect(leaves).toEqual([2, 4]);
    expect(conn.entities.sampleOne(4, 23 / 30)).toBeUndefined();
  });

  it("gives a failed socket's error message as the reason of a close without one", () => {
    const { closes } = established();
    vi.advanceTimersByTime(125);
    const socket = FakeSocket.last();
    socket.onerror!({ message: "Unexpected server response: 404" });
    socket.drop(1006);
    expect(closes).toEqual([{ code: 1006, reason: "Unexpected server response: 404", willReconnect: true }]);
  });

  it("gives up after maxAttempts, and never reconnects when reconnect is false", () => {
    const { closes } = connect({ reconnect: { maxAttempts: 2 }, random: () => 0 });
    establish(FakeSocket.last());
    FakeSocket.last().drop(1006);
    vi.advanceTimersByTime(1);
    FakeSocket.last().drop(1006);
    vi.advanceTimersByTime(1);
    FakeSocket.last().drop(1006);
    vi.advanceTimersByTime(20_000);
    expect(FakeSocket.instances.length).toBe(3);
    expect(closes.map((c) => c.willReconnect)).toEqual([true, true, false]);
    FakeSocket.reset();
    const other = connect({ reconnect: false });
    establish(other.socket);
    other.socket.drop(1006);
    vi.advanceTimersByTime(20_000);
    expect(FakeSocket.instances.length).toBe(1);
    expect(other.closes).toEqual([{ code: 1006, reason: "", willReconnect: false }]);
    expect(other.conn.state).toBe("closed");
  });

  it.each([4001, 4004, 1000])("does not reconnect after close code %i", (code) => {
    const { conn, closes, socket } = connect();
    establish(socket);
    socket.drop(code, "bye");
    vi.advanceTimersByTime(60_000);
    expect(FakeSocket.instances.length).toBe(1);
    expect(closes).toEqual([{ code, reason: "bye", willReconnect: false }]);
    expect(conn.state).toBe("closed");
  });

  it("after 4003, reconnects only once the token was refreshed", async () => {
    const refresh = vi.fn(async (s: Session) => ({ ...s, token: "tok-2" }));
    const { conn, closes } = established({ refresh });
    vi.advanceTimersByTime(125);
    const socket = FakeSocket.last();
    socket.accept();
    socket.deliver(error(3, "unauthorized"));
    socket.drop(4003, "unauthorized");
    expect(refresh).toHaveBeenCalledTimes(1);
    await vi.advanceTimersByTimeAsync(0);
    expect(closes).toEqual([{ code: 4003, reason: "unauthorized", willReconnect: true }]);
    await vi.advanceTimersByTimeAsync(250);
    const third = FakeSocket.last();
    expect(FakeSocket.instances.length).toBe(3);
    third.accept();
    expect(third.sent[0]).toEqual({ type: "hello", version: 2, token: "tok-2" });
    expect(conn.session.token).toBe("tok-2");
    // Refused again before any handshake: the refreshed token is no better; give up.
    third.drop(4003, "unauthorized");
    await vi.advanceTimersByTimeAsync(60_000);
    expect(refresh).toHaveBeenCalledTimes(1);
    expect(closes[1]).toEqual({ code: 4003, reason: "unauthorized", willReconnect: false });
    expect(FakeSocket.instances.length).toBe(3);
  });

  it("after 4003 without a refresh hook, or when the refresh fails, stops", async () => {
    const a = established();
    vi.advanceTimersByTime(125);
    FakeSocket.last().accept();
    FakeSocket.last().drop(4003);
    expect(a.closes).toEqual([{ code: 4003, reason: "", willReconnect: false }]);
    FakeSocket.reset();
    const b = established({ refresh: () => Promise.reject(new Error("expired")) });
    vi.advanceTimersByTime(125);
    FakeSocket.last().accept();
    FakeSocket.last().drop(4003);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(b.closes).toEqual([{ code: 4003, reason: "", willReconnect: false }]);
    expect(FakeSocket.instances.length).toBe(2);
  });

  it("refreshes an expired token before reconnecting", async () => {
    const s = session();
    const refresh = vi.fn(async (old: Session) => ({ ...old, token: "fresh", expiresAt: Date.now() + 3_600_000 }));
    const { socket } = connect({ refresh }, s);
    establish(socket);
    vi.setSystemTime(s.expiresAt + 1);
    socket.drop(1006);
    await vi.advanceTimersByTimeAsync(125);
    expect(refresh).toHaveBeenCalledTimes(1);
    FakeSocket.last().accept();
    expect(FakeSocket.last().sent[0]).toMatchObject({ type: "hello", token: "fresh" });
  });

  it("closes a silent connection after heartbeatTimeout and makes it again", () => {
    const { conn, closes, socket } = connect({ pingInterval: 2000 });
    establish(socket);
    // 3 × 2 s is under 10 s: the timeout is 10 s. Messages keep it alive.
    vi.advanceTimersByTime(9000);
    socket.deliver(snap(1, [goblin(1, 0)]));
    vi.advanceTimersByTime(9000);
    expect(closes).toEqual([]);
    vi.advanceTimersByTime(1000);
    expect(closes).toEqual([{ code: 4007, reason: "heartbeat timeout (client side)", willReconnect: true }]);
    expect(socket.closedWith).toEqual({ code: 4000, reason: "heartbeat timeout" });
    expect(conn.socket).toBeNull();
    vi.advanceTimersByTime(125);
    expect(FakeSocket.instances.length).toBe(2);
    // The old socket's late events are ignored.
    socket.drop(1006);
    expect(closes.length).toBe(1);
  });

  it("also gives up a connection attempt that never opens", () => {
    const { closes } = established({ heartbeatTimeout: 5000 });
    vi.advanceTimersByTime(125);
    vi.advanceTimersByTime(5000);
    expect(closes.map((c) => c.code)).toEqual([4007]);
    expect(closes[0]!.willReconnect).toBe(true);
  });

  it("close() closes for good and tells at once", () => {
    const { conn, closes, socket } = connect();
    establish(socket);
    conn.close();
    expect(closes).toEqual([{ code: 1000, reason: "client closed", willReconnect: false }]);
    expect(socket.closedWith).toEqual({ code: 1000, reason: "client closed" });
    expect(conn.state).toBe("closed");
    conn.close();
    vi.advanceTimersByTime(60_000);
    expect(closes.length).toBe(1);
    expect(FakeSocket.instances.length).toBe(1);
    expect(socket.of("ping").length).toBe(1);
  });

  it("close() while waiting to reconnect cancels the attempt", () => {
    const { conn } = established();
    conn.close();
    vi.advanceTimersByTime(60_000);
    expect(FakeSocket.instances.length).toBe(1);
  });
});

describe("Client", () => {
  const body = { user_id: 12, token: "t", expires_in: 3600, refresh_token: "r", refresh_expires_in: 604800, created: true };
  const fetcher = (status: number, text: string) => {
    const calls: Array<{ url: string; init: Parameters<FetchLike>[1] }> = [];
    const f: FetchLike = async (url, init) => {
      calls.push({ url, init });
      return { status, statusText: "Status", text: async () => text };
    };
    return { f, calls };
  };

  it("authenticates a device and refreshes", async () => {
    const { f, calls } = fetcher(200, JSON.stringify(body));
    const client = new Client({ baseUrl: "http://127.0.0.1:4000/", fetch: f });
    const s = await client.authenticateDevice("device-0123456789");
    expect(s).toEqual({ userId: "12", token: "t", refreshToken: "r", expiresAt: 1_000_000 + 3_600_000, refreshExpiresAt: 1_000_000 + 604_800_000, created: true });
    expect(calls[0]!.url).toBe("http://127.0.0.1:4000/api/v1/auth/device");
    expect(calls[0]!.init.method).toBe("POST");
    expect(JSON.parse(calls[0]!.init.body)).toEqual({ device_id: "device-0123456789" });
    const r = await client.refresh(s);
    expect(calls[1]!.url).toBe("http://127.0.0.1:4000/api/v1/auth/refresh");
    expect(JSON.parse(calls[1]!.init.body)).toEqual({ refresh_token: "r" });
    expect(r.userId).toBe("12");
  });

  it("surfaces HTTP errors as OverworldHttpError", async () => {
    const bad = new Client({ baseUrl: "http://x", fetch: fetcher(400, '{"error":"invalid_device_id","message":"10 to 128 characters"}').f });
    const e = await bad.authenticateDevice("short").catch((e: unknown) => e);
    expect(e).toBeInstanceOf(OverworldHttpError);
    expect(e).toMatchObject({ status: 400, code: "invalid_device_id", message: "10 to 128 characters" });
    const html = new Client({ baseUrl: "http://x", fetch: fetcher(502, "<html>").f });
    await expect(html.refresh("r")).rejects.toMatchObject({ status: 502, code: "http_error", message: "HTTP 502 Status" });
    const odd = new Client({ baseUrl: "http://x", fetch: fetcher(200, '{"token":1}').f });
    await expect(odd.refresh("r")).rejects.toMatchObject({ status: 200, code: "bad_response" });
    const down = new Client({ baseUrl: "http://x", fetch: () => Promise.reject(new TypeError("fetch failed")) });
    await expect(down.refresh("r")).rejects.toMatchObject({ status: 0, code: "network_error" });
  });

  it("connects to ws(s)://.../ws?zone=... with its WebSocket and refreshes through itself", async () => {
    const { f, calls } = fetcher(200, JSON.stringify({ ...body, token: "new" }));
    const client = new Client({ baseUrl: "https://game.example:8443", fetch: f, WebSocket: FakeSocket });
    expect(client.socketUrl()).toBe("wss://game.example:8443/ws");
    expect(client.socketUrl("")).toBe("wss://game.example:8443/ws?zone=");
    const connecting = client.connect(session(), { zone: "goblins", random: () => 0.5 });
    expect(FakeSocket.last().url).toBe("wss://game.example:8443/ws?zone=goblins");
    establish(FakeSocket.last(), 5);
    const conn = await connecting;
    expect(conn.entityId).toBe(5);
    FakeSocket.last().drop(4003);
    await vi.advanceTimersByTimeAsync(200);
    expect(calls.length).toBe(1);
    FakeSocket.last().accept();
    expect(FakeSocket.last().sent[0]).toMatchObject({ token: "new" });
    conn.close();
    expect(new Client({ baseUrl: "http://h:1" }).socketUrl("a b")).toBe("ws://h:1/ws?zone=a+b");
  });

  it("socketUrl without a Client: ws or wss, the zone as a query parameter", () => {
    expect(socketUrl("http://h:4000", "goblins")).toBe("ws://h:4000/ws?zone=goblins");
    expect(socketUrl("https://h/", "a b/c")).toBe("wss://h/ws?zone=a+b%2Fc");
    expect(socketUrl("https://h")).toBe("wss://h/ws");
  });
});

describe("ZoneConnection: trackEntities false (an observer's whole zone)", () => {
  it("applies each snapshot to the world and tells onSnapshot, without the entities' work", () => {
    const { conn, socket } = connect({ trackEntities: false });
    const enters: number[] = [];
    const ticks: number[] = [];
    conn.onEnter((e) => enters.push(e.id));
    conn.onLeave((id) => enters.push(-id));
    conn.onSnapshot((view, tick) => ticks.push(tick + view.entities().size / 100));
    socket.accept();
    // An observer's handshake: no entity of its own; the grid's key space is the view's.
    socket.deliver(encodeHandshake({ entityId: 0, cols: 27, rows: 27 }));
    expect(conn.handshake).toMatchObject({ entityId: 0, cols: 27, rows: 27, cellSize: 12, width: 316 });
    expect(conn.world.space).toBe(29 * 29);
    socket.deliver(snap(5, [goblin(1, 10), goblin(2, 11)]));
    socket.deliver(encodeSnapshot({ tick: 6, baseline: 5, cells: [{ key: 40, entities: [goblin(2, 11)] }] }));
    expect(ticks).toEqual([5.02, 6.01]);
    expect(conn.world.entities().size).toBe(1);
    expect(conn.stats.snapshots).toBe(2);
    expect(conn.stats.applyMs).toBeGreaterThanOrEqual(0);
    expect(conn.entities.size).toBe(0);
    expect(conn.sample().size).toBe(0);
    expect(enters).toEqual([]);
    // A refused snapshot is answered as ever.
    socket.deliver(snap(9, [goblin(1, 0)], { baseline: 8 }));
    expect(socket.of("resync")).toEqual([{ type: "resync", reason: 1, last_tick: 6 }]);
  });
});

describe("ZoneConnection: reliable events", () => {
  it("numbers events 1, 2, ... on each connection and sends nothing before the handshake", async () => {
    const { conn, socket } = connect();
    expect(conn.sendEvent(new Uint8Array([7]))).toBe(false);
    establish(socket);
    expect(conn.sendEvent(new Uint8Array([7]))).toBe(true);
    expect(conn.sendEvent(new Uint8Array([8, 9]))).toBe(true);
    expect(socket.of("other")).toEqual([
      { type: "other", bytes: [0x42, 1, 7] },
      { type: "other", bytes: [0x42, 2, 8, 9] },
    ]);
    socket.drop(1006);
    await vi.advanceTimersByTimeAsync(20_000);
    const again = FakeSocket.last();
    expect(again).not.toBe(socket);
    establish(again);
    expect(conn.sendEvent(new Uint8Array([1]))).toBe(true);
    expect(again.of("other")).toEqual([{ type: "other", bytes: [0x42, 1, 1] }]);
    conn.close();
  });
});
