import { ZoneConnection, type ConnectOptions, type WebSocketConstructor } from "./connection.js";
import { Storage } from "./storage.js";

/** Tokens of an authenticated user (docs/protocol.md, 'Transport'). Times in ms since the epoch. */
export interface Session {
  userId: string;
  /** The session token (sent in HELLO). */
  token: string;
  refreshToken: string;
  /** When `token` expires (ms since the epoch, by the local clock). */
  expiresAt: number;
  /** When `refreshToken` expires (ms since the epoch, by the local clock). */
  refreshExpiresAt: number;
  /** Whether the account was created by this request (always false from a refresh). */
  created: boolean;
}

/** What the client needs of `fetch`: the global one fits. */
export type FetchLike = (
  url: string,
  init: { method: string; headers: Record<string, string>; body: string },
) => Promise<{ status: number; statusText?: string; text(): Promise<string> }>;

export interface ClientOptions {
  /** The server's HTTP address, e.g. "http://127.0.0.1:4000". */
  baseUrl: string;
  /** Default globalThis.fetch. */
  fetch?: FetchLike;
  /** Default globalThis.WebSocket (Node 20 has none: pass the 'ws' package's). */
  WebSocket?: WebSocketConstructor;
}

/**
 * An HTTP error of the server, from its `{"error": code, "message": text}` body. `status` 0 is
 * a request that got no answer (code `network_error`); a body that is not the server's error
 * JSON gives code `http_error` (or `bad_response` for a 200 without the expected fields).
 */
export class OverworldHttpError extends Error {
  readonly status: number;
  readonly code: string;

  constructor(status: number, code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "OverworldHttpError";
    this.status = status;
    this.code = code;
  }
}

/** The HTTP side of a server (authentication) and the way to its zones. */
export class Client {
  readonly baseUrl: string;
  private readonly fetch: FetchLike;
  private readonly WebSocket: WebSocketConstructor | undefined;

  constructor(options: ClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    const f = options.fetch ?? (globalThis as { fetch?: FetchLike }).fetch;
    if (f === undefined) throw new TypeError("no fetch implementation: pass options.fetch");
    this.fetch = f;
    this.WebSocket = options.WebSocket;
  }

  /** Signs in with a device id (10 to 128 printable ASCII characters); the account is created on first use. */
  authenticateDevice(deviceId: string): Promise<Session> {
    return this.post("/api/v1/auth/device", { device_id: deviceId });
  }

  /** New tokens from a session's refresh token (or the refresh token itself). */
  refresh(session: Session | string): Promise<Session> {
    const token = typeof session === "string" ? session : session.refreshToken;
    return this.post("/api/v1/auth/refresh", { refresh_token: token });
  }

  /** The WebSocket URL of a zone (`zone` undefined: the server's default zone). */
  socketUrl(zone?: string): string {
    const url = new URL(this.baseUrl + "/ws");
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    if (zone !== undefined) url.searchParams.set("zone", zone);
    return url.toString();
  }

  /**
   * Connects to a zone with a session: resolves with the connection once its first HANDSHAKE
   * came (`conn.handshake` is set); rejects with a `ConnectError` (the close code and reason,
   * and the server's ERROR message if one came: e.g. 3 for a refused token, 1 for a protocol
   * version it does not speak) when the socket closes or cannot open before that, and then
   * nothing is tried again. Once connected, an unexpected close reconnects (see
   * `ZoneConnection`); unless `options.refresh` is given, a refused or expired token is then
   * refreshed with this client before reconnecting.
   *
   * Snapshots may be applied before the caller's code after `await` runs: `conn.world` and
   * `conn.entities` hold them, but listeners added then miss their events.
   */
  async connect(session: Session, options: ConnectOptions = {}): Promise<ZoneConnection> {
    const WebSocket = options.WebSocket ?? this.WebSocket;
    const conn = new ZoneConnection(this.socketUrl(options.zone), session, {
      ...options,
      ...(WebSocket ? { WebSocket } : {}),
      refresh: options.refresh ?? ((s) => this.refresh(s)),
    });
    await conn.connected();
    return conn;
  }

  /** Per-user collections of JSON objects on the server (docs/protocol.md, 'Storage'). */
  readonly storage: Storage = new Storage((method, path, session, body) => this.request(method, path, body, session.token));

  private async post(path: string, body: unknown): Promise<Session> {
    const json = await this.request("POST", path, body);
    const session = toSession(json, Date.now());
    if (session === undefined) throw new OverworldHttpError(200, "bad_response", `POST ${path}: unexpected body ${JSON.stringify(json).slice(0, 200)}`);
    return session;
  }

  /** One call of the HTTP API: the decoded JSON of a 200, else an `OverworldHttpError`. */
  private async request(method: "GET" | "POST", path: string, body?: unknown, token?: string): Promise<unknown> {
    let response: Awaited<ReturnType<FetchLike>>;
    let text: string;
    const headers: Record<string, string> = { "content-type": "application/json", accept: "application/json" };
    if (token !== undefined) headers.authorization = `Bearer ${token}`;
    try {
      // Called unbound: a browser's fetch throws "Illegal invocation" when `this` is not the window.
      const fetch = this.fetch;
      response = await fetch(this.baseUrl + path, {
        method,
        headers,
        ...(method === "GET" ? {} : { body: JSON.stringify(body) }),
      } as { method: string; headers: Record<string, string>; body: string });
      text = await response.text();
    } catch (e) {
      throw new OverworldHttpError(0, "network_error", `${method} ${path}: ${(e as Error).message}`, { cause: e });
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    if (response.status !== 200) {
      const o = (json ?? {}) as { error?: unknown; message?: unknown };
      const code = typeof o.error === "string" ? o.error : "http_error";
      const message = typeof o.message === "string" ? o.message : `HTTP ${response.status} ${response.statusText ?? ""}`.trim();
      throw new OverworldHttpError(response.status, code, message);
    }
    if (json === undefined) throw new OverworldHttpError(response.status, "bad_response", `${method} ${path}: unexpected body ${text.slice(0, 200)}`);
    return json;
  }
}

function toSession(json: unknown, now: number): Session | undefined {
  if (typeof json !== "object" || json === null) return undefined;
  const o = json as Record<string, unknown>;
  const { user_id, token, refresh_token, expires_in, refresh_expires_in } = o;
  if (typeof token !== "string" || typeof refresh_token !== "string") return undefined;
  if (typeof expires_in !== "number" || typeof refresh_expires_in !== "number") return undefined;
  if (typeof user_id !== "string" && typeof user_id !== "number") return undefined;
  return {
    userId: String(user_id),
    token,
    refreshToken: refresh_token,
    expiresAt: now + expires_in * 1000,
    refreshExpiresAt: now + refresh_expires_in * 1000,
    created: o.created === true,
  };
}
