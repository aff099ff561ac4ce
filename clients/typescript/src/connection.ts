import {
  Requests,
  field,
  listArgs,
  nothing,
  ticketArgs,
  toMatchJoined,
  toMatchList,
  toNotice,
  toPayload,
  type OverworldRequestError,
  type ListMatchesOptions,
  type MatchData,
  type MatchInfo,
  type MatchJoined,
  type MatchmakerMatched,
  type MatchmakerTicket,
  type MatchNotice,
  type MatchPresenceEvent,
} from "./backend.js";
import { backoffDelay, type BackoffOptions } from "./backoff.js";
import { ByteReader } from "./bytes.js";
import type { Session } from "./client.js";
import { ServerClock } from "./clock.js";
import { decodeEntity, EntityView, type Entity, type EntityViewOptions } from "./interpolation.js";
import { PROTOCOL_VERSION, decodeServerMessage, encodeClientMessage, type ClientMessage } from "./messages.js";
import { WorldView } from "./snapshot.js";
import { encodeInput, type InputValues, type TemplateSchema } from "./template.js";

/**
 * What the connection needs of a WebSocket: the browser's `WebSocket` and the `ws` package's
 * both fit.
 */
export interface WebSocketLike {
  binaryType: string;
  readonly readyState: number;
  send(data: Uint8Array): void;
  close(code?: number, reason?: string): void;
  onopen: ((event: any) => void) | null;
  onmessage: ((event: any) => void) | null;
  onclose: ((event: any) => void) | null;
  onerror: ((event: any) => void) | null;
}

export type WebSocketConstructor = new (url: string) => WebSocketLike;

/** The handshake, with the world's size in metres. */
export interface Handshake {
  version: number;
  tickRate: number;
  /** The player's entity (0: the connection joined no zone). */
  entityId: number;
  /** Metres. */
  width: number;
  /** Metres. */
  height: number;
  /** Metres. */
  cellSize: number;
  /** The zone's grid, in cells: a cell's key is (row + 1) * (cols + 2) + col + 1. */
  cols: number;
  rows: number;
  templates: TemplateSchema[];
  /** The layout of the zone's typed inputs (`sendInput({...})`), or null: the zone reads raw bytes. */
  input: TemplateSchema | null;
}

export interface CloseInfo {
  code: number;
  reason: string;
  /** Whether the connection will try again (after a back-off). */
  willReconnect: boolean;
}

/** An ERROR message of the server (its code is the close code that follows, minus 4000). */
export interface ServerError {
  code: number;
  message: string;
}

/**
 * The connection's first socket closed (or could not open) before a HANDSHAKE: what
 * `Client.connect` and `ZoneConnection.connected()` reject with. Nothing is tried again.
 */
export class ConnectError extends Error {
  /** The close code (1006: the socket could not open or dropped; 4007: no answer in time; 1000: `close()`). */
  readonly code: number;
  readonly reason: string;
  /** The server's ERROR message before the close, if one came (e.g. code 1: protocol version, 3: unauthorized). */
  readonly error: ServerError | undefined;
  /**
   * A server that refused a new player because it is full (close 4008, ERROR 8): the seconds
   * it asked to wait before trying again. Undefined for any other failure.
   */
  readonly retryAfter: number | undefined;

  constructor(code: number, reason: string, error?: ServerError) {
    const why = error !== undefined ? `${error.message || reason} (error ${error.code}, close ${code})` : `${reason || "closed"} (close ${code})`;
    super(`could not connect: ${why}`);
    this.name = "ConnectError";
    this.code = code;
    this.reason = reason;
    this.error = error;
    this.retryAfter = error?.code === ERROR_FULL ? retryAfter(error.message) : undefined;
  }
}

/** The close code of a server that refuses new players for now (ERROR 8: `retry_after=N; why`). */
export const FULL = 4008;
const ERROR_FULL = FULL - 4000;

/**
 * The seconds an ERROR 8 message asks to wait (`retry_after=N; ...`, docs/protocol.md), or
 * undefined when the message does not start so.
 */
export function retryAfter(message: string): number | undefined {
  const m = /^retry_after=(\d+);/.exec(message);
  return m === null ? undefined : Number(m[1]);
}

export interface ReconnectOptions extends BackoffOptions {
  /** Attempts in a row (without a handshake between) before giving up (default: no limit). */
  maxAttempts?: number;
}

