import { ZoneConnection, type ConnectOptions, type WebSocketConstructor } from "./connection.js";
import { Storage } from "./storage.js";
import { Accounts, toPending, type CustomAuthBody, type EmailPending } from "./accounts.js";
import { listArgs, toMatchList, toPayload, type ListMatchesOptions, type MatchInfo } from "./backend.js";

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
  /**
   * Whether the account was created by this request (from `authenticateDevice`,
   * `authenticateCustom`, `confirmEmail` and `registerEmail`; always false from a refresh and an
   * email login).
   */
  created: boolean;
}

/**
 * What the client needs of `fetch`: the global one fits. `headers` is read for `retry-after`
 * only (without it, a 429's `retryAfter` comes from its message).
 */
export type FetchLike = (
  url: string,
  init: { method: string; headers: Record<string, string>; body: string },
) => Promise<{ status: number; statusText?: string; headers?: { get(name: string): string | null }; text(): Promise<string> }>;

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
 * JSON gives code `http_error` (or `bad_response` for a success without the expected fields).
 * The account routes' codes are the `AccountErrorCode`s.
 */
export class OverworldHttpError extends Error {
  readonly status: number;
  readonly code: string;
  /**
   * Seconds to wait before trying again, when the server said (429 `rate_limited` and `busy`):
   * from the `retry-after` header, or, where a browser hides it from a page of another origin
   * (the server does not list it in `access-control-expose-headers`), from the message's
   * "retry in N s". Undefined otherwise.
   */
  readonly retryAfter: number | undefined;

  constructor(status: number, code: string, message: string, options?: { cause?: unknown; retryAfter?: number }) {
    super(message, options);
    this.name = "OverworldHttpError";
    this.status = status;
    this.code = code;
    this.retryAfter = options?.retryAfter;
  }
}

/**
 * The WebSocket URL of a zone of the server at `baseUrl` (its HTTP address, e.g.
 * "https://game.example"): `ws(s)://host:port/ws?zone=NAME` (`zone` undefined: the server's
 * default zone).
 */
export function socketUrl(baseUrl: string, zone?: string): string {
  const url = new URL(baseUrl.replace(/\/+$/, "") + "/ws");
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  if (zone !== undefined) url.searchParams.set("zone", zone);
  return url.toString();
}

/**
 * The `OverworldHttpError` of a failed answer (`status` not 2xx) of the server's HTTP API: the
 * code and message of its `{"error", "message"}` body `text` (else `http_error` and "HTTP
 * status"), and `retryAfter` from the `retry-after` header of `headers` or, on a 429, from the
 * message. For other clients of the same API (the operator console).
 */
