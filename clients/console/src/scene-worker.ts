// The decoding side of the live map, run in a Web Worker (worker.ts) so that applying 30
// snapshots a second of a 40,000-entity world never delays a frame: the observer connection
// (the SDK's codec and WorldView, observer.ts) and the scene built from each snapshot. Scenes go
// to the page one at a time: a new one only once the page took the previous (and gave its
// arrays back for reuse), the newest snapshot's, so a slow page gets fewer, never older, scenes.
import { decodeEntity, type Entry, type Value, type WebSocketConstructor, type WorldView } from "../../typescript/src/index.js";
import { ColourTable } from "./colors.js";
import { ObserverConnection, type ObserverHandshake, type ObserverState } from "./observer.js";
import { Scene, fromView, positionLayouts, type PositionLayout, type SceneArrays, type SceneMessage } from "./scene.js";

/** How the connection is doing (with every scene, and on changes). */
export interface LiveStatus {
  state: ObserverState;
  /** The newest snapshot applied. */
  tick: number;
  snapshots: number;
  refused: number;
  resyncs: number;
  applyMs: number;
  /** Milliseconds the newest scene took to build from the view. */
  sceneMs: number;
  /** Milliseconds (null before the first PONG). */
  rtt: number | null;
}

/** A selected entity as its template decodes it. */
export interface DecodedEntity {
  id: number;
  template: number;
  cell: number;
  values: Record<string, Value>;
}

export type ToWorker =
  | { type: "open"; url: string; token: string | null }
  | { type: "ready"; arrays?: SceneArrays }
  /** (Inline, without a worker: build the newest scene now if a snapshot came.) */
  | { type: "pull" }
  | { type: "entity"; seq: number; id: number; serial: number; index: number }
  | { type: "close" };

export type FromWorker =
  | { type: "handshake"; handshake: ObserverHandshake }
  | { type: "scene"; scene: SceneMessage; status: LiveStatus }
  | { type: "status"; status: LiveStatus }
  | { type: "error"; code: number; message: string }
  | { type: "close"; code: number; reason: string; final: boolean }
  | { type: "entity"; seq: number; entity: DecodedEntity | null };

export type Post = (m: FromWorker, transfer?: Transferable[]) => void;

/** Entries of this many recent builds are kept, for the page's questions about its scene. */
const KEPT = 4;

export class ScenePump {
  private readonly post: Post;
  private readonly WebSocket: WebSocketConstructor | undefined;
  private conn: ObserverConnection | null = null;
  private hs: ObserverHandshake | undefined;
  private colours = new ColourTable([]);
  private layouts: Array<PositionLayout | null> = [];
  private readonly scene = new Scene();
  private spare: SceneArrays | null = null;
  private serial = 0;
  private readonly kept = new Map<number, { entries: Entry[]; cells: Float64Array }>();
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
        this.conn?.close();
        this.conn = null;
        return;
    }
  }

  private open(url: string, token: string | null): void {
    this.conn?.close();
    this.hs = undefined;
    this.pending = false;
    this.ready = true;
    const options = {
      onHandshake: (hs: ObserverHandshake) => {
        this.hs = hs;
        this.colours = new ColourTable(hs.templates);
        this.layouts = positionLayouts(hs.templates);
        this.post({ type: "handshake", handshake: hs });
        this.post({ type: "status", status: this.status() });
      },
      onSnapshot: () => {
        this.pending = true;
        this.pump();
      },
      onError: (e: { code: number; message: string }) => this.post({ type: "error", ...e }),
      onClose: (e: { code: number; reason: string; final: boolean }) => {
        this.post({ type: "close", ...e });
        this.post({ type: "status", status: this.status() });
      },
      ...(this.WebSocket === undefined ? {} : { WebSocket: this.WebSocket }),
    };
    this.conn = new ObserverConnection(url, () => token, options);
  }

  status(): LiveStatus {
    const c = this.conn;
    return {
      state: c?.state ?? "closed",
      tick: c?.world.tick ?? 0,
      snapshots: c?.stats.snapshots ?? 0,
      refused: c?.stats.refused ?? 0,
      resyncs: c?.stats.resyncs ?? 0,
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
    this.kept.set(s.serial, { entries: s.entries, cells: s.cells.slice(0, s.count) });
    this.kept.delete(s.serial - KEPT);
    return s;
  }

  /** An entity of a scene the page holds (its build and index there), decoded. */
  private entity(id: number, serial: number, index: number): DecodedEntity | null {
    const hs = this.hs;
    const k = this.kept.get(serial);
    if (hs === undefined || k === undefined) return null;
    const e = k.entries[index];
    if (e === undefined || e.id !== id) return null;
    const d = decodeEntity(e, hs.templates);
    return d === undefined ? null : { id, template: e.template, cell: k.cells[index] ?? -1, values: d.values };
  }
}
