// Every HTTP call of the console, typed: the operator API (/api/v1/operator/..., versioned; every
// call but the login carries the operator token as `authorization: Bearer`) and the public
// status. The server's answers are read field by field into the types below, tolerating missing
// fields (null), so a renamed field is a one-line change here and the pages never see raw JSON
// they would have to guess about. A call fails with the SDK's `OverworldHttpError` (its
// `retryAfter` on a 429), built by the SDK's `toHttpError`. A 401 anywhere calls
// `onUnauthorized` (the app shows the login again) before the call fails.
import { OverworldHttpError, toHttpError } from "../../typescript/src/index.js";
import type { HistoryEntity } from "./scene.js";

export { OverworldHttpError };

/** The routes, in one place. */
export const PATHS = {
  login: "/api/v1/operator/login",
  logout: "/api/v1/operator/logout",
  zones: "/api/v1/operator/zones",
  zoneStart: "/api/v1/operator/zones/start",
  zoneStop: (ref: string) => `/api/v1/operator/zones/${seg(ref)}/stop`,
  zoneSnapshot: (ref: string) => `/api/v1/operator/zones/${seg(ref)}/snapshot`,
  obstacles: (ref: string) => `/api/v1/operator/zones/${seg(ref)}/obstacles`,
  entity: (ref: string, id: number) => `/api/v1/operator/zones/${seg(ref)}/entities/${id}`,
  historyRange: (ref: string) => `/api/v1/operator/zones/${seg(ref)}/history/range`,
  historyState: (ref: string, tick: number) => `/api/v1/operator/zones/${seg(ref)}/history/state?tick=${tick}`,
  historyDump: (ref: string) => `/api/v1/operator/zones/${seg(ref)}/history`,
  rewind: (ref: string) => `/api/v1/operator/zones/${seg(ref)}/rewind`,
  sessions: (ref: string) => `/api/v1/operator/zones/${seg(ref)}/sessions`,
  kick: (user: string) => `/api/v1/operator/sessions/${seg(user)}/kick`,
  interest: (user: string) => `/api/v1/operator/sessions/${seg(user)}/interest`,
  accounts: (q: string) => `/api/v1/operator/accounts?q=${encodeURIComponent(q)}`,
  account: (id: string) => `/api/v1/operator/accounts/${seg(id)}`,
  accountDisable: (id: string) => `/api/v1/operator/accounts/${seg(id)}/disable`,
  accountEnable: (id: string) => `/api/v1/operator/accounts/${seg(id)}/enable`,
  audit: (limit: number) => `/api/v1/operator/audit?limit=${limit}`,
  status: "/api/v1/status",
} as const;

function seg(s: string): string {
  return encodeURIComponent(s);
}

export interface ResponseLike {
  status: number;
  headers?: { get(name: string): string | null };
  text(): Promise<string>;
  blob?(): Promise<Blob>;
}

export type FetchFn = (url: string, init: { method: string; headers: Record<string, string>; body?: string }) => Promise<ResponseLike>;

export interface ApiOptions {
  /** Default "" (the page's own server). */
  baseUrl?: string;
  /** Default globalThis.fetch. */
  fetch?: FetchFn;
  /** The operator token to send (null: none). */
  token: () => string | null;
  /** Called on any 401 before the call fails. */
  onUnauthorized?: (e: OverworldHttpError) => void;
}

// ---- what the calls answer ----

export interface LoginReply {
  token: string;
  /** Seconds (null: not said). */
  expiresIn: number | null;
}

export interface ZoneInfo {
  /** What the zone's operator routes take. */
  ref: string;
  /** The zone's id as the server prints it. */
  id: string;
  /** The server's public name of the zone (what `zones/start` takes; null: it has none, e.g. a zone of a world). */
  name: string | null;
  /** The name to give in `/ws?zone=NAME` for an observer connection of it: its own, or its world's (null: neither is served). */
  watch: string | null;
  /** The world the zone belongs to (null: a zone of its own). */
  world: string | null;
  module: string | null;
  players: number | null;
  entities: number | null;
  /** Milliseconds (the server sends microseconds). */
  tickP50Ms: number | null;
  tickP99Ms: number | null;
  node: string | null;
  debug: boolean;
  /** Whether the zone keeps a history (the scrubber): it keeps some ticks. */
  history: boolean;
  /** How many static obstacles its physics map has (0: none, or not said): `obstacles(ref)` lists them. */
  obstacles: number;
}

