// The map's connection: an observer (docs/protocol.md) with the operator's token in HELLO, made
// of the SDK's own pieces: its message codec (HELLO, PING, RESYNC out; HANDSHAKE, PONG, ERROR
// in) and its WorldView, which applies every SNAPSHOT exactly as a game client does (a snapshot
// applies completely or not at all; one it refuses is answered with a RESYNC). So every frame
// the map draws is the protocol's, decoded by the SDK.
//
// Not the SDK's ZoneConnection: that one also decodes every entity of every snapshot into its
// interpolation buffers and reports entering and leaving entities, which for a whole zone of
// 10,000 to 40,000 entities at 30 snapshots a second costs more than drawing them. The map
// reads the WorldView's quantized entries directly (scene.ts).
import { WorldView, backoffDelay, type TemplateSchema, type WebSocketConstructor, type WebSocketLike } from "../../typescript/src/index.js";
import { ByteReader, PROTOCOL_VERSION, decodeServerMessage, encodeClientMessage, type ClientMessage } from "../../typescript/src/protocol.js";

export interface ObserverHandshake {
  tickRate: number;
  /** 0 for an observer (it has no entity). */
  entityId: number;
  /** Metres. */
  width: number;
  height: number;
  cellSize: number;
  cols: number;
  rows: number;
  templates: TemplateSchema[];
  /** The HANDSHAKE's extensions (types this page does not know are kept for display). */
  extensions: Array<{ type: number; bytes: Uint8Array }>;
}

export interface ObserverStats {
  connects: number;
  handshakes: number;
  snapshots: number;
  refused: number;
  resyncs: number;
  bytesIn: number;
  /** Milliseconds the newest snapshot took to apply. */
  applyMs: number;
}

export type ObserverState = "connecting" | "open" | "reconnecting" | "closed";

export interface ObserverOptions {
  WebSocket?: WebSocketConstructor;
  onHandshake?: (h: ObserverHandshake) => void;
  onSnapshot?: (view: WorldView, tick: number) => void;
  onError?: (e: { code: number; message: string }) => void;
  /** Every close; `final` when the connection will not try again. */
  onClose?: (e: { code: number; reason: string; final: boolean }) => void;
  /** Milliseconds between PINGs (default 5 s). */
  pingInterval?: number;
  /** Milliseconds without any message before the socket is given up (default 20 s). */
  silence?: number;
  now?: () => number;
}

/** Close codes after which trying again cannot help: normal, version, unauthorized, replaced. */
export const FINAL_CLOSES = new Set([1000, 4001, 4003, 4004]);

export class ObserverConnection {
  world = new WorldView();
  handshake: ObserverHandshake | undefined;
  readonly stats: ObserverStats = { connects: 0, handshakes: 0, snapshots: 0, refused: 0, resyncs: 0, bytesIn: 0, applyMs: 0 };
  /** Smoothed round trip (ms), from PING/PONG. */
  rtt: number | undefined;
  private status: ObserverState = "connecting";
  private ws: WebSocketLike | null = null;
  private readonly url: string;
  private readonly token: () => string | null;
  private readonly options: ObserverOptions;
  private readonly WS: WebSocketConstructor;
  private readonly now: () => number;
  private attempt = 0;
  private lastReceived = 0;
  private resyncAt = -Infinity;
  private readonly pings = new Map<number, number>();
  private timer: ReturnType<typeof setInterval> | undefined;
  private retryTimer: ReturnType<typeof setTimeout> | undefined;

  /**
   * @param url `ws(s)://host/ws?zone=NAME`
   * @param token the operator token for HELLO, asked again at each (re)connection
   */
  constructor(url: string, token: () => string | null, options: ObserverOptions = {}) {
    this.url = url;
    this.token = token;
    this.options = options;
    const WS = options.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (WS === undefined) throw new TypeError("no WebSocket implementation");
    this.WS = WS;
    this.now = options.now ?? (() => performance.now());
    this.open();
  }

  get state(): ObserverState {
    return this.status;
  }

  /** Closes for good. */
  close(): void {
    if (this.status === "closed") return;
    this.status = "closed";
    clearTimeout(this.retryTimer);
    this.drop();
    this.options.onClose?.({ code: 1000, reason: "closed", final: true });
  }

  private send(m: ClientMessage): boolean {
    const ws = this.ws;
    if (ws === null || ws.readyState !== 1) return false;
    try {
      ws.send(encodeClientMessage(m));
      return true;
    } catch {
      return false;
    }
  }

