// Where the map's live scenes come from: a Web Worker decoding the observer connection
// (scene-worker.ts; the page only draws), or, where a worker cannot start, the same work on the
// page's own thread. Both answer the same questions.
import type { Handshake, WebSocketConstructor } from "../../typescript/src/index.js";
import { Scene, transferList } from "./scene.js";
import { ScenePump, type DecodedEntity, type FromWorker, type LiveStatus, type ToWorker } from "./scene-worker.js";

export interface LiveEvents {
  onHandshake(h: Handshake): void;
  onError(e: { code: number; message: string }): void;
  onClose(e: { code: number; reason: string; final: boolean }): void;
}

export interface LiveSource {
  readonly status: LiveStatus;
  /** A newer scene than the last taken, or null. The previous one taken must not be used after. */
  take(): Scene | null;
  /** An entity of the scene last taken (its index there), decoded; null when it is not there. */
  entity(id: number, index: number): Promise<DecodedEntity | null>;
  close(): void;
}

const CLOSED: LiveStatus = { state: "closed", tick: 0, snapshots: 0, applyMs: 0, sceneMs: 0, rtt: null };

/**
 * The worker's side and the page's, joined: `post` delivers a message to the other side. In
 * the page the pump runs in a Worker; `InlineSource` runs it here, delivering its messages
 * synchronously (arrays are then shared, not transferred).
 */
class Receiver implements LiveSource {
  status: LiveStatus = CLOSED;
  protected readonly events: LiveEvents;
  private latest: Scene | null = null;
  private taken: Scene | null = null;
  private seq = 0;
  private readonly asked = new Map<number, (e: DecodedEntity | null) => void>();
  protected send: (m: ToWorker, transfer?: Transferable[]) => void = () => {};
  /**
   * Inline: the pump fills the same arrays again, so it builds only when the page takes a
   * scene ("pull"), never while the page draws the one it took.
   */
  protected inline = false;

  constructor(events: LiveEvents) {
    this.events = events;
  }

  protected receive(m: FromWorker): void {
    switch (m.type) {
      case "handshake":
        return this.events.onHandshake(m.handshake);
      case "scene":
        this.latest = Scene.fromMessage(m.scene);
        this.status = m.status;
        return;
      case "status":
        this.status = m.status;
        return;
      case "error":
        return this.events.onError(m);
      case "close":
        return this.events.onClose(m);
      case "entity": {
        const f = this.asked.get(m.seq);
        this.asked.delete(m.seq);
        return f?.(m.entity);
      }
    }
  }

  take(): Scene | null {
    // (Inline, the pump builds the newest scene now, if a snapshot came, into `latest`.)
    if (this.inline) this.send({ type: "pull" });
    const s = this.latest;
    if (s === null) return null;
    this.latest = null;
    const old = this.taken;
    this.taken = s;
    if (this.inline) return s;
    if (old !== null) {
      // Ready for the next; the previous scene's arrays go back to be filled again.
      const arrays = old.arrays;
      this.send({ type: "ready", arrays }, transferList(arrays));
    } else this.send({ type: "ready" });
    return s;
  }

  entity(id: number, index: number): Promise<DecodedEntity | null> {
    const s = this.taken;
    if (s === null) return Promise.resolve(null);
    const seq = ++this.seq;
    return new Promise((resolve) => {
      this.asked.set(seq, resolve);
      this.send({ type: "entity", seq, id, serial: s.serial, index });
    });
  }

  close(): void {
    this.send({ type: "close" });
    for (const f of this.asked.values()) f(null);
    this.asked.clear();
  }
}

/** The pump in a Web Worker (the script `workerUrl`). */
export class WorkerSource extends Receiver {
  private readonly worker: Worker;

  constructor(workerUrl: string, url: string, token: string, events: LiveEvents) {
    super(events);
    this.worker = new Worker(workerUrl);
    this.worker.onmessage = (e: MessageEvent<FromWorker>) => this.receive(e.data);
    this.worker.onerror = (e) => {
      e.preventDefault?.();
      this.events.onError({ code: 0, message: `decoding worker failed: ${e.message}` });
    };
    this.send = (m, transfer = []) => this.worker.postMessage(m, transfer);
    this.send({ type: "open", url, token });
  }

  override close(): void {
    super.close();
    this.worker.terminate();
  }
}

/** The pump on the page's thread (no worker): the same scenes, built by the same code. */
export class InlineSource extends Receiver {
  constructor(url: string, token: string, events: LiveEvents, WebSocket?: WebSocketConstructor) {
    super(events);
    this.inline = true;
    const pump = new ScenePump((m) => this.receive(m), WebSocket);
    this.send = (m) => pump.handle(m);
    this.send({ type: "open", url, token });
  }
}
