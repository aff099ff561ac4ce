// The backend services over the connection (REQUEST/RESPONSE, MATCH_SEND/MATCH_DATA, NOTIFY)
// against a scripted socket, and the HTTP side (client.rpc, client.listMatches) against a fake
// fetch.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  BACKEND_ERROR_CODES,
  Client,
  OverworldHttpError,
  OverworldRequestError,
  ZoneConnection,
  type BackendErrorCode,
  type ConnectOptions,
  type FetchLike,
  type MatchData,
  type MatchNotice,
  type MatchPresenceEvent,
  type MatchmakerMatched,
  type Session,
} from "../src/index.js";
import { FakeSocket, encodeHandshake, matchData, notify, response } from "./helpers.js";

const session: Session = {
  userId: "u1",
  token: "tok-1",
  refreshToken: "ref-1",
  expiresAt: Date.now() + 3_600_000,
  refreshExpiresAt: Date.now() + 7 * 86_400_000,
  created: false,
};

function connect(options: ConnectOptions = {}) {
  const conn = new ZoneConnection("ws://127.0.0.1:4000/ws?zone=", session, { WebSocket: FakeSocket, random: () => 0.5, ...options });
  return { conn, socket: FakeSocket.last() };
}

/** A connection with its handshake done (a connection to no zone: entity 0, no grid). */
function open(options: ConnectOptions = {}) {
  const c = connect(options);
  c.socket.accept();
  c.socket.deliver(encodeHandshake({ entityId: 0, cols: 0, rows: 0, templates: [] }));
  return c;
}

/** Settles what is pending (promise callbacks) without moving the fake clock. */
const flush = () => vi.advanceTimersByTimeAsync(0);

/** The error a promise rejects with. */
const failure = async (p: Promise<unknown>) => {
  try {
    await p;
  } catch (e) {
    return e as OverworldRequestError;
  }
  throw new Error("resolved");
};

beforeEach(() => {
  vi.useFakeTimers();
  FakeSocket.reset();
});
afterEach(() => {
  vi.useRealTimers();
});