  private open(): void {
    this.stats.connects++;
    this.world = new WorldView();
    this.resyncAt = -Infinity;
    this.pings.clear();
    let ws: WebSocketLike;
    try {
      ws = new this.WS(this.url);
    } catch (e) {
      queueMicrotask(() => this.closed(1006, `cannot open a WebSocket: ${(e as Error).message}`));
      return;
    }
    this.ws = ws;
    ws.binaryType = "arraybuffer";
    ws.onopen = () => {
      if (this.ws === ws) this.send({ type: "hello", version: PROTOCOL_VERSION, token: this.token() ?? "" });
    };
    ws.onmessage = (event: { data: unknown }) => {
      if (this.ws !== ws) return;
      this.lastReceived = this.now();
      const data = event.data;
      if (data instanceof ArrayBuffer) this.receive(new Uint8Array(data));
      else if (ArrayBuffer.isView(data)) this.receive(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
    };
    ws.onclose = (event: { code?: number; reason?: string }) => {
      if (this.ws !== ws) return;
      this.ws = null;
      clearInterval(this.timer);
      this.closed(event.code ?? 1006, event.reason ?? "");
    };
    ws.onerror = () => {};
    this.lastReceived = this.now();
    clearInterval(this.timer);
    this.timer = setInterval(() => this.tickTimer(), this.options.pingInterval ?? 5000);
  }

  private tickTimer(): void {
    if (this.now() - this.lastReceived > (this.options.silence ?? 20_000)) {
      this.drop();
      this.closed(4007, "no message from the server (client side)");
      return;
    }
    this.ping();
  }

  private ping(): void {
    const t = this.now();
    const clientTime = Math.max(0, Math.floor(t));
    if (this.pings.size >= 8) this.pings.delete(this.pings.keys().next().value!);
    if (this.send({ type: "ping", client_time: clientTime })) this.pings.set(clientTime, t);
  }

  private drop(): void {
    clearInterval(this.timer);
    const ws = this.ws;
    this.ws = null;
    if (ws === null) return;
    ws.onopen = ws.onmessage = ws.onclose = null;
    ws.onerror = () => {};
    try {
      ws.close(1000, "observer closed");
    } catch {
      // Already closing.
    }
  }

  private closed(code: number, reason: string): void {
    if (this.status === "closed") return;
    // An observer that never had a handshake, or a close that says trying again is useless: final.
    const final = FINAL_CLOSES.has(code) || (this.handshake === undefined && this.attempt >= 3);
    if (final) {
      this.status = "closed";
      this.options.onClose?.({ code, reason, final: true });
      return;
    }
    this.status = "reconnecting";
    this.options.onClose?.({ code, reason, final: false });
    if (this.status !== "reconnecting") return;
    const delay = backoffDelay(this.attempt++, { base: 500, cap: 10_000 });
    this.retryTimer = setTimeout(() => {
      if (this.status !== "reconnecting") return;
      this.status = "connecting";
      this.open();
    }, delay);
  }

  private receive(bytes: Uint8Array): void {
    this.stats.bytesIn += bytes.length;
    if (bytes[0] === 0x02) return this.snapshot(bytes);
    const m = decodeServerMessage(bytes);
    if (!m.ok) return;
    const v = m.value;
    switch (v.type) {
      case "handshake": {
        const h: ObserverHandshake = {
          tickRate: v.tick_rate,
          entityId: v.entity_id,
          width: v.width / 1024,
          height: v.height / 1024,
          cellSize: v.cell_size / 1024,
          cols: v.cols,
          rows: v.rows,
          templates: v.templates,
          extensions: v.extensions,
        };
        this.handshake = h;
        this.world.space = (h.cols + 2) * (h.rows + 2);
        this.status = "open";
        this.attempt = 0;
        this.stats.handshakes++;
        this.ping();
        this.options.onHandshake?.(h);
        return;
      }
      case "pong": {
        const sent = this.pings.get(v.client_time);
        if (sent === undefined) return;
        this.pings.delete(v.client_time);
        const sample = Math.max(0, this.now() - sent);
        this.rtt = this.rtt === undefined ? sample : this.rtt + (sample - this.rtt) / 4;
        return;
      }
      case "error":
        this.options.onError?.({ code: v.code, message: v.message });
        return;
      default:
        return;
    }
  }

  private snapshot(bytes: Uint8Array): void {
    const h = this.handshake;
    if (h === undefined || this.status !== "open") return;
    const t0 = this.now();
    const r = this.world.apply(bytes, h.templates);
    this.stats.applyMs = this.now() - t0;
    if (!r.ok) {
      this.stats.refused++;
      this.resync(bytes, r.error);
      return;
    }
    this.stats.snapshots++;
    this.options.onSnapshot?.(this.world, r.value);
  }

  /** Asks for a snapshot from scratch, at most once a second (docs/protocol.md, RESYNC). */
  private resync(bytes: Uint8Array, error: string): void {
    const t = this.now();
    if (t - this.resyncAt < 1000) return;
    let reason = 3;
    if (error === "unknown_baseline") {
      // The baseline: the second varint after the opcode.
      const baseline = readBaseline(bytes);
      reason = baseline !== undefined && baseline > this.world.tick ? 1 : 2;
    }
    if (this.send({ type: "resync", reason, last_tick: this.world.tick })) {
      this.resyncAt = t;
      this.stats.resyncs++;
    }
  }
}

/** A SNAPSHOT's baseline (its second varint), or undefined when it does not decode that far. */
export function readBaseline(bytes: Uint8Array): number | undefined {
  const r = new ByteReader(bytes, 1);
  return r.varint() === undefined ? undefined : r.varint();
}

/** The observer URL of a zone on the page's own server (or `base`, an http(s) URL). */
export function observerUrl(zone: string, base: string): string {
  const url = new URL("/ws", base);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  url.searchParams.set("zone", zone);
  return url.toString();
}
