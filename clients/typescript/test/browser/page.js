// The SDK as a game page uses it: an ES module import of the build (dist/), the browser's fetch
// and its native WebSocket (nothing passed in). test/browser.test.ts calls window.runSdk.
// `/sdk/protocol.js` is the build of the `@overworld/client/protocol` subpath.
import { Client, ConnectError, decodeEntity } from "/sdk/index.js";
import { BitReader, PROTOCOL_VERSION, encodeInput } from "/sdk/protocol.js";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(what, check, ms) {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(20);
  }
}

const state = (text) => (document.getElementById("state").textContent = text);

/** Authenticates a device, plays a little in zone "goblins", and answers what it saw. */
window.runSdk = async (baseUrl) => {
  state("authenticating");
  const client = new Client({ baseUrl });
  const session = await client.authenticateDevice(`browser-${Date.now()}-${Math.random().toString(36).slice(2, 10)}`);

  // A refused token: connect rejects.
  state("connecting with a bad token");
  let connectError = null;
  try {
    (await client.connect({ ...session, token: "not-a-token" }, { zone: "goblins" })).close();
  } catch (e) {
    connectError = { name: e.name, isConnectError: e instanceof ConnectError, code: e.code, errorCode: e.error?.code ?? null };
  }

  state("connecting");
  const conn = await client.connect(session, { zone: "goblins" });
  const errors = [];
  const closes = [];
  let snapshots = 0;
  conn.onError((e) => errors.push({ code: e.code, message: e.message }));
  conn.onClose((c) => closes.push({ code: c.code, reason: c.reason, willReconnect: c.willReconnect }));
  conn.onSnapshot(() => snapshots++);
  try {
    const h = conn.handshake;
    // The input layout with the subpath's encoder: mx 100, my 0 → q 227, 127.
    const encoded = [...encodeInput(h.input, { mx: 100, my: 0 })];
    const r = new BitReader(new Uint8Array(encoded));
    const protocol = { encoded, reader: [r.uint(8) - 127, r.uint(8) - 127], version: PROTOCOL_VERSION };
    const entities = () => [...conn.world.entities().values()];
    const goblins = () => entities().filter((e) => h.templates[e.template]?.name === "goblin").length;
    const afterHandshake = snapshots;
    await until("3 snapshots with goblins in view", () => snapshots >= afterHandshake + 3 && goblins() > 0, 15_000);

    const playerX = () => {
      const e = conn.world.entities().get(h.entityId);
      return e ? decodeEntity(e, h.templates)?.values.x : undefined;
    };
    await until("the player's entity in view", () => playerX() !== undefined, 10_000);
    const x0 = playerX();

    state("moving");
    let last = 0;
    for (let i = 0; i < 10; i++) {
      last = conn.sendInput({ mx: 100, my: 0 }); // the goblins' input layout: east
      await sleep(50);
    }
    await until(`inputAck to reach ${last}`, () => conn.inputAck >= last, 10_000);
    // Snapshots after the ack carry the moved player.
    const acked = snapshots;
    await until("2 snapshots after the ack", () => snapshots >= acked + 2, 5_000);

    const sampled = [...conn.sample().values()];
    const withXY = sampled.filter((e) => Number.isFinite(e.values.x) && Number.isFinite(e.values.y));
    const self = conn.sample().get(h.entityId);
    state("done");
    return {
      origin: location.origin,
      nativeWebSocket: conn.socket instanceof WebSocket,
      userAgent: navigator.userAgent,
      entityId: conn.entityId,
      tickRate: h.tickRate,
      templates: h.templates.map((t) => t.name),
      version: h.version,
      input: h.input && { name: h.input.name, fields: h.input.fields.map((f) => f.name) },
      protocol,
      connectError,
      snapshots,
      goblins: goblins(),
      tick: conn.tick,
      lastSeq: last,
      inputSeq: conn.inputSeq,
      inputAck: conn.inputAck,
      x0,
      x1: playerX(),
      sampled: sampled.length,
      sampledWithXY: withXY.length,
      sampledGoblins: sampled.filter((e) => e.template.name === "goblin").length,
      firstSample: withXY[0] ? { id: withXY[0].id, x: withXY[0].values.x, y: withXY[0].values.y } : null,
      self: self ? { x: self.values.x, y: self.values.y } : null,
      serverTime: conn.serverTime(),
      rtt: conn.rtt ?? null,
      refused: conn.stats.refused,
      resyncs: conn.stats.resyncs,
      state: conn.state,
      // Copies: close() below reports its own close.
      errors: [...errors],
      closes: [...closes],
    };
  } finally {
    conn.close();
  }
};

state("ready");
window.sdkReady = true;