/** `GET zones`: the running zones, and the names of the server's zones that run nowhere (`zones/start` takes them). */
export interface ZoneList {
  zones: ZoneInfo[];
  stopped: string[];
}

/** How a zone is shown to people: its public name, else its id. */
export function zoneLabel(z: ZoneInfo): string {
  return z.name ?? z.id;
}

/** A wall's rectangle, `[x0, y0, x1, y1]` (metres, x0 ≤ x1 and y0 ≤ y1). */
export type WallBox = readonly [x0: number, y0: number, x1: number, y1: number];
/** A round obstacle, `[cx, cy, r]` (metres, r > 0). */
export type WallCircle = readonly [cx: number, cy: number, r: number];

/** `GET zones/:ref/obstacles`: the static obstacles of a zone's physics map, in world metres (none without one). */
export interface Obstacles {
  /** The zone's extent (metres; null: not said). */
  width: number | null;
  height: number | null;
  boxes: WallBox[];
  circles: WallCircle[];
}

export interface EntityDetails {
  id: number;
  /** Its kind's template (as the handshake names it), and its kind. */
  template: string | null;
  kind: string | null;
  owner: string | null;
  cell: number | null;
  zone: string | null;
  /** The full server-side state (any JSON). */
  state: unknown;
}

export interface HistoryRange {
  oldest: number;
  newest: number;
  tickRate: number | null;
}

export interface HistoryState {
  tick: number;
  entities: HistoryEntity[];
}

export interface SessionInfo {
  userId: string;
  /** The player's entity (null: not said). */
  entity: number | null;
  /** Whether its socket is open (false in its grace period after a lost connection, or for a player joined from Elixir). */
  connected: boolean | null;
  /** Unix seconds. */
  connectedAt: string | number | null;
  address: string | null;
  /** Bytes sent on its socket, in all. */
  bytesOut: number | null;
  /** The kernel's smoothed round-trip time of its socket (ms). */
  rttMs: number | null;
  /** Snapshot frames sent, in all. */
  frames: number | null;
  /** Milliseconds between its last two frames. */
  frameIntervalMs: number | null;
  /** RFC 3550 jitter of the frames' send intervals (ms). */
  frameJitterMs: number | null;
  /** Runs and keyframes its interest held back for lack of byte budget, in all. */
  deferred: number | null;
  node: string | null;
}

/** A run of grid cells a player's client holds: a row, its first and last column, the tick it is at. */
export interface HeldRun {
  row: number;
  first: number;
  last: number;
  /** null: not said. */
  tick: number | null;
}

/** `GET sessions/:user_id/interest`: what a player's view holds. */
export interface InterestInfo {
  /** Its zone, as the server prints its id. */
  zone: string | null;
  entity: number | null;
  /** Where the player stands (metres). */
  x: number | null;
  y: number | null;
  /** The view radius (cells within it enter) and the leave radius (cells beyond it leave), metres. */
  radiusM: number | null;
  leaveM: number | null;
  /** The cells its client holds (of the zone's `cell_size` metres), in runs. */
  held: HeldRun[];
  /** Cells waiting for their keyframe. */
  pending: number | null;
  /** Its byte budget (bytes per second). */
  budget: number | null;
}

export interface AccountSummary {
  id: string;
  disabled: boolean | null;
  lastSeen: string | number | null;
}

export interface AccountDetails extends AccountSummary {
  createdAt: string | number | null;
  devices: string[];
  email: string | null;
  customId: string | null;
}

export interface AuditEntry {
  at: string | number | null;
  operator: string | null;
  action: string | null;
  target: string | null;
  result: string | null;
  address: string | null;
}

/** GET /api/v1/status (Overworld.Web.status/1), the fields the charts read. */
export interface StatusReply {
  now_ms?: number;
  sessions?: number;
  bytes_out?: number;
  inputs_dropped?: number;
  zones?: StatusZone[];
  [more: string]: unknown;
}