describe("backend requests over the connection", () => {
  it("rpc: a REQUEST with a fresh id, its RESPONSE's payload", async () => {
    const { conn, socket } = open();
    const a = conn.rpc<{ n: number }>("echo", { n: 1 });
    const b = conn.rpc("goblin_count");
    expect(socket.of("request")).toEqual([
      { type: "request", id: 1, method: "rpc", body: { id: "echo", payload: { n: 1 } } },
      // No payload: none sent (the function gets null).
      { type: "request", id: 2, method: "rpc", body: { id: "goblin_count" } },
    ]);
    // Answers in any order, by id.
    socket.deliver(response(2, 200, { payload: { goblins: 7 } }));
    socket.deliver(response(1, 200, { payload: { n: 1 } }));
    expect(await a).toEqual({ n: 1 });
    expect(await b).toEqual({ goblins: 7 });
    const c = conn.rpc("nothing");
    socket.deliver(response(3, 200, { payload: null }));
    expect(await c).toBeNull();
  });

  it("an error RESPONSE rejects with an OverworldRequestError: status, code, message, method", async () => {
    const { conn, socket } = open();
    const p = conn.rpc("nope");
    socket.deliver(response(1, 404, { error: "unknown_rpc", message: "no function nope" }));
    const e = await failure(p);
    expect(e).toBeInstanceOf(OverworldRequestError);
    expect(e).toBeInstanceOf(Error);
    expect([e.name, e.status, e.code, e.message, e.method]).toEqual(["OverworldRequestError", 404, "unknown_rpc", "no function nope", "rpc"]);
    // A body that is not the error JSON: bad_response, with the status.
    const q = conn.rpc("x");
    socket.deliver(response(2, 500, "oops"));
    expect(await failure(q)).toMatchObject({ status: 500, code: "bad_response", method: "rpc" });
    // A success without what the method answers: bad_response.
    const r = conn.createMatch("echo");
    socket.deliver(response(3, 200, { id: "m" }));
    expect(await failure(r)).toMatchObject({ status: 200, code: "bad_response", method: "match_create" });
  });

  it("times out after requestTimeout (status 0, code timeout); a late answer is dropped", async () => {
    const { conn, socket } = open({ requestTimeout: 500 });
    const p = conn.rpc("slow");
    const e = failure(p);
    await vi.advanceTimersByTimeAsync(499);
    const q = conn.rpc("quick");
    await vi.advanceTimersByTimeAsync(1);
    expect(await e).toMatchObject({ status: 0, code: "timeout", method: "rpc" });
    socket.deliver(response(1, 200, { payload: 1 }));
    socket.deliver(response(2, 200, { payload: 2 }));
    expect(await q).toBe(2);
    expect(conn.stats.undecodable).toBe(0);
  });

  it("waits for the handshake; in flight when the socket drops: disconnected; made meanwhile: sent after the next handshake", async () => {
    const { conn, socket } = connect();
    const early = conn.rpc("early");
    socket.accept();
    expect(socket.of("request")).toEqual([]);
    socket.deliver(encodeHandshake({ entityId: 0, templates: [] }));
    expect(socket.of("request").map((r) => r.id)).toEqual([1]);
    socket.deliver(response(1, 200, { payload: "e" }));
    expect(await early).toBe("e");

    const lost = failure(conn.rpc("lost"));
    socket.drop(1006);
    expect(await lost).toMatchObject({ status: 0, code: "disconnected" });
    const later = conn.listMatches({ limit: 5 });
    await vi.advanceTimersByTimeAsync(1000);
    const again = FakeSocket.last();
    expect(again).not.toBe(socket);
    again.accept();
    expect(again.of("request")).toEqual([]);
    again.deliver(encodeHandshake({ entityId: 0, templates: [] }));
    expect(again.of("request")).toEqual([{ type: "request", id: 3, method: "match_list", body: { limit: 5 } }]);
    again.deliver(response(3, 200, { matches: [] }));
    expect(await later).toEqual([]);
  });

  it("close(): what was sent fails with disconnected, what waited with closed", async () => {
    const { conn, socket } = open();
    const sent = failure(conn.rpc("a"));
    socket.drop(1006);
    const waiting = failure(conn.rpc("b"));
    conn.close();
    expect(await sent).toMatchObject({ code: "disconnected" });
    expect(await waiting).toMatchObject({ status: 0, code: "closed" });
    expect(await failure(conn.rpc("c"))).toMatchObject({ code: "closed" });
  });

  it("a first socket that never opens: requests fail with closed", async () => {
    const { conn, socket } = connect();
    const p = failure(conn.rpc("a"));
    socket.drop(1006);
    expect(await p).toMatchObject({ code: "closed" });
    await expect(conn.connected()).rejects.toThrow();
  });

  it("matches: create, join, leave, list; arguments in snake_case, answers in camelCase", async () => {
    const { conn, socket } = open();
    const created = conn.createMatch("echo", { mode: "duel" });
    const relayed = conn.createMatch();
    socket.deliver(response(1, 200, { match_id: "m1" }));
    socket.deliver(response(2, 200, { match_id: "m2" }));
    expect([await created, await relayed]).toEqual(["m1", "m2"]);

    const joined = conn.joinMatch("m1", { team: "red" });
    socket.deliver(response(3, 200, { match_id: "m1", label: { mode: "duel", round: 0 }, tick_rate: 10, presences: ["u0", "u1"], rejoined: false }));
    expect(await joined).toEqual({ matchId: "m1", label: { mode: "duel", round: 0 }, tickRate: 10, presences: ["u0", "u1"], rejoined: false });
    expect(conn.joinedMatches).toEqual(["m1"]);

    const list = conn.listMatches({ query: { mode: "duel", round: { gte: 0 } }, minSize: 1, maxSize: 4, limit: 3 });
    socket.deliver(response(4, 200, { matches: [{ match_id: "m1", label: { mode: "duel", round: 0 }, size: 2, tick_rate: 10, handler: "Overworld.Bench.EchoMatch" }] }));
    expect(await list).toEqual([{ matchId: "m1", label: { mode: "duel", round: 0 }, size: 2, tickRate: 10, handler: "Overworld.Bench.EchoMatch" }]);

    const left = conn.leaveMatch("m1");
    expect(conn.joinedMatches).toEqual([]);
    socket.deliver(response(5, 200, {}));
    await left;

    expect(socket.of("request").map((r) => [r.method, r.body])).toEqual([
      ["match_create", { name: "echo", params: { mode: "duel" } }],
      ["match_create", {}],
      ["match_join", { match_id: "m1", metadata: { team: "red" } }],
      ["match_list", { query: { mode: "duel", round: { gte: 0 } }, min_size: 1, max_size: 4, limit: 3 }],
      ["match_leave", { match_id: "m1" }],
    ]);

    // A join refused: not among the joined.
    const refused = failure(conn.joinMatch("m3"));
    socket.deliver(response(6, 403, { error: "match_join_rejected", message: "full" }));
    expect(await refused).toMatchObject({ status: 403, code: "match_join_rejected", message: "full" });
    expect(conn.joinedMatches).toEqual([]);
  });

  it("the matchmaker: add and remove tickets; matched tickets are told", async () => {
    const { conn, socket } = open();
    const matched: MatchmakerMatched[] = [];
    conn.onMatchmakerMatched((m) => matched.push(m));
    const t = conn.addMatchmaker({ properties: { region: "eu", rank: 12 }, query: { region: "eu" }, minCount: 2, maxCount: 4, countMultiple: 2 });
    socket.deliver(response(1, 200, { ticket: "t1.0.node" }));
    expect(await t).toBe("t1.0.node");
    const bare = conn.addMatchmaker({ minCount: 2, maxCount: 2 });
    socket.deliver(response(2, 200, { ticket: "t2" }));
    await bare;
    const removed = conn.removeMatchmaker("t2");
    socket.deliver(response(3, 200, {}));
    await removed;
    expect(socket.of("request").map((r) => [r.method, r.body])).toEqual([
      ["matchmaker_add", { properties: { region: "eu", rank: 12 }, query: { region: "eu" }, min_count: 2, max_count: 4, count_multiple: 2 }],
      ["matchmaker_add", { properties: {}, query: {}, min_count: 2, max_count: 2 }],
      ["matchmaker_remove", { ticket: "t2" }],
    ]);
    socket.deliver(notify("matchmaker_matched", { ticket: "t1.0.node", match_id: "m9", users: ["u1", "u2"] }));
    expect(matched).toEqual([{ ticket: "t1.0.node", matchId: "m9", users: ["u1", "u2"] }]);
    const gone = failure(conn.removeMatchmaker("t1.0.node"));
    socket.deliver(response(4, 404, { error: "ticket_not_found", message: "no such ticket of yours" }));
    expect(await gone).toMatchObject({ status: 404, code: "ticket_not_found" });
  });
});

