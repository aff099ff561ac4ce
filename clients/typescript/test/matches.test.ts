// Matches, RPC and the matchmaker against the real server: the goblin example's
// `mix goblins.server --port 0` (examples/goblins; Goblins.Backend registers the match handler
// "echo" and the RPC functions "echo" and "goblin_count"; the matchmaker makes relayed matches).
// Players connect to no zone (zone ""). Skipped only when OVERWORLD_SKIP_INTEGRATION=1.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WebSocket } from "ws";
import {
  Client,
  OverworldHttpError,
  OverworldRequestError,
  type MatchData,
  type MatchNotice,
  type MatchPresenceEvent,
  type MatchmakerMatched,
  type Session,
  type ZoneConnection,
} from "../src/index.js";
import { START_TIMEOUT, startServer, type RunningServer } from "./server.js";

const SKIP = process.env.OVERWORLD_SKIP_INTEGRATION === "1";
const deviceId = () => `ts-match-${process.pid}-${Math.random().toString(36).slice(2, 12)}`;
const tag = () => `ts-${Math.random().toString(36).slice(2, 10)}`;
const text = (b: Uint8Array) => new TextDecoder().decode(b);

async function waitFor(what: string, check: () => boolean, ms = 5_000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A player connected to no zone, with everything its connection receives recorded. */
interface Player {
  session: Session;
  conn: ZoneConnection;
  data: MatchData[];
  presences: MatchPresenceEvent[];
  notices: MatchNotice[];
  matched: MatchmakerMatched[];
}

describe.skipIf(SKIP)("matches, RPC and the matchmaker against the real server", () => {
  let server: RunningServer | undefined;
  let client: Client;
  const open: ZoneConnection[] = [];

  async function player(): Promise<Player> {
    const session = await client.authenticateDevice(deviceId());
    const conn = await client.connect(session, { zone: "" });
    open.push(conn);
    const p: Player = { session, conn, data: [], presences: [], notices: [], matched: [] };
    conn.onMatchData((m) => p.data.push(m));
    conn.onMatchPresence((e) => p.presences.push(e));
    conn.onMatchNotice((n) => p.notices.push(n));
    conn.onMatchmakerMatched((m) => p.matched.push(m));
    return p;
  }

  beforeAll(async () => {
    server = await startServer("overworld-ts-matches-", ["--entities", "300"]);
    client = new Client({ baseUrl: server.baseUrl, WebSocket });
  }, START_TIMEOUT + 10_000);

  afterAll(async () => {
    for (const c of open) c.close();
    await server?.stop();
  }, 15_000);

  it("two players of no zone: an echo match created, joined, echoed, broadcast, listed, left", async () => {
    const a = await player();
    const b = await player();
    expect(a.conn.handshake!.entityId).toBe(0);
    const mode = tag();

    const matchId = await a.conn.createMatch("echo", { mode });
    expect(matchId).toMatch(/^[0-9a-f]{32}$/);
    const ja = await a.conn.joinMatch(matchId);
    expect(ja).toEqual({ matchId, label: { mode, round: 0 }, tickRate: 10, presences: [a.session.userId], rejoined: false });
    const jb = await b.conn.joinMatch(matchId, { hello: "there" });
    expect(jb.presences).toEqual([a.session.userId, b.session.userId].sort());
    // A sees B join; B is not told of its own join.
    await waitFor("A told of B's join", () => a.presences.length === 1);
    expect(a.presences).toEqual([{ matchId, joins: [b.session.userId], leaves: [] }]);
    expect(b.presences).toEqual([]);
    expect(a.conn.joinedMatches).toEqual([matchId]);

    // Op 1: echoed to its sender only, from the match itself (sender "").
    expect(a.conn.sendMatchData(matchId, 1, "ping")).toBe(true);
    await waitFor("the echo", () => a.data.length === 1);
    expect(a.data[0]).toMatchObject({ matchId, op: 1, sender: "" });
    expect(text(a.data[0]!.data)).toBe("ping");
    // Op 2: broadcast to every player, the sender named; several in order.
    for (const word of ["one", "two", "three"]) b.conn.sendMatchData(matchId, 2, word);
    b.conn.sendMatchData(matchId, 2, new Uint8Array([0, 1, 255]));
    await waitFor("the broadcasts at A", () => a.data.length === 5);
    await waitFor("the broadcasts at B", () => b.data.length === 4);
    for (const p of [a, b]) {
      const got = p.data.filter((m) => m.op === 2);
      expect(got.map((m) => m.sender)).toEqual(Array(4).fill(b.session.userId));
      expect(got.slice(0, 3).map((m) => text(m.data))).toEqual(["one", "two", "three"]);
      expect([...got[3]!.data]).toEqual([0, 1, 255]);
    }
    // B never got A's echo.
    expect(b.data.some((m) => m.op === 1)).toBe(false);

    // Listed by its label, over the socket and over HTTP.
    const listed = await b.conn.listMatches({ query: { mode } });
    expect(listed).toEqual([{ matchId, label: { mode, round: 0 }, size: 2, tickRate: 10, handler: expect.stringContaining("EchoMatch") }]);
    expect(await client.listMatches(a.session, { query: { mode, round: { gte: 0, lt: 1 } } })).toEqual(listed);
    expect(await client.listMatches(a.session, { query: { mode }, minSize: 3 })).toEqual([]);
    expect(await a.conn.listMatches({ query: { mode: `${mode}-other` } })).toEqual([]);
    const bad = await a.conn.listMatches({ query: { mode: { about: 3 } as never } }).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(OverworldRequestError);
    expect(bad).toMatchObject({ status: 400, code: "invalid_query" });

    // B leaves: A is told.
    await b.conn.leaveMatch(matchId);
    expect(b.conn.joinedMatches).toEqual([]);
    await waitFor("A told of B's leave", () => a.presences.length === 2);
    expect(a.presences[1]).toEqual({ matchId, joins: [], leaves: [b.session.userId] });
    expect((await a.conn.listMatches({ query: { mode } }))[0]!.size).toBe(1);
    expect(a.notices).toEqual([]);
  }, 20_000);

  it("joins refused, unknown matches and handlers: typed errors", async () => {
    const a = await player();
    const e = async (p: Promise<unknown>) => (await p.catch((e: unknown) => e)) as OverworldRequestError;
    expect(await e(a.conn.joinMatch("0".repeat(32)))).toMatchObject({ status: 404, code: "match_not_found", method: "match_join" });
    expect(await e(a.conn.createMatch("no-such-handler"))).toMatchObject({ status: 404, code: "unknown_handler" });
    expect(await e(a.conn.createMatch("echo", { fail: true }))).toMatchObject({ status: 400, code: "match_create_failed", message: "asked to fail" });
    const id = await a.conn.createMatch("echo", { mode: tag() });
    expect(await e(a.conn.joinMatch(id, { refuse: "not today" }))).toMatchObject({ status: 403, code: "match_join_rejected", message: "not today" });
    expect(a.conn.joinedMatches).toEqual([]);
  });

  it("data for a match the player is not in: an `error` notice, and the connection carries on", async () => {
    const a = await player();
    const id = await a.conn.createMatch("echo", { mode: tag() });
    expect(a.conn.sendMatchData(id, 2, "hello?")).toBe(true);
    await waitFor("the refusal", () => a.notices.length === 1);
    expect(a.notices[0]).toEqual({ kind: "error", code: "not_in_match", message: `not in match ${id}` });
    // Too large (4,096 bytes at most by default), once joined.
    await a.conn.joinMatch(id);
    a.conn.sendMatchData(id, 2, new Uint8Array(5000));
    await waitFor("the size refusal", () => a.notices.length === 2);
    expect(a.notices[1]).toMatchObject({ kind: "error", code: "match_data_too_large" });
    expect(await a.conn.rpc("echo", "still here")).toBe("still here");
    expect(a.conn.state).toBe("open");
  });

  it("a match that fails: its players get match_error and are no longer in it", async () => {
    const a = await player();
    const b = await player();
    const id = await a.conn.createMatch("echo", { mode: tag() });
    await a.conn.joinMatch(id);
    await b.conn.joinMatch(id);
    a.conn.sendMatchData(id, 99, ""); // the echo handler raises
    await waitFor("match_error at both", () => a.notices.length === 1 && b.notices.length === 1);
    expect(a.notices).toEqual([{ kind: "match_error", matchId: id, message: "the match failed" }]);
    expect(b.notices).toEqual(a.notices);
    expect(a.conn.joinedMatches).toEqual([]);
    await expect(a.conn.joinMatch(id)).rejects.toMatchObject({ code: "match_not_found" });
  });

  it("rpc over the socket and over HTTP; an unknown function: unknown_rpc", async () => {
    const a = await player();
    expect(await a.conn.rpc("echo", { n: 1, s: "é", list: [1, 2] })).toEqual({ n: 1, s: "é", list: [1, 2] });
    expect(await a.conn.rpc("echo", "text")).toBe("text");
    const count = await a.conn.rpc<{ goblins: number }>("goblin_count");
    expect(count.goblins).toBeGreaterThan(0);
    expect(await client.rpc(a.session, "echo", { n: 2 })).toEqual({ n: 2 });
    expect(await client.rpc(a.session, "echo")).toBeNull();
    expect(await client.rpc<{ goblins: number }>(a.session, "goblin_count")).toEqual({ goblins: expect.any(Number) });

    const overSocket = await a.conn.rpc("no_such_rpc").catch((e: unknown) => e);
    expect(overSocket).toBeInstanceOf(OverworldRequestError);
    expect(overSocket).toMatchObject({ status: 404, code: "unknown_rpc", message: "no function no_such_rpc", method: "rpc" });
    const overHttp = await client.rpc(a.session, "no_such_rpc").catch((e: unknown) => e);
    expect(overHttp).toBeInstanceOf(OverworldHttpError);
    expect(overHttp).toMatchObject({ status: 404, code: "unknown_rpc" });
    // Without a valid token over HTTP.
    await expect(client.rpc({ ...a.session, token: "not-a-token" }, "echo")).rejects.toMatchObject({ status: 401, code: "invalid_token" });
  });

  it("the matchmaker: two tickets that suit each other both get the same relayed match, and can play in it", async () => {
    const a = await player();
    const b = await player();
    const mode = tag();
    const ticket = { properties: { mode }, query: { mode }, minCount: 2, maxCount: 2 };
    const ta = await a.conn.addMatchmaker(ticket);
    const tb = await b.conn.addMatchmaker(ticket);
    expect(ta).not.toBe(tb);
    await waitFor("both matched", () => a.matched.length === 1 && b.matched.length === 1);
    const [ma, mb] = [a.matched[0]!, b.matched[0]!];
    expect([ma.ticket, mb.ticket]).toEqual([ta, tb]);
    expect(ma.matchId).toBe(mb.matchId);
    expect([...ma.users].sort()).toEqual([a.session.userId, b.session.userId].sort());
    // A matched ticket is no longer held.
    await expect(a.conn.removeMatchmaker(ta)).rejects.toMatchObject({ status: 404, code: "ticket_not_found" });

    await a.conn.joinMatch(ma.matchId);
    const joined = await b.conn.joinMatch(mb.matchId);
    expect(joined.label).toEqual({ relayed: true });
    expect(joined.tickRate).toBe(30);
    // Relayed: what one sends reaches the other (not itself), the sender named.
    a.conn.sendMatchData(ma.matchId, 5, "from a");
    b.conn.sendMatchData(mb.matchId, 6, new Uint8Array([9]));
    await waitFor("the relayed messages", () => a.data.length === 1 && b.data.length === 1);
    expect(b.data[0]).toMatchObject({ matchId: ma.matchId, op: 5, sender: a.session.userId });
    expect(text(b.data[0]!.data)).toBe("from a");
    expect(a.data[0]).toMatchObject({ op: 6, sender: b.session.userId, data: new Uint8Array([9]) });

    // A ticket removed is not matched; bad tickets are refused.
    const lone = await a.conn.addMatchmaker({ ...ticket, properties: { mode: `${mode}-lone` }, query: { mode: `${mode}-lone` } });
    await a.conn.removeMatchmaker(lone);
    await expect(a.conn.addMatchmaker({ minCount: 1, maxCount: 2 })).rejects.toMatchObject({ status: 400, code: "invalid_ticket" });
  }, 20_000);

  it("after a reconnection the player takes its place in the match back, unseen by the others", async () => {
    const a = await player();
    const b = await player();
    const id = await a.conn.createMatch("echo", { mode: tag() });
    await a.conn.joinMatch(id);
    await b.conn.joinMatch(id);
    await waitFor("A told of B", () => a.presences.length === 1);
    const handshakes: number[] = [];
    b.conn.onHandshake((h) => handshakes.push(h.entityId));

    (b.conn.socket as unknown as WebSocket).terminate();
    await waitFor("B reconnected", () => handshakes.length === 1, 10_000);
    expect(b.conn.joinedMatches).toEqual([id]);
    // The rejoin went before this broadcast (in order on the socket): it reaches the match.
    b.conn.sendMatchData(id, 2, "back");
    await waitFor("B's broadcast at A", () => a.data.some((m) => m.op === 2 && text(m.data) === "back"), 5_000);
    await waitFor("B's own copy", () => b.data.some((m) => text(m.data) === "back"));
    // A saw neither a leave nor a join.
    await sleep(200);
    expect(a.presences.length).toBe(1);
    expect(b.notices).toEqual([]);
  }, 20_000);
});