export interface ConnectOptions extends EntityViewOptions {
  /** A public zone name (default: the server's default zone; "": join nothing). */
  zone?: string;
  /** Milliseconds between PINGs (default 15 s). */
  pingInterval?: number;
  /** Milliseconds without any message before the connection is given up and made again (default max(3 × pingInterval, 10 s)). */
  heartbeatTimeout?: number;
  /** Reconnection after an unexpected close of an established connection (one that had a handshake; default on, 250 ms base, factor 2, cap 10 s); false: never. */
  reconnect?: false | ReconnectOptions;
  /** A random source in [0, 1) for the back-off jitter (default Math.random). */
  random?: () => number;
  /** Gets fresh tokens; called when the server refused the token (4003) or it expired before a reconnect. */
  refresh?: (session: Session) => Promise<Session>;
  /** The WebSocket implementation (default globalThis.WebSocket). */
  WebSocket?: WebSocketConstructor;
  /**
   * Milliseconds during which entities of the previous view are held over when the view is
   * sent again from scratch (after a reconnection or a resync), default 1000 (see onLeave).
   */
  settle?: number;
  /** The local monotonic clock in milliseconds (default performance.now). */
  now?: () => number;
  /**
   * Milliseconds a backend request (`rpc`, `joinMatch`, ...) waits for its answer, from the
   * call, before it fails with an `OverworldRequestError` `timeout` (default 10 s).
   */
  requestTimeout?: number;
  /**
   * Keep `entities` (the interpolation buffers) and report entities entering and leaving
   * (default true). False: a snapshot is only applied to `world` and told to `onSnapshot`,
   * for a client that reads the world's entries itself, e.g. an observer drawing every entity
   * of a zone or world of tens of thousands (the operator console's live map): `entities`
   * stays empty, `onEnter` and `onLeave` are never called.
   */
  trackEntities?: boolean;
  /**
   * After a reconnection, join the matches the player was in again (default true): within the
   * server's grace (15 s by default) the player takes its own place back, unseen by the others.
   * A failure is told as a `rejoin_failed` match notice.
   */
  rejoinMatches?: boolean;
}

export type ConnectionState = "connecting" | "open" | "reconnecting" | "closed";

/** Counters, for diagnostics and tests. */
export interface ConnectionStats {
  /** Sockets opened (the first connection included). */
  connects: number;
  handshakes: number;
  snapshots: number;
  /** Snapshots refused (each answered or covered by a RESYNC). */
  refused: number;
  resyncs: number;
  /** Server messages that did not decode (ignored), NOTIFYs of a kind or body not known included. */
  undecodable: number;
  inputs: number;
  /** Milliseconds the newest SNAPSHOT took to apply to `world` (to decode), refused or not. */
  applyMs: number;
}

/** Close codes after which the connection does not try again: normal, protocol version, replaced. */
export const FINAL_CLOSES: ReadonlySet<number> = new Set([1000, 4001, 4004]);
/** The close code of a refused token: tried again only with a refreshed one (`ConnectOptions.refresh`). */
export const UNAUTHORIZED = 4003;
const OPEN = 1;

type Listener<A extends unknown[]> = (...args: A) => void;

class Listeners<A extends unknown[]> {
  private readonly list: Array<Listener<A>> = [];
  add(f: Listener<A>): () => void {
    this.list.push(f);
    return () => {
      const i = this.list.indexOf(f);
      if (i >= 0) this.list.splice(i, 1);
    };
  }
  emit(...args: A): void {
    for (const f of [...this.list]) {
      try {
        f(...args);
      } catch (e) {
        // A listener's bug must not break the connection's state: report it on its own.
        queueMicrotask(() => {
          throw e;
        });
      }
    }
  }
}

/** The baseline of a SNAPSHOT message (undefined when it does not decode that far). */
function snapshotBaseline(bytes: Uint8Array): number | undefined {
  const r = new ByteReader(bytes, 1);
  return r.varint() === undefined ? undefined : r.varint();
}

function toBytes(data: unknown): Uint8Array | undefined {
  if (data instanceof ArrayBuffer || Object.prototype.toString.call(data) === "[object ArrayBuffer]")
    return new Uint8Array(data as ArrayBuffer);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  return undefined;
}

/**
 * A connection to a zone over WebSocket (docs/protocol.md, 'Transport'): HELLO, HANDSHAKE,
 * then a SNAPSHOT per tick, applied to `world` (the cells and quantized entities) and pushed
 * to `entities` (decoded, for interpolated rendering). Pings measure the round trip; a
 * silent connection is dropped and made again; an unexpected close reconnects with
 * exponential back-off and full jitter, never after 4001 (version) or 4004 (replaced), and
 * after 4003 (unauthorized) only once the token was refreshed. Input sequence numbers go on
 * across reconnections.
 *
 * The same socket carries the backend services (docs/protocol.md, 'Matches and RPC'): `rpc`,
 * matches (`createMatch`, `joinMatch`, `sendMatchData`, `onMatchData`, ...), `listMatches` and
 * the matchmaker. A connection to no zone (`zone: ""`) has only those.
 *
 * It starts connecting when made. Reconnection is for a connection that was established: when
 * the first socket closes (or cannot open) before a HANDSHAKE, the connection is closed for
 * good and `connected()` rejects with a `ConnectError` (`Client.connect` awaits it).
 */