export interface StatusZone {
  name?: string;
  world?: string | null;
  tick?: number;
  entities?: number;
  players?: number;
  tick_p50_us?: number | null;
  tick_p99_us?: number | null;
  recent_tick_p50_us?: number | null;
  recent_tick_p99_us?: number | null;
  overruns?: number;
  phases_us?: Record<string, number> | null;
  phases?: Record<string, number> | null;
  [more: string]: unknown;
}

// ---- reading JSON ----

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);
const str = (v: unknown): string | null => (typeof v === "string" ? v : typeof v === "number" ? String(v) : null);
const num = (v: unknown): number | null => (typeof v === "number" && Number.isFinite(v) ? v : null);
const bool = (v: unknown): boolean | null => (typeof v === "boolean" ? v : null);
const time = (v: unknown): string | number | null => (typeof v === "string" || (typeof v === "number" && Number.isFinite(v)) ? v : null);
const list = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
/** Microseconds as milliseconds. */
const ms = (v: unknown): number | null => {
  const us = num(v);
  return us === null ? null : us / 1000;
};

export function toZone(o: Json): ZoneInfo {
  return {
    ref: str(o.ref) ?? "",
    id: str(o.id) ?? "",
    name: str(o.name),
    watch: str(o.watch),
    world: str(o.world),
    module: str(o.module),
    players: num(o.players),
    entities: num(o.entities),
    tickP50Ms: ms(o.tick_p50_us),
    tickP99Ms: ms(o.tick_p99_us),
    node: str(o.node),
    debug: bool(o.debug) ?? false,
    // (The ticks of history it keeps: 0 for none.)
    history: (num(o.history) ?? 0) > 0,
    obstacles: num(o.obstacles) ?? 0,
  };
}

/** A box `[x0, y0, x1, y1]` with its corners in order, or null when it is not four numbers. */
function toWallBox(v: unknown): WallBox | null {
  if (!Array.isArray(v) || v.length < 4) return null;
  const [x0, y0, x1, y1] = v.map(num);
  if (x0 == null || y0 == null || x1 == null || y1 == null) return null;
  return [Math.min(x0, x1), Math.min(y0, y1), Math.max(x0, x1), Math.max(y0, y1)];
}

/** A circle `[cx, cy, r]` of a positive radius, or null. */
function toWallCircle(v: unknown): WallCircle | null {
  if (!Array.isArray(v) || v.length < 3) return null;
  const [cx, cy, r] = v.map(num);
  if (cx == null || cy == null || r == null || !(r > 0)) return null;
  return [cx, cy, r];
}

export function toObstacles(o: Json): Obstacles {
  return {
    width: num(o.width),
    height: num(o.height),
    boxes: list(o.boxes)
      .map(toWallBox)
      .filter((b): b is WallBox => b !== null),
    circles: list(o.circles)
      .map(toWallCircle)
      .filter((c): c is WallCircle => c !== null),
  };
}

export function toEntity(o: Json): EntityDetails {
  return {
    id: num(o.id) ?? 0,
    template: str(o.template),
    kind: str(o.kind),
    owner: str(o.owner),
    cell: num(o.cell),
    zone: str(o.zone),
    state: o.state ?? null,
  };
}

export function toSession(o: Json): SessionInfo {
  return {
    userId: str(o.user_id) ?? "",
    entity: num(o.entity),
    connected: bool(o.connected),
    connectedAt: time(o.connected_at),
    address: str(o.address),
    bytesOut: num(o.bytes_out),
    rttMs: num(o.rtt_ms),
    frames: num(o.frames),
    frameIntervalMs: num(o.frame_interval_ms),
    frameJitterMs: num(o.frame_jitter_ms),
    deferred: num(o.deferred),
    node: str(o.node),
  };
}

/** A held run `[row, first_col, last_col, tick]` (the tick may be missing), or null when it is not one. */
function toHeldRun(v: unknown): HeldRun | null {
  if (!Array.isArray(v)) return null;
  const [row, first, last, tick] = v.map(num);
  if (row == null || first == null || last == null || last < first) return null;
  return { row, first, last, tick: tick ?? null };
}

export function toInterest(o: Json): InterestInfo {
  return {
    zone: str(o.zone),
    entity: num(o.entity),
    x: num(o.x),
    y: num(o.y),
    radiusM: num(o.radius_m),
    leaveM: num(o.leave_m),
    held: list(o.held)
      .map(toHeldRun)
      .filter((r): r is HeldRun => r !== null),
    pending: num(o.pending),
    budget: num(o.budget),
  };
}

