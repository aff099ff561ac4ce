// The decoding side of the live map, run in a Web Worker (worker.ts) so that applying 30
// snapshots a second of a 40,000-entity world never delays a frame: the observer connection and
// the scene built from each snapshot. Scenes go to the page one at a time: a new one only once
// the page took the previous (and gave its arrays back for reuse), the newest snapshot's, so a
// slow page gets fewer, never older, scenes.
//
// The connection is the SDK's ZoneConnection with the operator's token in HELLO (an observer,
// docs/protocol.md), so every frame the map draws is the protocol's as a game client applies it
// (WorldView; a snapshot refused is answered with a RESYNC; reconnection with back-off, a full
// server's retry_after honoured). It runs with `trackEntities: false`: a whole zone of 10,000
// to 40,000 entities at 30 snapshots a second is not decoded into interpolation buffers; the
// scene reads the WorldView's quantized entries directly (scene.ts), and nothing interpolates.
import {
  FINAL_CLOSES,
  FULL,
  UNAUTHORIZED,
  ZoneConnection,
  backoffDelay,
  decodeEntity,
  retryAfter,
  type CloseInfo,
  type ConnectionState,
  type Entry,
  type Handshake,
  type ServerError,
  type Session,
  type Value,
  type WebSocketConstructor,
  type WorldView,
} from "../../typescript/src/index.js";
import { ColourTable } from "./colors.js";
import { Scene, fromView, positionLayouts, type PositionLayout, type SceneArrays, type SceneMessage } from "./scene.js";

/** How the connection is doing (with every scene, and on changes). */
export interface LiveStatus {
  state: ConnectionState;
  /** The newest snapshot applied. */
  tick: number;
  snapshots: number;
  applyMs: number;
  /** Milliseconds the newest scene took to build from the view. */
  sceneMs: number;
  /** Milliseconds (null before the first PONG). */
  rtt: number | null;
}

/** A selected entity as its template decodes it. */
export interface DecodedEntity {
  id: number;
  values: Record<string, Value>;
}

export type ToWorker =
  /** The operator token goes in HELLO (as it is at the first connection: it is not asked again). */
  | { type: "open"; url: string; token: string }
  | { type: "ready"; arrays?: SceneArrays }
  /** (Inline, without a worker: build the newest scene now if a snapshot came.) */
  | { type: "pull" }
  | { type: "entity"; seq: number; id: number; serial: number; index: number }
  | { type: "close" };

export type FromWorker =
  | { type: "handshake"; handshake: Handshake }
  | { type: "scene"; scene: SceneMessage; status: LiveStatus }
  | { type: "status"; status: LiveStatus }
  | { type: "error"; code: number; message: string }
  | { type: "close"; code: number; reason: string; final: boolean }
  | { type: "entity"; seq: number; entity: DecodedEntity | null };

export type Post = (m: FromWorker, transfer?: Transferable[]) => void;

/** Entries of this many recent builds are kept, for the page's questions about its scene. */
const KEPT = 4;

/** The observer's pings (ms), its silence before giving a socket up, its back-off. */
const PING_INTERVAL = 5000;
const SILENCE = 20_000;
const BACKOFF = { base: 500, cap: 10_000 };
/** Attempts again when a connection closes before its first handshake (the SDK's connection gives up then). */
const FIRST_ATTEMPTS = 3;

/** The operator's token as the session the SDK's connection says HELLO with (never refreshed). */
function observerSession(token: string): Session {
  return { userId: "", token, refreshToken: "", expiresAt: Infinity, refreshExpiresAt: 0, created: false };
}

export class ScenePump {
  private readonly post: Post;
  private readonly WebSocket: WebSocketConstructor | undefined;
  private conn: ZoneConnection | null = null;
  private url = "";
  private token = "";
  /** Attempts made again before a first handshake, and the timer of the next one. */
  private attempts = 0;
  private retryTimer: ReturnType<typeof setTimeout> | undefined;
  private lastError: ServerError | undefined;
  private hs: Handshake | undefined;
  private colours = new ColourTable([]);
  private layouts: Array<PositionLayout | null> = [];
  private readonly scene = new Scene();
  private spare: SceneArrays | null = null;
  private serial = 0;
  /** The SDK's entries of each recent build (by serial), index for index with its scene. */
  private readonly kept = new Map<number, Entry[]>();
  /** A snapshot came since the last scene sent. */
  private pending = false;
  /** The page took the last scene sent. */
  private ready = true;
  private sceneMs = 0;

  constructor(post: Post, WebSocket?: WebSocketConstructor) {
    this.post = post;
    this.WebSocket = WebSocket;
  }

