// Against the real server: the goblin example's `mix goblins.server --port 0` (examples/goblins).
// Skipped only when OVERWORLD_SKIP_INTEGRATION=1.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WebSocket } from "ws";
import {
  Client,
  ConnectError,
  OverworldHttpError,
  ZoneConnection,
  decodeEntity,
  type CloseInfo,
  type ConnectOptions,
  type Handshake,
  type ServerError,
  type Session,
} from "../src/index.js";
import { MOVE } from "./helpers.js";
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

/** A connection's events from now on, recorded (after `await client.connect`: the handshakes of reconnections). */
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
  const connect = async (session: Session, options: ConnectOptions = {}) => {
    const conn = await client.connect(session, { zone: "goblins", ...options });
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
    const conn = await connect(r);
    expect(conn.state).toBe("open");
    expect(conn.entityId).toBeGreaterThan(0);
    conn.close();
  }, 20_000);

  it("connects: handshake, snapshots with goblins, typed inputs acknowledged and the player moving, RTT, reconnect", async () => {
    const session = await client.authenticateDevice(deviceId());
    const conn = await connect(session);
    const rec = watch(conn);
    // Resolved on the handshake.
    const h = conn.handshake!;
    expect(await conn.connected()).toBe(h);
    expect(conn.state).toBe("open");
    expect(h.version).toBe(2);
    expect(h.entityId).toBeGreaterThan(0);
    expect(h.tickRate).toBeGreaterThan(0);
    expect(h.width).toBeGreaterThan(0);
    // The grid (Overworld.Spatial.Grid): cells of cellSize over the world.
    expect(h.cols).toBe(Math.floor(h.width / h.cellSize) + 1);
    expect(h.rows).toBe(Math.floor(h.height / h.cellSize) + 1);
    const names = h.templates.map((t) => t.name);
    expect(names).toContain("goblin");
    expect(names).toContain("player");
    // The goblin world's input layout: mx, my in -127..127.
    expect(h.input).toEqual(MOVE);

    // Snapshots with goblins in view.
    const goblins = () => [...conn.world.entities().values()].filter((e) => h.templates[e.template]?.name === "goblin").length;
    await waitFor("goblins in view", () => goblins() > 0);
    expect(conn.stats.refused).toBe(0);

    // RTT from the PING sent right after the handshake.
    await waitFor("an RTT", () => conn.rtt !== undefined, 5000);
    expect(conn.rtt!).toBeGreaterThanOrEqual(0);
    expect(conn.rtt!).toBeLessThan(1000);

    // The player's own entity, and its position as the inputs move it.
    const player = (axis: "x" | "y") => {
      const e = conn.world.entities().get(h.entityId);
      const d = e && decodeEntity(e, h.templates);
      return d?.values[axis] as number | undefined;
    };
    const playerX = () => player("x");
    await waitFor("the player's entity in view", () => playerX() !== undefined);
    // Its cell's key from the grid: (row + 1) * (cols + 2) + col + 1.
    const col = Math.floor(playerX()! / h.cellSize);
    const row = Math.floor(player("y")! / h.cellSize);
    expect(conn.world.entityCells().get(h.entityId)).toBe((row + 1) * (h.cols + 2) + col + 1);
    for (const key of conn.world.cells.keys()) {
      const c = (key % (h.cols + 2)) - 1;
      const r = Math.floor(key / (h.cols + 2)) - 1;
      expect(c >= 0 && c < h.cols && r >= 0 && r < h.rows).toBe(true);
      expect(conn.world.cellTick(key)).toBeLessThanOrEqual(conn.tick);
    }
    const x0 = playerX()!;
    let last = 0;
    for (let i = 0; i < 20; i++) {
      last = conn.sendInput({ mx: 100, my: 0 }); // east, 100/127 of full speed
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
    await waitFor("the second handshake", () => rec.handshakes.length === 1);
    expect(rec.handshakes[0]!.entityId).toBe(h.entityId);
    expect(conn.entityId).toBe(h.entityId);
    // The input sequence goes on; the player walks along y now.
    await waitFor("the player's entity in view again", () => player("y") !== undefined);
    const y0 = player("y")!;
    let seq = 0;
    for (let i = 0; i < 10; i++) {
      seq = conn.sendInput({ mx: 0, my: 100 });
      expect(seq).toBe(last + 1 + i);
      await sleep(50);
    }
    await waitFor(`inputAck to reach ${seq} after the reconnect`, () => conn.inputAck === seq, 5000);
    await sleep(100);
    expect(player("y")!).toBeGreaterThan(y0 + 0.5);
    // Every snapshot applied (the first of each socket has baseline 0, the others the previous tick).
    expect(conn.stats.refused).toBe(0);
    expect(conn.stats.resyncs).toBe(0);
    conn.close();
    expect(rec.errors).toEqual([]);
  }, 30_000);

  it("a bad token: connect rejects with a ConnectError (close 4003, ERROR 3), and nothing is tried again", async () => {
    const bad: Session = { userId: "0", token: "not-a-token", refreshToken: "nor-this", expiresAt: Date.now() + 3_600_000, refreshExpiresAt: Date.now() + 3_600_000, created: false };
    const e = await connect(bad).catch((e: unknown) => e);
    expect(e).toBeInstanceOf(ConnectError);
    expect(e).toMatchObject({ code: 4003, error: { code: 3 } });
  }, 15_000);

  it("a refused token is not refreshed before a first handshake: the connection is closed for good", async () => {
    const s = await client.authenticateDevice(deviceId());
    let refreshes = 0;
    const conn = new ZoneConnection(client.socketUrl("goblins"), { ...s, token: "not-a-token" }, {
      WebSocket,
      refresh: async (old) => {
        refreshes++;
        return client.refresh(old);
      },
    });
    open.push(conn);
    const rec = watch(conn);
    await expect(conn.connected()).rejects.toMatchObject({ name: "ConnectError", code: 4003, error: { code: 3 } });
    await sleep(500);
    expect(rec.closes).toEqual([expect.objectContaining({ code: 4003, willReconnect: false })]);
    expect(rec.errors.map((e) => e.code)).toEqual([3]);
    expect(rec.handshakes).toEqual([]);
    expect(refreshes).toBe(0);
    expect(conn.stats.connects).toBe(1);
    expect(conn.state).toBe("closed");
  }, 15_000);

  it("typed inputs are checked against the zone's layout before anything is sent", async () => {
    const conn = await connect(await client.authenticateDevice(deviceId()));
    expect(() => conn.sendInput({ mx: 100 })).toThrow(new TypeError("input move: field my is missing"));
    expect(() => conn.sendInput({ mx: 0.5, my: 0 })).toThrow(TypeError);
    expect(conn.inputSeq).toBe(0);
    conn.close();
  }, 15_000);
  it("storage: write, read, list in pages, conditional writes and deletes, typed errors", async () => {
    const me = await client.authenticateDevice(deviceId());
    const other = await client.authenticateDevice(deviceId());
    const c = `ts-${Math.random().toString(36).slice(2, 10)}`;

    const acks = await client.storage.write(me, [
      { collection: c, key: "a", value: { hp: 3 } },
      { collection: c, key: "b", value: { n: 1 }, read: 2, version: "*" },
    ]);
    expect(acks.map((a) => [a.key, a.userId])).toEqual([["a", me.userId], ["b", me.userId]]);
    expect(acks[0]!.version).toMatch(/^[0-9a-f]{32}$/);

    const [a] = await client.storage.read<{ hp: number }>(me, [{ collection: c, key: "a" }]);
    expect(a!.value.hp).toBe(3);
    expect([a!.version, a!.read, a!.write]).toEqual([acks[0]!.version, 1, 1]);

    const p1 = await client.storage.list(me, c, { userId: me.userId, limit: 1 });
    expect(p1.objects.map((o) => o.key)).toEqual(["a"]);
    const p2 = await client.storage.list(me, c, { userId: me.userId, limit: 1, cursor: p1.cursor! });
    expect(p2.objects.map((o) => o.key)).toEqual(["b"]);
    expect(p2.cursor).toBeUndefined();

    // Another user reads the public object only, and may not delete it.
    expect((await client.storage.list(other, c)).objects.map((o) => o.key)).toEqual(["b"]);
    expect(await client.storage.read(other, [{ collection: c, key: "a", userId: me.userId }])).toEqual([]);

    const conflict = await client.storage.write(me, [{ collection: c, key: "b", value: {}, version: "*" }]).catch((e: unknown) => e);
    expect(conflict).toBeInstanceOf(OverworldHttpError);
    expect([(conflict as OverworldHttpError).status, (conflict as OverworldHttpError).code]).toEqual([409, "version_conflict"]);

    const bad = await client.storage.write(me, [{ collection: "", key: "k", value: {} }]).catch((e: unknown) => e);
    expect((bad as OverworldHttpError).code).toBe("invalid_request");
    expect((bad as OverworldHttpError).message).toMatch(/^item 0: collection/);

    await client.storage.delete(me, [{ collection: c, key: "a", version: acks[0]!.version }]);
    expect((await client.storage.list(me, c)).objects.map((o) => o.key)).toEqual(["b"]);
  });
});