describe("match data and notifications", () => {
  it("MATCH_DATA: one callback per message, in order; sendMatchData: MATCH_SEND with bytes or UTF-8", () => {
    const { conn, socket } = open();
    const got: MatchData[] = [];
    conn.onMatchData((m) => got.push(m));
    socket.deliver(matchData("m1", [
      { op: 1, sender: "u2", payload: "hi" },
      { op: 130, sender: "", payload: new Uint8Array([0, 255]) },
    ]));
    socket.deliver(matchData("m1", []));
    expect(got).toEqual([
      { matchId: "m1", op: 1, sender: "u2", data: new TextEncoder().encode("hi") },
      { matchId: "m1", op: 130, sender: "", data: new Uint8Array([0, 255]) },
    ]);

    expect(conn.sendMatchData("m1", 2, new Uint8Array([1, 2, 255]))).toBe(true);
    expect(conn.sendMatchData("m1", 2 ** 32 - 1, "héllo")).toBe(true);
    expect(conn.sendMatchData("m1", 0, new Uint8Array(new ArrayBuffer(8), 2, 3).fill(7))).toBe(true);
    expect(socket.of("match_send")).toEqual([
      { type: "match_send", match_id: "m1", op: 2, payload: [1, 2, 255] },
      { type: "match_send", match_id: "m1", op: 2 ** 32 - 1, payload: [...new TextEncoder().encode("héllo")] },
      { type: "match_send", match_id: "m1", op: 0, payload: [7, 7, 7] },
    ]);
    expect(() => conn.sendMatchData("m1", -1, "x")).toThrow(RangeError);
    expect(() => conn.sendMatchData("m1", 1.5, "x")).toThrow(RangeError);
    expect(() => conn.sendMatchData("m1", 2 ** 32, "x")).toThrow(RangeError);
    socket.drop(1006);
    expect(conn.sendMatchData("m1", 1, "x")).toBe(false);
  });

  it("NOTIFY: presences, match notices (the match no longer joined), every kind raw to onNotify", async () => {
    const { conn, socket } = open();
    const presences: MatchPresenceEvent[] = [];
    const notices: MatchNotice[] = [];
    const raw: Array<[string, unknown]> = [];
    conn.onMatchPresence((e) => presences.push(e));
    conn.onMatchNotice((n) => notices.push(n));
    conn.onNotify((k, b) => raw.push([k, b]));
    for (const [i, id] of ["m1", "m2", "m3"].entries()) {
      const j = conn.joinMatch(id);
      socket.deliver(response(i + 1, 200, { match_id: id, label: {}, tick_rate: 10, presences: ["u1"], rejoined: false }));
      await j;
    }
    expect(conn.joinedMatches).toEqual(["m1", "m2", "m3"]);

    socket.deliver(notify("match_presence", { match_id: "m1", joins: [{ user_id: "u2" }], leaves: [] }));
    socket.deliver(notify("match_presence", { match_id: "m1", joins: [], leaves: [{ user_id: "u2" }, { user_id: "u3" }] }));
    socket.deliver(notify("error", { error: "not_in_match", message: "not in match m7" }));
    socket.deliver(notify("match_end", { match_id: "m1" }));
    socket.deliver(notify("match_error", { match_id: "m2", message: "the match failed" }));
    socket.deliver(notify("match_kicked", { match_id: "m3" }));
    socket.deliver(notify("match_replaced", {}));
    expect(presences).toEqual([
      { matchId: "m1", joins: ["u2"], leaves: [] },
      { matchId: "m1", joins: [], leaves: ["u2", "u3"] },
    ]);
    expect(notices).toEqual([
      { kind: "error", code: "not_in_match", message: "not in match m7" },
      { kind: "match_end", matchId: "m1" },
      { kind: "match_error", matchId: "m2", message: "the match failed" },
      { kind: "match_kicked", matchId: "m3" },
      { kind: "match_replaced", matchId: undefined },
    ]);
    expect(conn.joinedMatches).toEqual([]);
    expect(raw.map(([k]) => k)).toEqual(["match_presence", "match_presence", "error", "match_end", "match_error", "match_kicked", "match_replaced"]);

    // A kind of a newer server: onNotify only (counted as not understood); a body that is not JSON: dropped.
    socket.deliver(notify("party_invite", { from: "u9" }));
    expect(raw.at(-1)).toEqual(["party_invite", { from: "u9" }]);
    socket.deliver(notify("match_end", "{not json"));
    expect(raw.length).toBe(8);
    expect(conn.stats.undecodable).toBe(2);
    expect(notices.length).toBe(5);
  });

  it("after a reconnection the matches joined are joined again, metadata included; a refusal is a rejoin_failed notice", async () => {
    const { conn, socket } = open();
    const notices: MatchNotice[] = [];
    conn.onMatchNotice((n) => notices.push(n));
    const ok = { label: {}, tick_rate: 10, presences: ["u1"], rejoined: false };
    const a = conn.joinMatch("m1", { team: "red" });
    const b = conn.joinMatch("m2");
    socket.deliver(response(1, 200, { match_id: "m1", ...ok }));
    socket.deliver(response(2, 200, { match_id: "m2", ...ok }));
    await Promise.all([a, b]);

    socket.drop(1006);
    await vi.advanceTimersByTimeAsync(1000);
    const s2 = FakeSocket.last();
    s2.accept();
    // A request made while reconnecting goes after the rejoins.
    const queued = conn.rpc("x");
    s2.deliver(encodeHandshake({ entityId: 0, templates: [] }));
    expect(s2.of("request").map((r) => [r.id, r.method, r.body])).toEqual([
      [4, "match_join", { match_id: "m1", metadata: { team: "red" } }],
      [5, "match_join", { match_id: "m2" }],
      [3, "rpc", { id: "x" }],
    ]);
    s2.deliver(response(4, 200, { match_id: "m1", ...ok, rejoined: true }));
    s2.deliver(response(5, 404, { error: "match_not_found", message: "no match m2" }));
    s2.deliver(response(3, 200, { payload: 0 }));
    await queued;
    await flush();
    expect(conn.joinedMatches).toEqual(["m1"]);
    expect(notices).toEqual([{ kind: "rejoin_failed", matchId: "m2", error: expect.objectContaining({ code: "match_not_found", status: 404 }) }]);
  });

  it("rejoinMatches: false joins nothing again", async () => {
    const { conn, socket } = open({ rejoinMatches: false });
    const a = conn.joinMatch("m1");
    socket.deliver(response(1, 200, { match_id: "m1", label: {}, tick_rate: 10, presences: ["u1"], rejoined: false }));
    await a;
    socket.drop(1006);
    await vi.advanceTimersByTimeAsync(1000);
    const s2 = FakeSocket.last();
    s2.accept();
    s2.deliver(encodeHandshake({ entityId: 0, templates: [] }));
    expect(s2.of("request")).toEqual([]);
  });
});