export class ZoneConnection {
  /** Decoded entities with their recent history, for interpolation. */
  readonly entities: EntityView;
  readonly stats: ConnectionStats = { connects: 0, handshakes: 0, snapshots: 0, refused: 0, resyncs: 0, undecodable: 0, inputs: 0, applyMs: 0 };

  private readonly url: string;
  private current: Session;
  private readonly options: ConnectOptions;
  private readonly WS: WebSocketConstructor;
  private readonly now: () => number;
  private readonly pingInterval: number;
  private readonly heartbeatTimeout: number;
  private readonly clock = new ServerClock();

  private ws: WebSocketLike | null = null;
  private status: ConnectionState = "connecting";
  private hs: Handshake | undefined;
  private view = new WorldView();
  /** Entity ids reported (entered and not left). */
  private known = new Set<number>();
  /** Cell key of each entity of the newest view applied. */
  private cellOf = new Map<number, number>();
  /** Entities of a previous view not seen again yet: id → its cell key then. */
  private carry = new Map<number, number>();
  private carryUntil = 0;
  private seq = 0;
  private eventSeq = 0;
  private attempt = 0;
  private refreshed = false;
  private srtt: number | undefined;
  private readonly pings = new Map<number, number>();
  private lastReceived = 0;
  private resyncAt: number | undefined;
  private pingTimer: ReturnType<typeof setInterval> | undefined;
  private heartbeatTimer: ReturnType<typeof setTimeout> | undefined;
  private reconnectTimer: ReturnType<typeof setTimeout> | undefined;

  private readonly handshakeListeners = new Listeners<[Handshake]>();
  private readonly snapshotListeners = new Listeners<[WorldView, number]>();
  private readonly enterListeners = new Listeners<[Entity]>();
  private readonly leaveListeners = new Listeners<[number]>();
  private readonly errorListeners = new Listeners<[ServerError]>();
  private readonly closeListeners = new Listeners<[CloseInfo]>();
  private readonly eventListeners = new Listeners<[Uint8Array, number]>();
  private readonly matchDataListeners = new Listeners<[MatchData]>();
  private readonly presenceListeners = new Listeners<[MatchPresenceEvent]>();
  private readonly noticeListeners = new Listeners<[MatchNotice]>();
  private readonly matchedListeners = new Listeners<[MatchmakerMatched]>();
  private readonly notifyListeners = new Listeners<[string, unknown]>();

  private readonly requests: Requests;
  /** The matches joined: id → the metadata they were joined with (for a rejoin). */
  private readonly joined = new Map<string, Record<string, unknown> | undefined>();

  /** Settled by the first handshake, or the first socket's close before one. */
  private readonly ready: Promise<Handshake>;
  private settle!: { resolve: (h: Handshake) => void; reject: (e: ConnectError) => void };
  /** The newest ERROR message of the current socket. */
  private lastError: ServerError | undefined;

  /**
   * @param url the WebSocket URL, `ws(s)://host:port/ws?zone=...` (see `Client.connect`)
   * @param session whose token goes in HELLO
   */
  constructor(url: string, session: Session, options: ConnectOptions = {}) {
    this.url = new URL(url).toString();
    this.current = session;
    this.options = options;
    const WS = options.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
    if (WS === undefined)
      throw new TypeError("no WebSocket implementation: pass options.WebSocket (e.g. the 'ws' package on Node 20)");
    this.WS = WS;
    this.now = options.now ?? (() => performance.now());
    this.pingInterval = options.pingInterval ?? 15_000;
    this.heartbeatTimeout = options.heartbeatTimeout ?? Math.max(3 * this.pingInterval, 10_000);
    this.entities = new EntityView(options);
    this.requests = new Requests((m) => this.status === "open" && this.send(m), options.requestTimeout ?? 10_000);
    this.ready = new Promise<Handshake>((resolve, reject) => (this.settle = { resolve, reject }));
    // Nobody may ever ask: a rejection nobody awaits is not an unhandled one.
    this.ready.catch(() => undefined);
    this.open();
  }

  /**
   * The first handshake: resolves when it comes; rejects with a `ConnectError` when the first
   * socket closes or cannot open before it (or `close()` is called before it).
   */
  connected(): Promise<Handshake> {
    return this.ready;
  }

  // ---- state ----

  get state(): ConnectionState {
    return this.status;
  }

  /** The session in use (replaced when the token was refreshed). */
  get session(): Session {
    return this.current;
  }

  /** The latest handshake (undefined before the first). */
  get handshake(): Handshake | undefined {
    return this.hs;
  }