/** The number of cells of held runs. */
export function heldCells(runs: readonly HeldRun[]): number {
  let n = 0;
  for (const r of runs) n += r.last - r.first + 1;
  return n;
}

export function toAccount(o: Json): AccountDetails {
  return {
    id: str(o.user_id) ?? "",
    disabled: bool(o.disabled),
    lastSeen: time(o.last_seen_at),
    createdAt: time(o.created_at),
    devices: list(o.devices)
      .map(str)
      .filter((d): d is string => d !== null),
    email: str(o.email),
    customId: str(o.custom_id),
  };
}

export function toAudit(o: Json): AuditEntry {
  const s = (v: unknown) => (v === undefined || v === null ? null : typeof v === "string" ? v : JSON.stringify(v));
  return {
    at: time(o.at),
    operator: s(o.operator),
    action: s(o.action),
    target: s(o.target),
    result: s(o.result),
    address: s(o.address),
  };
}

function toHistoryEntity(o: Json): HistoryEntity | null {
  const id = num(o.id);
  const x = num(o.x);
  const y = num(o.y);
  if (id === null || x === null || y === null) return null;
  const t = o.template;
  return { id, x, y, template: typeof t === "number" || typeof t === "string" ? t : -1, kind: (o.kind as string | number | null | undefined) ?? null };
}

// ---- the client ----

export class Api {
  private readonly base: string;
  private readonly fetch: FetchFn;
  private readonly token: () => string | null;
  private readonly onUnauthorized: ((e: OverworldHttpError) => void) | undefined;

  constructor(options: ApiOptions) {
    this.base = (options.baseUrl ?? "").replace(/\/+$/, "");
    const f = options.fetch ?? (globalThis as { fetch?: FetchFn }).fetch?.bind(globalThis);
    if (f === undefined) throw new TypeError("no fetch implementation");
    this.fetch = f;
    this.token = options.token;
    this.onUnauthorized = options.onUnauthorized;
  }

  /** Logs an operator in: the token (not kept here: the caller stores it). */
  async login(name: string, password: string): Promise<LoginReply> {
    const o = await this.json("POST", PATHS.login, { name, password }, false);
    const token = str(o.token);
    if (token === null || token === "") throw new OverworldHttpError(200, "bad_response", "the login answer has no token");
    return { token, expiresIn: num(o.expires_in) };
  }

  /** Revokes the operator token on the server (on every node): refused from then on. */
  async logout(): Promise<void> {
    await this.json("POST", PATHS.logout, {});
  }

  async zones(): Promise<ZoneList> {
    const o = await this.json("GET", PATHS.zones);
    return {
      zones: list(o.zones).filter(isObject).map(toZone),
      stopped: list(o.stopped)
        .map(str)
        .filter((n): n is string => n !== null),
    };
  }

  async entity(ref: string, id: number): Promise<EntityDetails> {
    return toEntity(await this.json("GET", PATHS.entity(ref, id)));
  }

  /** The static obstacles (walls) of a zone's physics map, in metres. */
  async obstacles(ref: string): Promise<Obstacles> {
    return toObstacles(await this.json("GET", PATHS.obstacles(ref)));
  }

  async historyRange(ref: string): Promise<HistoryRange> {
    const o = await this.json("GET", PATHS.historyRange(ref));
    const oldest = num(o.oldest);
    const newest = num(o.newest);
    if (oldest === null || newest === null) throw new OverworldHttpError(200, "bad_response", "the history range has no oldest and newest tick");
    return { oldest, newest, tickRate: num(o.tick_rate) };
  }

  async historyState(ref: string, tick: number): Promise<HistoryState> {
    const o = await this.json("GET", PATHS.historyState(ref, tick));
    const entities = list(o.entities)
      .filter(isObject)
      .map(toHistoryEntity)
      .filter((e): e is HistoryEntity => e !== null);
    return { tick: num(o.tick) ?? tick, entities };
  }

  /** Rewinds a debug zone to a kept tick (a 409 `{error, message}` when it cannot). */
  async rewind(ref: string, tick: number): Promise<Json> {
    return this.json("POST", PATHS.rewind(ref), { tick });
  }

