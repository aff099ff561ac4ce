// Against the real server: the goblin example's `mix goblins.server --port 0` (examples/goblins).
// Skipped only when OVERWORLD_SKIP_INTEGRATION=1.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WebSocket } from "ws";
import {
  Client,
  OverworldHttpError,
  decodeEntity,
  type CloseInfo,
  type ConnectOptions,
  type Handshake,
  type ServerError,
  type Session,
  type ZoneConnection,
} from "../src/index.js";
import { START_TIMEOUT, startServer, type RunningServer } from "./server.js";

const SKIP = process.env.OVERWORLD_SKIP_INTEGRATION === "1";

let server: RunningServer | undefined;

async function waitFor(what: string, check: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const deviceId = () => `ts-client-${process.pid}-${Math.random().toString(36).slice(2, 12)}`;

/** A connection with its events recorded. */
function watch(conn: ZoneConnection) {
  const rec = { handshakes: [] as Handshake[], closes: [] as CloseInfo[], errors: [] as ServerError[], snapshots: 0 };
  conn.onHandshake((h) => rec.handshakes.push(h));
  conn.onClose((c) => rec.closes.push(c));
  conn.onError((e) => rec.errors.push(e));
  conn.onSnapshot(() => rec.snapshots++);
  return rec;
}

describe.skipIf(SKIP)("against the real server (mix goblins.server)", () => {
  let client: Client;
  const open: ZoneConnection[] = [];
  const connect = (session: Session, options: ConnectOptions = {}) => {
    const conn = client.connect(session, { zone: "goblins", ...options });
    open.push(conn);
    return conn;
  };

  beforeAll(async () => {
    server = await startServer();
    client = new Client({ baseUrl: server.baseUrl, WebSocket });
  }, START_TIMEOUT + 10_000);

  afterAll(async () => {
    for (const c of open) c.close();
    await server?.stop();
  }, 15_000);

  it("authenticates a device, and the same device again without creating an account", async () => {
    const id = deviceId();
    const s = await client.authenticateDevice(id);
    expect(s.token.length).toBeGreaterThan(0);
    expect(s.refreshToken.length).toBeGreaterThan(0);
    expect(s.userId.length).toBeGreaterThan(0);
    expect(s.created).toBe(true);
    expect(s.expiresAt).toBeGreaterThan(Date.now() + 60_000);
    expect(s.refreshExpiresAt).toBeGreaterThan(s.expiresAt);
    const again = await client.authenticateDevice(id);
    expect(again.created).toBe(false);
    expect(again.userId).toBe(s.userId);
  });

  it("answers HTTP errors as OverworldHttpError", async () => {
    const e = await client.authenticateDevice("short").catch((e: unknown) => e);
    expect(e).toBeInstanceOf(OverworldHttpError);
    expect(e).toMatchObject({ status: 400, code: "invalid_device_id" });
    await expect(client.refresh("not-a-token")).rejects.toMatchObject({ status: 401, code: "invalid_token" });
  });

  it("refreshes a session", async () => {
    const s = await client.authenticateDevice(deviceId());
    const r = await client.refresh(s);
    expect(r.userId).toBe(s.userId);
    expect(r.token.length).toBeGreaterThan(0);
    expect(r.refreshToken.length).toBeGreaterThan(0);
    expect(r.created).toBe(false);
    // The new token connects.
    const conn = connect(r);
    const rec = watch(conn);
    await waitFor("the handshake with a refreshed token", () => rec.handshakes.length === 1);
    expect(conn.entityId).toBeGreaterThan(0);
    conn.close();
  }, 20_000);

  it("connects: handshake, snapshots with goblins, inputs acknowledged and the player moving, RTT, reconnect", async () => {
    const session = await client.authenticateDevice(deviceId());
    const conn = connect(session);
    const rec = watch(conn);
    await waitFor("the handshake", () => rec.handshakes.length === 1);
    const h = rec.handshakes[0]!;
    expect(h.entityId).toBeGreaterThan(0);
    expect(h.tickRate).toBeGreaterThan(0);
    expect(h.width).toBeGreaterThan(0);
    const names = h.templates.map((t) => t.name);
    expect(names).toContain("goblin");
    expect(names).toContain("player");

    // Snapshots with goblins in view.
    const goblins = () => [...conn.world.entities().values()].filter((e) => h.templates[e.template]?.name === "goblin").length;
    await waitFor("goblins in view", () => goblins() > 0);
    expect(conn.stats.refused).toBe(0);

    // RTT from the PING sent right after the handshake.
    await waitFor("an RTT", () => conn.rtt !== undefined, 5000);
    expect(conn.rtt!).toBeGreaterThanOrEqual(0);
    expect(conn.rtt!).toBeLessThan(1000);

    // The player's own entity, and its x as the inputs move it.
    const playerX = () => {
      const e = conn.world.entities().get(h.entityId);
      const d = e && decodeEntity(e, h.templates);
      return d?.values.x as number | undefined;
    };
    await waitFor("the player's entity in view", () => playerX() !== undefined);
    const x0 = playerX()!;
    let last = 0;
    for (let i = 0; i < 20; i++) {
      last = conn.sendInput(new Uint8Array([100, 0]));
      expect(last).toBe(i + 1);
      await sleep(50);
    }
    await waitFor(`inputAck to reach ${last}`, () => conn.inputAck === last, 5000);
    await sleep(100);
    expect(playerX()!).toBeGreaterThan(x0 + 1);
    expect(conn.serverTime()).toBeGreaterThan(0);
    expect(conn.sample().size).toBeGreaterThan(0);

    // Force-close the underlying socket: the connection comes back with the same entity.
    const before = conn.socket as unknown as WebSocket;
    before.terminate();
    await waitFor("the close", () => rec.closes.length === 1);
    expect(rec.closes[0]!.willReconnect).toBe(true);
    await waitFor("the second handshake", () => rec.handshakes.length === 2);
    expect(rec.handshakes[1]!.entityId).toBe(h.entityId);
    expect(conn.entityId).toBe(h.entityId);
    // The input sequence goes on.
    const seq = conn.sendInput(new Uint8Array([0, 100]));
    expect(seq).toBe(last + 1);
    await waitFor(`inputAck to reach ${seq} after the reconnect`, () => conn.inputAck === seq, 5000);
    // Every snapshot applied (the first of each socket has baseline 0, the others the previous tick).
    expect(conn.stats.refused).toBe(0);
    expect(conn.stats.resyncs).toBe(0);
    conn.close();
    expect(rec.errors).toEqual([]);
  }, 30_000);

  it("a bad token is closed with 4003 and, without a working refresh, not tried again", async () => {
    const bad: Session = { userId: "0", token: "not-a-token", refreshToken: "nor-this", expiresAt: Date.now() + 3_600_000, refreshExpiresAt: Date.now() + 3_600_000, created: false };
    const conn = connect(bad);
    const rec = watch(conn);
    await waitFor("the close", () => rec.closes.length === 1);
    expect(rec.closes[0]).toMatchObject({ code: 4003, willReconnect: false });
    expect(rec.errors.map((e) => e.code)).toEqual([3]);
    expect(rec.handshakes).toEqual([]);
    expect(conn.state).toBe("closed");
  }, 15_000);

  it("a refused token is refreshed and the connection made again", async () => {
    const s = await client.authenticateDevice(deviceId());
    const conn = connect({ ...s, token: "not-a-token" });
    const rec = watch(conn);
    await waitFor("the handshake after refreshing", () => rec.handshakes.length === 1);
    expect(rec.closes[0]).toMatchObject({ code: 4003, willReconnect: true });
    expect(conn.session.token).not.toBe("not-a-token");
    expect(conn.entityId).toBeGreaterThan(0);
    conn.close();
  }, 15_000);
});