  /** The player's entity id (0 before the handshake or when the connection joined no zone). */
  get entityId(): number {
    return this.hs?.entityId ?? 0;
  }

  /** What the client holds of the world (a new view for each socket). */
  get world(): WorldView {
    return this.view;
  }

  /** The newest snapshot's tick (0 before any). */
  get tick(): number {
    return this.view.tick;
  }

  /** The newest input sequence number the zone had consumed, as of the newest snapshot. */
  get inputAck(): number {
    return this.view.inputAck;
  }

  /** The last input sequence number sent (0: none). */
  get inputSeq(): number {
    return this.seq;
  }

  /** Smoothed round-trip time in milliseconds (undefined before the first PONG). */
  get rtt(): number | undefined {
    return this.srtt;
  }

  /** The underlying socket (null between sockets), for diagnostics and tests. */
  get socket(): WebSocketLike | null {
    return this.ws;
  }

  /** The estimated server time in seconds (tick / tick rate, run on by the local clock; 0 before any snapshot). */
  serverTime(): number {
    return this.clock.now(this.now());
  }

  /** The entities' interpolated states now (`entities.sample` at the server time minus the interpolation delay). */
  sample(): Map<number, Entity> {
    return this.entities.sample(this.entities.renderTime(this.serverTime()));
  }

  // ---- events ----

  onHandshake(f: (handshake: Handshake) => void): () => void {
    return this.handshakeListeners.add(f);
  }

  /** After each snapshot applied (after its onEnter/onLeave). */
  onSnapshot(f: (view: WorldView, tick: number) => void): () => void {
    return this.snapshotListeners.add(f);
  }

  /** An entity id appeared in the view (with its decoded values at that snapshot). */
  onEnter(f: (entity: Entity) => void): () => void {
    return this.enterListeners.add(f);
  }

  /**
   * An entity id left the view. After a reconnection or a resync the view comes again over a
   * few frames: an entity of the previous view is only reported as gone once its cell is held
   * again without it, or after `settle` ms.
   */
  onLeave(f: (id: number) => void): () => void {
    return this.leaveListeners.add(f);
  }

  /** An ERROR message of the server. */
  onError(f: (error: ServerError) => void): () => void {
    return this.errorListeners.add(f);
  }

  /** A socket closed (once per socket; `close()` reports code 1000 at once). */
  onClose(f: (info: CloseInfo) => void): () => void {
    return this.closeListeners.add(f);
  }

  /** A reliable game message of the server (payload, sequence number). */
  onEvent(f: (payload: Uint8Array, seq: number) => void): () => void {
    return this.eventListeners.add(f);
  }

  /** A match's message (one call per message, in the order the match sent them: a tick's come in one frame). */
  onMatchData(f: (message: MatchData) => void): () => void {
    return this.matchDataListeners.add(f);
  }

  /** Other players joined or left a match the player is in. */
  onMatchPresence(f: (event: MatchPresenceEvent) => void): () => void {
    return this.presenceListeners.add(f);
  }

  /**
   * A match ended, failed, kicked the player or gave its place to another connection; a
   * `sendMatchData` was refused; a rejoin after a reconnection failed (see `MatchNotice`).
   */
  onMatchNotice(f: (notice: MatchNotice) => void): () => void {
    return this.noticeListeners.add(f);
  }

  /** A ticket of this connection was matched: join `matchId` (`joinMatch`). */
  onMatchmakerMatched(f: (matched: MatchmakerMatched) => void): () => void {
    return this.matchedListeners.add(f);
  }

  /**
   * Every NOTIFY of the server, its kind and its JSON body parsed (kinds this SDK knows too,
   * before their typed listeners): for kinds of a newer server.
   */
  onNotify(f: (kind: string, body: unknown) => void): () => void {
    return this.notifyListeners.add(f);
  }

  // ---- backend requests ----

  /**
   * Calls the server's RPC function `id` with a JSON payload (undefined: none): resolves with
   * what it answered (null for nothing; `T` is not checked). Fails with an
   * `OverworldRequestError`: `unknown_rpc`, the function's own code (`invalid_argument`,
   * `not_found`, ...), `rpc_failed`, `rpc_timeout`, `busy`, or `timeout`, `disconnected`,
   * `closed` when no answer came.
   *
   * Requests made before the connection is open (or while it reconnects) wait for it, within
   * their `requestTimeout`; those in flight when the socket drops fail with `disconnected`.
   */
  async rpc<T = unknown>(id: string, payload?: unknown): Promise<T> {
    return (await this.requests.call("rpc", { id, payload }, (j) => toPayload<T>(j))).payload;
  }