describe("backend over HTTP: client.rpc, client.listMatches", () => {
  function client(answers: Array<{ status: number; body: string; headers?: Record<string, string> }>) {
    const calls: Array<{ url: string; method: string; headers: Record<string, string>; body: string }> = [];
    const fetch: FetchLike = async (url, init) => {
      calls.push({ url, ...init });
      const a = answers.shift()!;
      return { status: a.status, headers: { get: (n: string) => a.headers?.[n] ?? null }, text: async () => a.body };
    };
    return { client: new Client({ baseUrl: "http://h:4000/", fetch }), calls };
  }

  it("rpc: POST /api/v1/rpc/:id with the payload as the body and the bearer token", async () => {
    const { client: c, calls } = client([
      { status: 200, body: '{"payload":{"n":1}}' },
      { status: 200, body: '{"payload":null}' },
      { status: 404, body: '{"error":"unknown_rpc","message":"no function a b"}' },
      { status: 503, body: '{"error":"busy","message":"the server is busy: retry"}', headers: { "retry-after": "1" } },
      { status: 200, body: '{"nope":1}' },
    ]);
    expect(await c.rpc<{ n: number }>(session, "echo", { n: 1 })).toEqual({ n: 1 });
    expect(await c.rpc(session, "goblin_count")).toBeNull();
    const e = await c.rpc(session, "a b").catch((e: unknown) => e);
    expect(e).toBeInstanceOf(OverworldHttpError);
    expect(e).toMatchObject({ status: 404, code: "unknown_rpc", message: "no function a b" });
    await expect(c.rpc(session, "x")).rejects.toMatchObject({ status: 503, code: "busy", retryAfter: 1 });
    await expect(c.rpc(session, "x")).rejects.toMatchObject({ status: 200, code: "bad_response" });
    expect(calls.map((k) => [k.method, k.url, k.body, k.headers.authorization])).toEqual([
      ["POST", "http://h:4000/api/v1/rpc/echo", '{"n":1}', "Bearer tok-1"],
      ["POST", "http://h:4000/api/v1/rpc/goblin_count", "null", "Bearer tok-1"],
      ["POST", "http://h:4000/api/v1/rpc/a%20b", "null", "Bearer tok-1"],
      ["POST", "http://h:4000/api/v1/rpc/x", "null", "Bearer tok-1"],
      ["POST", "http://h:4000/api/v1/rpc/x", "null", "Bearer tok-1"],
    ]);
  });

  it("listMatches: POST /api/v1/matches/list", async () => {
    const { client: c, calls } = client([
      { status: 200, body: '{"matches":[{"match_id":"m1","label":{"mode":"echo"},"size":1,"tick_rate":10,"handler":"h"}]}' },
      { status: 400, body: '{"error":"invalid_query","message":"a query is a JSON object of terms"}' },
    ]);
    expect(await c.listMatches(session, { query: { mode: ["echo", "duel"] }, limit: 2 })).toEqual([
      { matchId: "m1", label: { mode: "echo" }, size: 1, tickRate: 10, handler: "h" },
    ]);
    await expect(c.listMatches(session)).rejects.toMatchObject({ status: 400, code: "invalid_query" });
    expect(calls.map((k) => [k.url, JSON.parse(k.body)])).toEqual([
      ["http://h:4000/api/v1/matches/list", { query: { mode: ["echo", "duel"] }, limit: 2 }],
      ["http://h:4000/api/v1/matches/list", {}],
    ]);
  });
});

describe("BackendErrorCode", () => {
  it("lists every code the server's backend answers", () => {
    const all: Record<BackendErrorCode, true> = Object.fromEntries(BACKEND_ERROR_CODES.map((c) => [c, true])) as Record<BackendErrorCode, true>;
    expect(Object.keys(all).length).toBe(24);
    expect(new Set(BACKEND_ERROR_CODES).size).toBe(BACKEND_ERROR_CODES.length);
  });
});
