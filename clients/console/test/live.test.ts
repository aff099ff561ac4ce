import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { encodeHandshake, encodeSnapshot, error, FakeSocket, GOBLIN, PLAYER, qm } from "../../typescript/test/helpers.js";
import { InlineSource } from "../src/live.js";
import { ScenePump, type FromWorker } from "../src/scene-worker.js";
import { Scene } from "../src/scene.js";

const templates = [GOBLIN, PLAYER];
const goblin = (id: number, x: number) => ({ id, template: 0, q: [qm(x), qm(5), 0, 1, 0] });
const snapshot = (tick: number, ids: number[]) =>
  encodeSnapshot({ tick, cells: [{ key: 40, entities: ids.map((id) => goblin(id, id)) }], templates });

describe("ScenePump (the decoding worker's side)", () => {
  beforeEach(() => FakeSocket.reset());

  const start = () => {
    const out: Array<{ m: FromWorker; transfer: Transferable[] }> = [];
    const pump = new ScenePump((m, transfer = []) => out.push({ m, transfer }), FakeSocket as never);
    pump.handle({ type: "open", url: "ws://h/ws?zone=z", token: "op" });
    const ws = FakeSocket.last();
    ws.accept();
    ws.deliver(encodeHandshake({ entityId: 0, templates }));
    const scenes = () => out.filter((o) => o.m.type === "scene").map((o) => o.m as Extract<FromWorker, { type: "scene" }>);
    return { pump, ws, out, scenes };
  };

  it("sends the handshake, then a scene per snapshot while the page keeps up, its arrays transferred", () => {
    const { pump, ws, out, scenes } = start();
    expect(ws.of("hello")[0]!.token).toBe("op");
    expect(out[0]!.m.type).toBe("handshake");
    ws.deliver(snapshot(1, [1, 2, 3]));
    expect(scenes()).toHaveLength(1);
    const first = scenes()[0]!;
    expect(first.scene.count).toBe(3);
    expect(first.status).toMatchObject({ state: "open", tick: 1, snapshots: 1 });
    const transferred = out.find((o) => o.m.type === "scene")!.transfer;
    expect(transferred).toHaveLength(7);
    // The page has not taken it: the next snapshots wait, and only the newest is sent.
    ws.deliver(snapshot(2, [1, 2]));
    ws.deliver(snapshot(3, [1]));
    expect(scenes()).toHaveLength(1);
    pump.handle({ type: "ready" });
    expect(scenes()).toHaveLength(2);
    expect(scenes()[1]!.scene.tick).toBe(3);
    expect(scenes()[1]!.scene.count).toBe(1);
    // Nothing new: ready alone sends nothing.
    pump.handle({ type: "ready" });
    expect(scenes()).toHaveLength(2);
    ws.deliver(snapshot(4, [7, 8]));
    expect(scenes()).toHaveLength(3);
  });

  it("reuses the arrays the page gives back", () => {
    const { pump, ws, scenes } = start();
    ws.deliver(snapshot(1, [1, 2]));
    const back = Scene.fromMessage(scenes()[0]!.scene).arrays;
    pump.handle({ type: "ready", arrays: back });
    ws.deliver(snapshot(2, [1, 2, 3]));
    expect(scenes()[1]!.scene.arrays.xs).toBe(back.xs);
  });

  it("decodes an entity of a scene the page holds, by its build and index", () => {
    const { pump, ws, out, scenes } = start();
    ws.deliver(snapshot(1, [4, 9]));
    const s = scenes()[0]!.scene;
    const i = Array.from(s.arrays.ids.subarray(0, s.count)).indexOf(9);
    pump.handle({ type: "entity", seq: 1, id: 9, serial: s.serial, index: i });
    pump.handle({ type: "entity", seq: 2, id: 4, serial: s.serial, index: i });
    pump.handle({ type: "entity", seq: 3, id: 9, serial: 999, index: i });
    const answers = out.filter((o) => o.m.type === "entity").map((o) => o.m);
    expect(answers[0]).toMatchObject({ seq: 1, entity: { id: 9, values: { x: 9, y: 5, state: "wander", kind: "goblin" } } });
    expect(answers[1]).toEqual({ type: "entity", seq: 2, entity: null });
    expect(answers[2]).toEqual({ type: "entity", seq: 3, entity: null });
  });

  it("tells closes and errors", () => {
    const { ws, out } = start();
    ws.deliver(error(3, "unauthorized"));
    ws.drop(4003, "unauthorized");
    expect(out.filter((o) => o.m.type === "error").map((o) => o.m)).toEqual([{ type: "error", code: 3, message: "unauthorized" }]);
    expect(out.filter((o) => o.m.type === "close").map((o) => o.m)).toEqual([{ type: "close", code: 4003, reason: "unauthorized", final: true }]);
  });

  describe("before a first handshake", () => {
    beforeEach(() => vi.useFakeTimers());
    afterEach(() => vi.useRealTimers());

    const opened = () => {
      const out: FromWorker[] = [];
      const pump = new ScenePump((m) => out.push(m), FakeSocket as never);
      pump.handle({ type: "open", url: "ws://h/ws?zone=z", token: "op" });
      const closes = () => out.filter((m) => m.type === "close");
      return { pump, closes };
    };

    it("tries again no sooner than a full server's retry_after (4008); a refused token is final", () => {
      const { pump, closes } = opened();
      const ws = FakeSocket.last();
      ws.accept();
      ws.deliver(error(8, "retry_after=5; at most 3 observers at once on this server"));
      ws.drop(4008, "full");
      expect(closes()).toEqual([{ type: "close", code: 4008, reason: "full", final: false }]);
      expect(pump.status().state).toBe("reconnecting");
      vi.advanceTimersByTime(4_990);
      expect(FakeSocket.instances).toHaveLength(1);
      vi.advanceTimersByTime(20);
      expect(FakeSocket.instances).toHaveLength(2);
      const again = FakeSocket.last();
      again.accept();
      expect(again.of("hello")).toEqual([{ type: "hello", version: 2, token: "op" }]);
      again.drop(4003, "unauthorized");
      expect(closes()[1]).toEqual({ type: "close", code: 4003, reason: "unauthorized", final: true });
      vi.advanceTimersByTime(60_000);
      expect(FakeSocket.instances).toHaveLength(2);
      expect(pump.status().state).toBe("closed");
    });

    it("gives up after three attempts more; a connection that had its handshake reconnects on its own", () => {
      const { closes } = opened();
      for (let i = 0; i < 4; i++) {
        FakeSocket.last().drop(1006);
        vi.advanceTimersByTime(10_000);
      }
      expect(FakeSocket.instances).toHaveLength(4);
      expect(closes().map((m) => m.type === "close" && m.final)).toEqual([false, false, false, true]);
      FakeSocket.reset();
      const { closes: later } = opened();
      const ws = FakeSocket.last();
      ws.accept();
      ws.deliver(encodeHandshake({ entityId: 0, templates }));
      ws.drop(1006);
      expect(later()).toEqual([{ type: "close", code: 1006, reason: "", final: false }]);
      vi.advanceTimersByTime(10_000);
      expect(FakeSocket.instances).toHaveLength(2);
    });
  });
});