  /**
   * Creates a match: of the handler the server registered as `name` (e.g. "echo"), with
   * `params` for its init; or, without a name, a relayed one (each player's messages passed on
   * to the others; `params.max_size`: players at most, default 16). Resolves with its id (the
   * caller is not in it yet: `joinMatch`). `unknown_handler`, `match_create_failed`.
   */
  createMatch(name?: string, params?: Record<string, unknown>): Promise<string> {
    return this.requests.call("match_create", { name, params }, field("match_id"));
  }

  /**
   * Joins a match (`metadata`: for its handler's join attempt). `match_not_found`,
   * `match_join_rejected` (the message is the handler's reason, e.g. "full"). Once joined, the
   * match's messages come to `onMatchData`, and `sendMatchData` reaches it.
   */
  async joinMatch(matchId: string, metadata?: Record<string, unknown>): Promise<MatchJoined> {
    const joined = await this.requests.call("match_join", { match_id: matchId, metadata }, toMatchJoined);
    this.joined.set(matchId, metadata);
    return joined;
  }

  /** Leaves a match (at once for this client: no rejoin after a reconnection). Resolves when the server is told. */
  async leaveMatch(matchId: string): Promise<void> {
    this.joined.delete(matchId);
    await this.requests.call("match_leave", { match_id: matchId }, nothing);
  }

  /** The matches of the whole cluster whose label satisfies `options.query`; `invalid_query`. */
  listMatches(options: ListMatchesOptions = {}): Promise<MatchInfo[]> {
    return this.requests.call("match_list", listArgs(options), toMatchList);
  }

  /**
   * Adds a matchmaker ticket: resolves with its id. When it is matched, `onMatchmakerMatched`
   * tells the match to join. A ticket belongs to this socket: it is dropped by the server
   * when the socket closes (a reconnection included: add it again then). `invalid_ticket`,
   * `too_many_tickets` (3 at once), `unavailable`.
   */
  addMatchmaker(ticket: MatchmakerTicket): Promise<string> {
    return this.requests.call("matchmaker_add", ticketArgs(ticket), field("ticket"));
  }

  /** Removes a matchmaker ticket; `ticket_not_found` (unknown, or matched already). */
  async removeMatchmaker(ticket: string): Promise<void> {
    await this.requests.call("matchmaker_remove", { ticket }, nothing);
  }

  /** The matches joined (and not left, ended, failed or kicked since). */
  get joinedMatches(): string[] {
    return [...this.joined.keys()];
  }

  /**
   * Sends a message to a match the player joined: `op` (an integer 0..2^32-1, the game's
   * message type) and bytes (a string is sent as UTF-8). It reaches the match's next tick, in
   * order. Answers false when not connected (nothing is sent). The server refuses data for a
   * match the player is not in, or too large (4,096 bytes by default), with a `MatchNotice`
   * `error`; it counts them with the inputs against its input rate (60 a second by default)
   * and drops the excess silently.
   */
  sendMatchData(matchId: string, op: number, data: Uint8Array | string): boolean {
    if (!Number.isInteger(op) || op < 0 || op >= 2 ** 32) throw new RangeError(`op must be an integer in 0..2^32-1, got ${op}`);
    if (this.status !== "open") return false;
    const payload = typeof data === "string" ? new TextEncoder().encode(data) : new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    return this.send({ type: "match_send", match_id: matchId, op, payload });
  }

  // ---- sending ----

  /**
   * Sends an INPUT with the next sequence number and the newest snapshot tick as its ack.
   * Answers the sequence number, or 0 when not connected (the input is dropped).
   *
   * The input is either the values of the zone's input layout (`handshake.input`), by field
   * name, in the SDK's units (`fixed` in metres, `angle` in radians or, with the
   * `angleUnit: "turns"` option, turns; `int`/`uint` integers; `enum`/`bool` their values),
   * encoded with `encodeInput`; or raw bytes, sent as they are (for a zone that declares no
   * layout and reads them with its own decoder). Values for a zone without a layout, a field
   * missing or a value its field cannot take throw a TypeError.
   */
  sendInput(payload: Uint8Array): number;
  sendInput<T extends InputValues<T>>(values: T): number;
  sendInput(input: Uint8Array | InputValues): number {
    let payload: Uint8Array;
    if (ArrayBuffer.isView(input)) payload = new Uint8Array(input.buffer, input.byteOffset, input.byteLength);
    else {
      // Before the first handshake the layout is not known: dropped, as raw bytes would be.
      if (this.hs === undefined) return 0;
      const layout = this.hs.input;
      if (layout === null)
        throw new TypeError("this zone declares no input layout: send its input as raw bytes (a Uint8Array)");
      payload = encodeInput(layout, input, this.entities.angleUnit);
    }
    if (this.status !== "open") return 0;
    const seq = this.seq + 1;
    if (!this.send({ type: "input", seq, ack: this.view.tick, payload })) return 0;
    this.seq = seq;
    this.stats.inputs++;
    return seq;
  }