  async sessions(ref: string): Promise<SessionInfo[]> {
    const o = await this.json("GET", PATHS.sessions(ref));
    return list(o.sessions).filter(isObject).map(toSession);
  }

  /** What a player's view holds (404: no session; 409 `no_view`: no frame sent yet). */
  async interest(userId: string): Promise<InterestInfo> {
    return toInterest(await this.json("GET", PATHS.interest(userId)));
  }

  /** The server's status (public: no token sent). */
  async status(): Promise<StatusReply> {
    return (await this.json("GET", PATHS.status, undefined, false)) as StatusReply;
  }

  async accounts(q: string): Promise<AccountSummary[]> {
    const o = await this.json("GET", PATHS.accounts(q));
    return list(o.accounts).filter(isObject).map(toAccount);
  }

  async account(id: string): Promise<AccountDetails> {
    return toAccount(await this.json("GET", PATHS.account(id)));
  }

  async disableAccount(id: string): Promise<Json> {
    return this.json("POST", PATHS.accountDisable(id), {});
  }

  async enableAccount(id: string): Promise<Json> {
    return this.json("POST", PATHS.accountEnable(id), {});
  }

  async stopZone(ref: string): Promise<Json> {
    return this.json("POST", PATHS.zoneStop(ref), {});
  }

  /** Starts again a zone of the server's that runs nowhere, by its name (one of `ZoneList.stopped`). */
  async startZone(name: string): Promise<Json> {
    return this.json("POST", PATHS.zoneStart, { name });
  }

  async snapshotZone(ref: string): Promise<Json> {
    return this.json("POST", PATHS.zoneSnapshot(ref), {});
  }

  async kick(userId: string): Promise<Json> {
    return this.json("POST", PATHS.kick(userId), {});
  }

  async audit(limit = 100): Promise<AuditEntry[]> {
    const o = await this.json("GET", PATHS.audit(limit));
    return list(o.entries).filter(isObject).map(toAudit);
  }

  /** A zone's history dump, as a blob, and the file name the server suggests (else null). */
  async historyDump(ref: string): Promise<{ blob: Blob; filename: string | null }> {
    const res = await this.send("GET", PATHS.historyDump(ref), undefined, true);
    if (res.status < 200 || res.status > 299) throw await this.failure(res);
    const blob = res.blob !== undefined ? await res.blob() : new Blob([await res.text()]);
    const cd = res.headers?.get("content-disposition") ?? "";
    const m = /filename="?([^";]+)"?/i.exec(cd);
    return { blob, filename: m?.[1] ?? null };
  }

  // ---- plumbing ----

  private async send(method: string, path: string, body: unknown, auth: boolean): Promise<ResponseLike> {
    const headers: Record<string, string> = { accept: "application/json" };
    if (body !== undefined) headers["content-type"] = "application/json";
    if (auth) {
      const token = this.token();
      if (token !== null) headers.authorization = `Bearer ${token}`;
    }
    const init: { method: string; headers: Record<string, string>; body?: string } = { method, headers };
    if (body !== undefined) init.body = JSON.stringify(body);
    try {
      return await this.fetch(this.base + path, init);
    } catch (e) {
      throw new OverworldHttpError(0, "network_error", `${method} ${path}: ${(e as Error)?.message ?? String(e)}`, { cause: e });
    }
  }

  /** A call answering a JSON object (an empty 2xx body reads as `{}`). */
  private async json(method: string, path: string, body?: unknown, auth = true): Promise<Json> {
    const res = await this.send(method, path, body, auth);
    if (res.status < 200 || res.status > 299) throw await this.failure(res);
    const text = await res.text();
    if (text.trim() === "") return {};
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch {
      throw new OverworldHttpError(res.status, "bad_response", `${method} ${path}: the answer is not JSON`);
    }
    if (!isObject(value)) throw new OverworldHttpError(res.status, "bad_response", `${method} ${path}: the answer is not a JSON object`);
    return value;
  }

  /** The error of a failed answer: the SDK's, as its own client builds it (`retryAfter` included). */
  private async failure(res: ResponseLike): Promise<OverworldHttpError> {
    let text = "";
    try {
      text = await res.text();
    } catch {
      // No body: the status says it.
    }
    const e = toHttpError(res.status, text, res.headers);
    if (res.status === 401) this.onUnauthorized?.(e);
    return e;
  }
}