export function toHttpError(
  status: number,
  text: string,
  headers?: { get(name: string): string | null },
  statusText?: string,
): OverworldHttpError {
  let o: { error?: unknown; message?: unknown } = {};
  try {
    const json: unknown = JSON.parse(text);
    if (typeof json === "object" && json !== null) o = json as typeof o;
  } catch {
    // Not the server's error JSON: the status says it.
  }
  const code = typeof o.error === "string" ? o.error : "http_error";
  const message = typeof o.message === "string" ? o.message : `HTTP ${status} ${statusText ?? ""}`.trim();
  const header = typeof headers?.get === "function" ? headers.get("retry-after") : null;
  const retryAfter = parseRetryAfter(header, Date.now()) ?? (status === 429 ? retryIn(message) : undefined);
  return new OverworldHttpError(status, code, message, retryAfter === undefined ? {} : { retryAfter });
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

  /**
   * Registers an email address with a password (8 to 256 bytes). On a server that confirms
   * addresses (the default) resolves with `EmailPending` (`"status" in result`) whether or not
   * the address is taken, and the code mailed to a new address, given to `confirmEmail`, makes
   * the account; on a server without confirmation (development) resolves with a session of
   * the new account, or fails with `email_taken`.
   */
  registerEmail(email: string, password: string): Promise<EmailPending | Session> {
    return this.call("POST", "/api/v1/auth/email/register", { email, password }, undefined, (json, status) =>
      status === 202 ? toPending(json) : toSession(json, Date.now()),
    );
  }

  /**
   * Confirms a mailed code (within an hour of the mail): makes the account of a registration
   * (`created` true), or links the address to the account that asked (`created` false): a
   * link's code is confirmed only with that account's `session` (so a code mailed to a
   * mistyped address gives its owner nothing); signs in. `invalid_code` for a code unknown,
   * used, expired, or of another account's link.
   */
  confirmEmail(code: string, session?: Session): Promise<Session> {
    return this.call("POST", "/api/v1/auth/email/confirm", { code }, session?.token, (json) => toSession(json, Date.now()));
  }

  /**
   * Signs in with an email address and password. An unknown address and a wrong password fail
   * alike with `invalid_credentials` (401); too many failures with `rate_limited` (429, see
   * `OverworldHttpError.retryAfter`).
   */
  authenticateEmail(email: string, password: string): Promise<Session> {
    return this.post("/api/v1/auth/email/login", { email, password });
  }

  /**
   * Signs in with a custom id vouched for by the game's own auth server: `body` is what the
   * server's custom authentication checks, sent as is (e.g. `{ assertion: "id.expires.mac" }`);
   * the account is created on first use. `invalid_assertion` when refused, `not_found` when
   * the server has no custom authentication.
   */
  authenticateCustom(body: CustomAuthBody): Promise<Session> {
    return this.post("/api/v1/auth/custom", body);
  }

  /**
   * Logs the session's login out: its session and refresh tokens (those refreshed from it too)
   * are refused from now on (`invalid_token`, message `revoked`), on every node. Other logins
   * of the account stay.
   */
  async logout(session: Session): Promise<void> {
    await this.request("POST", "/api/v1/auth/logout", {}, session.token);
  }

  /** The WebSocket URL of a zone (`zone` undefined: the server's default zone). */
  socketUrl(zone?: string): string {
    return socketUrl(this.baseUrl, zone);
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

  /**
   * Calls the server's RPC function `id` over HTTP (`POST /api/v1/rpc/:id`) as the session's
   * user, with a JSON payload (undefined: none, null for the function): resolves with what it
   * answered (null for nothing; `T` is not checked). Fails with an `OverworldHttpError` whose
   * code is a `BackendErrorCode` (`unknown_rpc`, the function's own, `rpc_failed`,
   * `rpc_timeout`, `busy` and `unavailable` with `retryAfter`, ...) or `invalid_token`. The
   * same call over the WebSocket: `conn.rpc(id, payload)`.
   */
  async rpc<T = unknown>(session: Session, id: string, payload?: unknown): Promise<T> {
    const path = `/api/v1/rpc/${encodeURIComponent(id)}`;
    return (await this.call("POST", path, payload ?? null, session.token, (json) => toPayload<T>(json))).payload;
  }

  /**
   * The matches of the whole cluster whose label satisfies `options.query` (`POST
   * /api/v1/matches/list`); `invalid_query`. The same over the WebSocket: `conn.listMatches`.
   */
  listMatches(session: Session, options: ListMatchesOptions = {}): Promise<MatchInfo[]> {
    return this.call("POST", "/api/v1/matches/list", listArgs(options), session.token, toMatchList);
  }

  /** Per-user collections of JSON objects on the server (docs/protocol.md, 'Storage'). */
  readonly storage: Storage = new Storage((method, path, session, body) => this.request(method, path, body, session.token));

  /** The session's account and its identities: get, link, unlink (docs/protocol.md, 'Accounts'). */
  readonly account: Accounts = new Accounts((method, path, session, body, convert) =>
    this.call(method, path, body, session.token, convert),
  );

  private post(path: string, body: unknown): Promise<Session> {
    return this.call("POST", path, body, undefined, (json) => toSession(json, Date.now()));
  }

  /** `send`, its answer converted; a body `convert` refuses (undefined) is a `bad_response`. */
  private async call<T>(
    method: "GET" | "POST",
    path: string,
    body: unknown,
    token: string | undefined,
    convert: (json: unknown, status: number) => T | undefined,
  ): Promise<T> {
    const { status, json } = await this.send(method, path, body, token);
    const result = convert(json, status);
    if (result === undefined) throw new OverworldHttpError(status, "bad_response", `${method} ${path}: unexpected body ${JSON.stringify(json).slice(0, 200)}`);
    return result;
  }

  /** One call of the HTTP API: the decoded JSON of a success, else an `OverworldHttpError`. */
  private async request(method: "GET" | "POST", path: string, body?: unknown, token?: string): Promise<unknown> {
    return (await this.send(method, path, body, token)).json;
  }

  /** One call of the HTTP API: the status and decoded JSON of a 200 or 202, else an `OverworldHttpError`. */
  private async send(method: "GET" | "POST", path: string, body?: unknown, token?: string): Promise<{ status: number; json: unknown }> {
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
    if (response.status !== 200 && response.status !== 202) throw toHttpError(response.status, text, response.headers, response.statusText);
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    if (json === undefined) throw new OverworldHttpError(response.status, "bad_response", `${method} ${path}: unexpected body ${text.slice(0, 200)}`);
    return { status: response.status, json };
  }
}

/** A `retry-after` header's seconds: a whole number of them, or an HTTP date (rounded up from `now`). */
function parseRetryAfter(value: string | null | undefined, now: number): number | undefined {
  if (value === null || value === undefined) return undefined;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v);
  const at = /[a-z]/i.test(v) ? Date.parse(v) : NaN;
  return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - now) / 1000));
}

/** The seconds of a 429's message ("too many attempts: retry in 30 s"). */
function retryIn(message: string): number | undefined {
  const m = /\bretry in (\d+) s\b/.exec(message);
  return m ? Number(m[1]) : undefined;
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