  /**
   * Sends a RELIABLE game message (`reliable_seq` 1, 2, ... on each connection); the zone gets
   * it in order in `handle_info/2`. Answers false when not connected (nothing is sent).
   */
  sendEvent(payload: Uint8Array): boolean {
    if (this.status !== "open") return false;
    const seq = this.eventSeq + 1;
    if (!this.send({ type: "client_event", seq, payload })) return false;
    this.eventSeq = seq;
    return true;
  }

  /** Sends a PING now (the answer updates `rtt`). */
  ping(): void {
    if (this.status !== "open") return;
    const t = this.now();
    const clientTime = Math.max(0, Math.floor(t));
    if (this.pings.size >= 16) this.pings.delete(this.pings.keys().next().value!);
    if (this.send({ type: "ping", client_time: clientTime })) this.pings.set(clientTime, t);
  }

  /** Closes for good (code 1000); onClose is told at once. */
  close(): void {
    if (this.status === "closed") return;
    this.status = "closed";
    clearTimeout(this.reconnectTimer);
    this.drop(1000, "client closed");
    this.requests.closed();
    this.settle.reject(new ConnectError(1000, "client closed"));
    this.closeListeners.emit({ code: 1000, reason: "client closed", willReconnect: false });
  }

  private send(m: ClientMessage): boolean {
    const ws = this.ws;
    if (ws === null || ws.readyState !== OPEN) return false;
    try {
      ws.send(encodeClientMessage(m));
      return true;
    } catch {
      return false;
    }
  }

  // ---- the socket ----

  private open(): void {
    this.stats.connects++;
    this.eventSeq = 0;
    this.lastError = undefined;
    this.view = new WorldView();
    this.resyncAt = undefined;
    this.pings.clear();
    let ws: WebSocketLike;
    try {
      ws = new this.WS(this.url);
    } catch (e) {
      // Told asynchronously, as a socket's close would be.
      const reason = `cannot open a WebSocket: ${(e as Error).message}`;
      queueMicrotask(() => this.closed(1006, reason));
      return;
    }
    this.ws = ws;
    ws.binaryType = "arraybuffer";
    ws.onopen = () => {
      if (this.ws !== ws) return;
      this.send({ type: "hello", version: PROTOCOL_VERSION, token: this.current.token });
    };
    ws.onmessage = (event: { data: unknown }) => {
      if (this.ws !== ws) return;
      this.lastReceived = this.now();
      const bytes = toBytes(event.data);
      if (bytes === undefined) {
        this.stats.undecodable++;
        return;
      }
      this.receive(bytes);
    };
    // A close event follows an error; its message (e.g. the 'ws' package's "Unexpected server
    // response: 404" for a refused upgrade) stands in for an empty close reason.
    let failure = "";
    ws.onclose = (event: { code?: number; reason?: string }) => {
      if (this.ws !== ws) return;
      this.ws = null;
      this.stopTimers();
      this.closed(event.code ?? 1006, event.reason || failure);
    };
    ws.onerror = (event: { message?: unknown } | undefined) => {
      if (typeof event?.message === "string") failure = event.message;
    };
    this.lastReceived = this.now();
    this.armHeartbeat(this.heartbeatTimeout);
  }

  /** Stops using the socket: no more events from it; closes it. */
  private drop(code: number, reason: string): void {
    this.stopTimers();
    const ws = this.ws;
    this.ws = null;
    if (ws === null) return;
    ws.onopen = null;
    ws.onmessage = null;
    ws.onclose = null;
    ws.onerror = () => {};
    try {
      ws.close(code, reason);
    } catch {
      // Already closing.
    }
  }

  private stopTimers(): void {
    clearInterval(this.pingTimer);
    clearTimeout(this.heartbeatTimer);
    this.pingTimer = undefined;
    this.heartbeatTimer = undefined;
  }

  private armHeartbeat(ms: number): void {
    clearTimeout(this.heartbeatTimer);
    this.heartbeatTimer = setTimeout(() => {
      const silent = this.now() - this.lastReceived;
      if (silent < this.heartbeatTimeout) {
        this.armHeartbeat(this.heartbeatTimeout - silent);
        return;
      }
      this.drop(4000, "heartbeat timeout");
      this.closed(4007, "heartbeat timeout (client side)");
    }, Math.max(1, ms));
  }