describe("InlineSource (no worker)", () => {
  beforeEach(() => FakeSocket.reset());

  it("builds the newest scene when the page takes one, and keeps the one taken intact until the next take", async () => {
    const handshakes: unknown[] = [];
    const src = new InlineSource("ws://h/ws?zone=z", "op", { onHandshake: (h) => handshakes.push(h), onError: () => {}, onClose: () => {} }, FakeSocket as never);
    const ws = FakeSocket.last();
    ws.accept();
    ws.deliver(encodeHandshake({ entityId: 0, templates }));
    expect(handshakes).toHaveLength(1);
    expect(src.take()).toBeNull();
    ws.deliver(snapshot(1, [1, 2, 3]));
    const a = src.take()!;
    expect([a.tick, a.count]).toEqual([1, 3]);
    expect(src.take()).toBeNull();
    ws.deliver(snapshot(2, [5]));
    ws.deliver(snapshot(3, [6, 7]));
    // The scene taken is still tick 1's until the next take.
    expect([a.tick, a.count, a.ids[0]]).toEqual([1, 3, 1]);
    const b = src.take()!;
    expect([b.tick, b.count]).toEqual([3, 2]);
    expect(src.status).toMatchObject({ tick: 3, snapshots: 3, state: "open" });
    const i = Array.from(b.ids.subarray(0, b.count)).indexOf(7);
    expect((await src.entity(7, i))?.values.x).toBe(7);
    src.close();
    expect(ws.closedWith?.code).toBe(1000);
  });
});