  handle(m: ToWorker): void {
    switch (m.type) {
      case "open":
        return this.open(m.url, m.token);
      case "ready":
        if (m.arrays !== undefined) this.spare = m.arrays;
        this.ready = true;
        return this.pump();
      case "pull":
        if (this.pending) {
          this.ready = true;
          this.pump();
        }
        return;
      case "entity":
        return this.post({ type: "entity", seq: m.seq, entity: this.entity(m.id, m.serial, m.index) });
      case "close":
        return this.stop();
    }
  }

  private stop(): void {
    clearTimeout(this.retryTimer);
    this.retryTimer = undefined;
    const c = this.conn;
    this.conn = null;
    c?.close();
  }

  private open(url: string, token: string): void {
    this.stop();
    this.url = url;
    this.token = token;
    this.attempts = 0;
    this.connect();
  }

  private connect(): void {
    this.retryTimer = undefined;
    this.hs = undefined;
    this.pending = false;
    this.ready = true;
    this.lastError = undefined;
    const c = new ZoneConnection(this.url, observerSession(this.token), {
      trackEntities: false,
      pingInterval: PING_INTERVAL,
      heartbeatTimeout: SILENCE,
      reconnect: BACKOFF,
      ...(this.WebSocket === undefined ? {} : { WebSocket: this.WebSocket }),
    });
    this.conn = c;
    c.onHandshake((hs) => {
      this.attempts = 0;
      this.hs = hs;
      this.colours = new ColourTable(hs.templates);
      this.layouts = positionLayouts(hs.templates);
      this.post({ type: "handshake", handshake: hs });
      this.post({ type: "status", status: this.status() });
    });
    c.onSnapshot(() => {
      this.pending = true;
      this.pump();
    });
    c.onError((e) => {
      this.lastError = e;
      this.post({ type: "error", code: e.code, message: e.message });
    });
    c.onClose((e) => this.closed(c, e));
  }

  /**
   * A socket closed. Once a connection had its handshake, the SDK's connection decides (it
   * reconnects, or it is closed for good). Before, the SDK's gives up at once: the map tries
   * again a few times with the same back-off, not before what a full server asked (4008,
   * `retry_after=N`), unless the close says trying again cannot help.
   */
  private closed(c: ZoneConnection, e: CloseInfo): void {
    if (c !== this.conn) return;
    let final = !e.willReconnect;
    if (final && c.handshake === undefined && !FINAL_CLOSES.has(e.code) && e.code !== UNAUTHORIZED && this.attempts < FIRST_ATTEMPTS) {
      final = false;
      const wait = e.code === FULL && this.lastError !== undefined ? retryAfter(this.lastError.message) : undefined;
      const delay = Math.max(backoffDelay(this.attempts++, BACKOFF), (wait ?? 0) * 1000);
      this.retryTimer = setTimeout(() => this.connect(), delay);
    }
    this.post({ type: "close", code: e.code, reason: e.reason, final });
    this.post({ type: "status", status: this.status() });
  }

  status(): LiveStatus {
    const c = this.conn;
    return {
      state: this.retryTimer !== undefined ? "reconnecting" : (c?.state ?? "closed"),
      tick: c?.tick ?? 0,
      snapshots: c?.stats.snapshots ?? 0,
      applyMs: c?.stats.applyMs ?? 0,
      sceneMs: this.sceneMs,
      rtt: c?.rtt ?? null,
    };
  }

  /** Sends the newest snapshot's scene if the page is ready for one. */
  private pump(): void {
    const c = this.conn;
    if (!this.pending || !this.ready || c === null || this.hs === undefined) return;
    const s = this.build(c.world);
    const { message, transfer } = s.toMessage();
    this.post({ type: "scene", scene: message, status: this.status() }, transfer);
    this.pending = false;
    this.ready = false;
  }

  private build(view: WorldView): Scene {
    const s = this.scene;
    // The arrays of the last scene went to the page: the ones it gave back, else new ones.
    if (this.spare !== null) {
      s.adopt(this.spare);
      this.spare = null;
    }
    const t0 = performance.now();
    fromView(s, view, this.layouts, this.colours);
    this.sceneMs = performance.now() - t0;
    s.serial = ++this.serial;
    // (A build makes a new entries array: keeping it copies nothing.)
    this.kept.set(s.serial, s.entries);
    this.kept.delete(s.serial - KEPT);
    return s;
  }

  /** An entity of a scene the page holds (its build and index there), decoded. */
  private entity(id: number, serial: number, index: number): DecodedEntity | null {
    const hs = this.hs;
    const e = this.kept.get(serial)?.[index];
    if (hs === undefined || e === undefined || e.id !== id) return null;
    const d = decodeEntity(e, hs.templates);
    return d === undefined ? null : { id, values: d.values };
  }
}