  /** The socket is gone: tell, and reconnect when that is right. */
  private closed(code: number, reason: string): void {
    if (this.status === "closed") return;
    this.requests.disconnected();
    // The first socket never got a handshake: connecting failed, nothing is tried again.
    if (this.hs === undefined) return this.finish(code, reason);
    const limit = this.options.reconnect === false ? 0 : (this.options.reconnect?.maxAttempts ?? Infinity);
    if (FINAL_CLOSES.has(code) || this.attempt >= limit) return this.finish(code, reason);
    if (code === UNAUTHORIZED) {
      const refresh = this.options.refresh;
      if (refresh === undefined || this.refreshed) return this.finish(code, reason);
      this.status = "reconnecting";
      refresh(this.current).then(
        (session) => {
          if (this.status === "closed") return;
          this.current = session;
          this.refreshed = true;
          this.retry(code, reason);
        },
        () => this.finish(code, reason),
      );
      return;
    }
    this.retry(code, reason);
  }

  private finish(code: number, reason: string): void {
    if (this.status === "closed") return;
    this.status = "closed";
    this.requests.closed();
    this.settle.reject(new ConnectError(code, reason, this.lastError));
    this.closeListeners.emit({ code, reason, willReconnect: false });
  }

  private retry(code: number, reason: string): void {
    if (this.status === "closed") return;
    this.status = "reconnecting";
    const reconnect = this.options.reconnect === false ? {} : (this.options.reconnect ?? {});
    let delay = backoffDelay(this.attempt++, reconnect, this.options.random);
    // A full server said how long to wait: not before that.
    const wait = code === FULL && this.lastError !== undefined ? retryAfter(this.lastError.message) : undefined;
    if (wait !== undefined) delay = Math.max(delay, wait * 1000);
    this.closeListeners.emit({ code, reason, willReconnect: true });
    if (this.status !== "reconnecting") return; // a listener closed it
    this.reconnectTimer = setTimeout(() => void this.reopen(), delay);
  }

  private async reopen(): Promise<void> {
    if (this.status !== "reconnecting") return;
    // A token that expired (or is about to) is refreshed first rather than refused.
    const refresh = this.options.refresh;
    if (refresh !== undefined && this.current.expiresAt - Date.now() < 5_000 && this.current.refreshExpiresAt > Date.now()) {
      try {
        this.current = await refresh(this.current);
        this.refreshed = true;
      } catch {
        // Try with the old token: the server tells.
      }
      if (this.status !== "reconnecting") return;
    }
    this.status = "connecting";
    this.open();
  }

  // ---- messages ----

  private receive(bytes: Uint8Array): void {
    if (bytes[0] === 0x02) return this.snapshot(bytes);
    const m = decodeServerMessage(bytes);
    if (!m.ok) {
      this.stats.undecodable++;
      return;
    }
    const v = m.value;
    switch (v.type) {
      case "handshake":
        return this.handshakeReceived({
          version: v.version,
          tickRate: v.tick_rate,
          entityId: v.entity_id,
          width: v.width / 1024,
          height: v.height / 1024,
          cellSize: v.cell_size / 1024,
          cols: v.cols,
          rows: v.rows,
          templates: v.templates,
          input: v.input,
        });
      case "pong": {
        const sent = this.pings.get(v.client_time);
        if (sent === undefined) return;
        this.pings.delete(v.client_time);
        const sample = Math.max(0, this.now() - sent);
        this.srtt = this.srtt === undefined ? sample : this.srtt + (sample - this.srtt) / 8;
        return;
      }
      case "error":
        this.lastError = { code: v.code, message: v.message };
        return this.errorListeners.emit({ code: v.code, message: v.message });
      case "event":
        return this.eventListeners.emit(v.payload, v.seq);
      case "response":
        // (One for a request that timed out is dropped.)
        this.requests.response(v.id, v.status, v.body);
        return;
      case "match_data":
        for (const m of v.messages) this.matchDataListeners.emit({ matchId: v.match_id, op: m.op, sender: m.sender, data: m.payload });
        return;
      case "notify":
        return this.notified(v.kind, v.body);
    }
  }

  private notified(kind: string, text: string): void {
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      this.stats.undecodable++;
      return;
    }
    this.notifyListeners.emit(kind, body);
    const n = toNotice(kind, body);
    if (n === undefined) {
      this.stats.undecodable++;
      return;
    }
    switch (n.kind) {
      case "match_presence":
        return this.presenceListeners.emit(n.event);
      case "matchmaker_matched":
        return this.matchedListeners.emit(n.matched);
      case "notice": {
        const notice = n.notice;
        if (notice.kind !== "error" && notice.matchId !== undefined) this.joined.delete(notice.matchId);
        return this.noticeListeners.emit(notice);
      }
    }
  }

  /** After a reconnection: the matches joined, joined again (before any request that waited). */
  private rejoin(): void {
    if (this.options.rejoinMatches === false) return;
    for (const [matchId, metadata] of this.joined) {
      this.requests.call("match_join", { match_id: matchId, metadata }, toMatchJoined).catch((e: OverworldRequestError) => {
        // No answer (the socket dropped again, too slow, closed): tried again after the next reconnection, if any.
        if (e.status === 0 || !this.joined.has(matchId)) return;
        this.joined.delete(matchId);
        this.noticeListeners.emit({ kind: "rejoin_failed", matchId, error: e });
      });
    }
  }

  private handshakeReceived(h: Handshake): void {
    const previous = this.hs;
    const same =
      previous !== undefined &&
      previous.tickRate === h.tickRate &&
      JSON.stringify(previous.templates) === JSON.stringify(h.templates);
    if (!same) {
      // Another world (or the first): histories and the clock start again.
      this.entities.clear();
      this.clock.reset();
    }
    this.hs = h;
    // The grid's key space: keys at or past it are band keys (docs/protocol.md, "A world of zones").
    this.view.space = (h.cols + 2) * (h.rows + 2);
    this.entities.configure(h.templates, h.tickRate);
    this.status = "open";
    this.attempt = 0;
    this.refreshed = false;
    this.stats.handshakes++;
    this.ping();
    clearInterval(this.pingTimer);
    this.pingTimer = setInterval(() => this.ping(), this.pingInterval);
    if (this.stats.handshakes > 1) this.rejoin();
    this.requests.opened();
    this.settle.resolve(h);
    this.handshakeListeners.emit(h);
  }

  private snapshot(bytes: Uint8Array): void {
    const h = this.hs;
    if (h === undefined || this.status !== "open") {
      this.stats.undecodable++;
      return;
    }
    const t0 = this.now();
    const r = this.view.apply(bytes, h.templates);
    const t = this.now();
    this.stats.applyMs = t - t0;
    if (!r.ok) {
      this.stats.refused++;
      this.resync(bytes, r.error);
      return;
    }
    this.resyncAt = undefined;
    this.stats.snapshots++;
    const tick = r.value;
    const time = tick / h.tickRate;
    this.clock.observe(time, t);
    if (this.options.trackEntities !== false) this.track(bytes, time, t, h.templates);
    this.snapshotListeners.emit(this.view, tick);
  }

  /**
   * The entities' work of a snapshot applied (at server time `time`, local time `t`): every
   * entity decoded into the interpolation buffers, and those entering and leaving told.
   */
  private track(bytes: Uint8Array, time: number, t: number, templates: readonly TemplateSchema[]): void {
    const { entities: held, cells: cellOf } = this.view.resolve();
    // A view sent again from scratch (baseline 0 after a reconnection or a resync) comes over
    // several frames: entities of the previous view are held over until their cell is there
    // again (then they are in it or they left) or `settle` ms passed, rather than reported as
    // leaving and entering again.
    if (snapshotBaseline(bytes) === 0 && this.cellOf.size > 0) {
      if (this.carry.size === 0) this.carryUntil = t + (this.options.settle ?? 1000);
      for (const [id, key] of this.cellOf) if (!held.has(id)) this.carry.set(id, key);
    }
    this.cellOf = cellOf;
    for (const [id, key] of this.carry)
      if (held.has(id) || this.view.cells.has(key) || t >= this.carryUntil || !this.known.has(id)) this.carry.delete(id);
    this.entities.setSendInterval(this.view.sendInterval);
    this.entities.push(time, held.values(), this.carry.size > 0 ? new Set(this.carry.keys()) : undefined);
    const entered: Entity[] = [];
    for (const [id, e] of held) {
      if (this.known.has(id)) continue;
      const entity = decodeEntity(e, templates, this.entities.angleUnit);
      if (entity !== undefined) entered.push(entity);
    }
    const left: number[] = [];
    for (const id of this.known) if (!held.has(id) && !this.carry.has(id)) left.push(id);
    this.known = new Set(held.keys());
    for (const id of this.carry.keys()) this.known.add(id);
    for (const e of entered) this.enterListeners.emit(e);
    for (const id of left) this.leaveListeners.emit(id);
  }

  /**
   * Asks for a snapshot from scratch: reason 1 when a snapshot's baseline is newer than the
   * tick held (one was missed), 2 for another unknown baseline, 3 when it did not decode. At
   * most one RESYNC a second while snapshots keep being refused.
   */
  private resync(bytes: Uint8Array, error: string): void {
    const t = this.now();
    if (this.resyncAt !== undefined && t - this.resyncAt < 1000) return;
    let reason = 3;
    if (error === "unknown_baseline") {
      const baseline = snapshotBaseline(bytes) ?? 0;
      reason = baseline > this.view.tick ? 1 : 2;
    }
    if (this.send({ type: "resync", reason, last_tick: this.view.tick })) {
      this.resyncAt = t;
      this.stats.resyncs++;
    }
  }
}
