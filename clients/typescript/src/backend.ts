/**
 * Backend services over the zone connection's WebSocket (docs/protocol.md, 'Matches and RPC'):
 * requests and their answers, matches, the matchmaker; their types, errors and JSON mapping.
 * The HTTP side (`client.rpc`, `client.listMatches`) shares the types.
 */
import type { ClientMessage } from "./messages.js";

/**
 * The `code` of an error answer of the backend (a RESPONSE's `{"error": code}`, or the HTTP
 * routes' body): 400 `bad_json`, `invalid_request`, `invalid_query`, `invalid_ticket`,
 * `match_create_failed`; 403 `match_join_rejected` (the message is the handler's reason, e.g.
 * "full"); 404 `unknown_method`, `unknown_rpc`, `match_not_found`, `unknown_handler`,
 * `ticket_not_found`; 409 `too_many_tickets` (3 a player); 429 `too_many_requests` (16 running
 * at once per connection); 500 `internal`, `rpc_failed`, `rpc_memory_limit`; 503 `busy`,
 * `unavailable`; 504 `rpc_timeout`; and an RPC function's own: 400 `invalid_argument`, 401
 * `unauthenticated`, 403 `permission_denied`, 404 `not_found`, 409 `conflict`, 503
 * `unavailable`, 500 `internal`.
 */
export type BackendErrorCode =
  | "unknown_rpc"
  | "rpc_failed"
  | "rpc_timeout"
  | "rpc_memory_limit"
  | "busy"
  | "unavailable"
  | "invalid_argument"
  | "unauthenticated"
  | "permission_denied"
  | "not_found"
  | "conflict"
  | "internal"
  | "match_not_found"
  | "match_join_rejected"
  | "unknown_handler"
  | "match_create_failed"
  | "invalid_request"
  | "invalid_query"
  | "unknown_method"
  | "bad_json"
  | "too_many_requests"
  | "invalid_ticket"
  | "ticket_not_found"
  | "too_many_tickets";

/** Every `BackendErrorCode`, e.g. to check that a `switch` over them is exhaustive. */
export const BACKEND_ERROR_CODES: readonly BackendErrorCode[] = Object.freeze([
  "unknown_rpc",
  "rpc_failed",
  "rpc_timeout",
  "rpc_memory_limit",
  "busy",
  "unavailable",
  "invalid_argument",
  "unauthenticated",
  "permission_denied",
  "not_found",
  "conflict",
  "internal",
  "match_not_found",
  "match_join_rejected",
  "unknown_handler",
  "match_create_failed",
  "invalid_request",
  "invalid_query",
  "unknown_method",
  "bad_json",
  "too_many_requests",
  "invalid_ticket",
  "ticket_not_found",
  "too_many_tickets",
] as const);

/**
 * The codes of a request that got no answer of the server (`status` 0): `timeout` (none within
 * `requestTimeout`), `disconnected` (the socket closed after the request was sent: the server
 * may or may not have acted on it), `closed` (the connection was closed for good before it
 * was sent); and `bad_response`, a success whose body is not what the method answers.
 */
export type RequestFailureCode = "timeout" | "disconnected" | "closed" | "bad_response";

/** An `OverworldRequestError`'s code: the server's, or the client's own. */
export type RequestErrorCode = BackendErrorCode | RequestFailureCode;

/**
 * A request over the WebSocket that failed (mirrors `OverworldHttpError`): `status` is the
 * RESPONSE's (HTTP-like: 4xx, 5xx) with the server's `code` and `message`, or 0 when no answer
 * came (`timeout`, `disconnected`, `closed`). A code of a newer server than this SDK knows
 * comes as it is.
 */
export class OverworldRequestError extends Error {
  readonly status: number;
  readonly code: RequestErrorCode | (string & {});
  /** The request's method (`rpc`, `match_join`, ...). */
  readonly method: string;

  constructor(status: number, code: string, message: string, method: string) {
    super(message);
    this.name = "OverworldRequestError";
    this.status = status;
    this.code = code;
    this.method = method;
  }
}

/** A scalar of a label or of a ticket's properties. */
export type QueryValue = string | number | boolean;

/**
 * A query over a flat JSON object (a match's label, a ticket's properties): every term must
 * hold. A term is a value (the field equals it), a list of values (it equals one of them), or
 * numeric bounds (`{ gte: 3, lt: 10 }`). A field the object lacks fails its term.
 */
export type MatchQuery = Record<string, QueryValue | QueryValue[] | { gt?: number; gte?: number; lt?: number; lte?: number }>;

/** A match's label: a flat JSON object its handler sets (at most 2 KiB), listed and queried. */
export type MatchLabel = Record<string, unknown>;

/** A match found by `listMatches`. */
export interface MatchInfo {
  matchId: string;
  label: MatchLabel;
  /** Players in it. */
  size: number;
  tickRate: number;
  /** The handler's name (e.g. "Overworld.Match.Relay" for a relayed match). */
  handler: string;
}

/** What `listMatches` asks (every part optional). */
export interface ListMatchesOptions {
  /** Terms the label must satisfy (default `{}`: any). */
  query?: MatchQuery;
  /** Players at least (default 0). */
  minSize?: number;
  /** Players at most. */
  maxSize?: number;
  /** Matches at most, 1..100 (default 10). */
  limit?: number;
}

/** The answer to `joinMatch`. */
export interface MatchJoined {
  matchId: string;
  label: MatchLabel;
  tickRate: number;
  /** The players' user ids, sorted (this one included). */
  presences: string[];
  /** Whether the player took its own place back (a join again within the grace: the others saw nothing). */
  rejoined: boolean;
}

/** One message of a match (`onMatchData`), in the order the match sent them. */
export interface MatchData {
  matchId: string;
  op: number;
  /** The sending player's user id, "" for the match itself. */
  sender: string;
  data: Uint8Array;
}

/** Players that joined or left a match (`onMatchPresence`; not sent for the player's own joins). */
export interface MatchPresenceEvent {
  matchId: string;
  /** User ids. */
  joins: string[];
  /** User ids. */
  leaves: string[];
}

/**
 * What happened to the player's place in a match, or to what it sent (`onMatchNotice`):
 *
 * - `match_end`: the match ended;
 * - `match_error`: it failed (its handler raised, or ran past its time or memory);
 * - `match_kicked`: the match removed the player;
 * - `match_replaced`: another connection of the same user took the player's place (the
 *   server names no match: `matchId` undefined);
 * - `error`: a `sendMatchData` the server refused: `not_in_match`, `match_data_too_large`;
 * - `rejoin_failed`: after a reconnection, joining a match again failed (it ended meanwhile,
 *   or the player's place was given up after the grace and the match refused it).
 *
 * After every kind but `error` the player is no longer in the match (`joinedMatches`).
 */
export type MatchNotice =
  | { kind: "match_end"; matchId: string }
  | { kind: "match_error"; matchId: string; message: string }
  | { kind: "match_kicked"; matchId: string }
  | { kind: "match_replaced"; matchId: string | undefined }
  | { kind: "error"; code: "not_in_match" | "match_data_too_large" | (string & {}); message: string }
  | { kind: "rejoin_failed"; matchId: string; error: OverworldRequestError };

/** A matchmaker ticket (`addMatchmaker`). */
export interface MatchmakerTicket {
  /** What the others' queries see of this player: at most 32 strings (≤ 256 bytes) and numbers. */
  properties?: Record<string, string | number>;
  /** What this player wants of the others' properties (default `{}`: anyone). Tickets only meet those whose query has the same exact terms. */
  query?: MatchQuery;
  /** Players at least, 2..64. */
  minCount: number;
  /** Players at most, minCount..64. */
  maxCount: number;
  /** The match's size is a multiple of it (default 1). */
  countMultiple?: number;
}

/** Tickets became a match (`onMatchmakerMatched`): join it with `joinMatch(matchId)`. */
export interface MatchmakerMatched {
  /** This player's ticket (no longer held). */
  ticket: string;
  matchId: string;
  /** Every matched player's user id. */
  users: string[];
}

// ---- JSON mapping ----

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);
const isStrings = (v: unknown): v is string[] => Array.isArray(v) && v.every((s) => typeof s === "string");

/** `match_list`'s arguments (WebSocket and HTTP). */
export function listArgs(o: ListMatchesOptions = {}): Json {
  return { query: o.query, min_size: o.minSize, max_size: o.maxSize, limit: o.limit };
}

/** The matches of a `{matches}` answer, or undefined. */
export function toMatchList(json: unknown): MatchInfo[] | undefined {
  if (!isObject(json) || !Array.isArray(json.matches)) return undefined;
  const out: MatchInfo[] = [];
  for (const m of json.matches) {
    if (!isObject(m)) return undefined;
    const { match_id, label, size, tick_rate, handler } = m;
    if (typeof match_id !== "string" || !isObject(label) || typeof size !== "number" || typeof tick_rate !== "number") return undefined;
    out.push({ matchId: match_id, label, size, tickRate: tick_rate, handler: typeof handler === "string" ? handler : "" });
  }
  return out;
}

export function toMatchJoined(json: unknown): MatchJoined | undefined {
  if (!isObject(json)) return undefined;
  const { match_id, label, tick_rate, presences, rejoined } = json;
  if (typeof match_id !== "string" || !isObject(label) || typeof tick_rate !== "number" || !isStrings(presences)) return undefined;
  return { matchId: match_id, label, tickRate: tick_rate, presences, rejoined: rejoined === true };
}

/** A string field of an answer, or undefined. */
export const field = (key: string) => (json: unknown): string | undefined =>
  isObject(json) && typeof json[key] === "string" ? (json[key] as string) : undefined;

/** An answer with nothing in it (`{}`). */
export const nothing = (json: unknown): true | undefined => (isObject(json) ? true : undefined);

/** A `{payload}` answer's payload (null when the function answered none). */
export function toPayload<T>(json: unknown): { payload: T } | undefined {
  return isObject(json) && "payload" in json ? { payload: json.payload as T } : undefined;
}

export function ticketArgs(t: MatchmakerTicket): Json {
  return { properties: t.properties ?? {}, query: t.query ?? {}, min_count: t.minCount, max_count: t.maxCount, count_multiple: t.countMultiple };
}

const userIds = (v: unknown): string[] | undefined =>
  Array.isArray(v) && v.every((p) => isObject(p) && typeof p.user_id === "string") ? v.map((p) => (p as Json).user_id as string) : undefined;

/** A NOTIFY, typed; undefined for a kind (or a body) this SDK does not know. */
export type Notice =
  | { kind: "match_presence"; event: MatchPresenceEvent }
  | { kind: "notice"; notice: MatchNotice }
  | { kind: "matchmaker_matched"; matched: MatchmakerMatched };

export function toNotice(kind: string, body: unknown): Notice | undefined {
  if (!isObject(body)) return undefined;
  const matchId = typeof body.match_id === "string" ? body.match_id : undefined;
  switch (kind) {
    case "match_presence": {
      const joins = userIds(body.joins ?? []);
      const leaves = userIds(body.leaves ?? []);
      if (matchId === undefined || joins === undefined || leaves === undefined) return undefined;
      return { kind, event: { matchId, joins, leaves } };
    }
    case "match_end":
    case "match_kicked":
      return matchId === undefined ? undefined : { kind: "notice", notice: { kind, matchId } };
    case "match_error":
      return matchId === undefined ? undefined : { kind: "notice", notice: { kind, matchId, message: typeof body.message === "string" ? body.message : "" } };
    case "match_replaced":
      return { kind: "notice", notice: { kind, matchId } };
    case "error":
      if (typeof body.error !== "string") return undefined;
      return { kind: "notice", notice: { kind, code: body.error, message: typeof body.message === "string" ? body.message : "" } };
    case "matchmaker_matched": {
      const { ticket, users } = body;
      if (typeof ticket !== "string" || matchId === undefined || !isStrings(users)) return undefined;
      return { kind, matched: { ticket, matchId, users } };
    }
    default:
      return undefined;
  }
}

// ---- requests ----

interface Pending {
  id: number;
  method: string;
  body: string;
  resolve: (json: unknown) => void;
  reject: (e: OverworldRequestError) => void;
  timer: ReturnType<typeof setTimeout>;
  /** Whether it went out on the current socket. */
  sent: boolean;
}

/**
 * The connection's requests: ids (1, 2, ... over the connection's life), those waiting for
 * the connection to be open (sent in order once it is), those sent and waiting for their
 * RESPONSE, and their time limit.
 */
export class Requests {
  private next = 1;
  private readonly list = new Map<number, Pending>();
  /** The connection is closed for good: requests fail at once. */
  private over = false;

  /**
   * @param send sends a message when the connection is open (after a HANDSHAKE); false otherwise
   * @param timeout ms a request waits for its answer, from the call
   */
  constructor(
    private readonly send: (m: ClientMessage) => boolean,
    private readonly timeout: number,
  ) {}

  /** Requests not answered yet (sent or waiting to be). */
  get size(): number {
    return this.list.size;
  }

  /**
   * A request: resolves with the result converted (a success `convert` refuses is a
   * `bad_response`), rejects with an `OverworldRequestError`.
   */
  call<T>(method: string, args: Json, convert: (json: unknown) => T | undefined): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      if (this.over) return reject(new OverworldRequestError(0, "closed", `${method}: the connection is closed`, method));
      const id = this.next++;
      const p: Pending = {
        id,
        method,
        body: JSON.stringify(args),
        resolve: (json) => {
          const v = convert(json);
          if (v === undefined) reject(new OverworldRequestError(200, "bad_response", `${method}: unexpected answer ${JSON.stringify(json).slice(0, 200)}`, method));
          else resolve(v);
        },
        reject,
        timer: setTimeout(() => this.fail(id, "timeout", `${method}: no answer within ${this.timeout} ms`), this.timeout),
        sent: false,
      };
      this.list.set(id, p);
      this.trySend(p);
    });
  }

  /** The connection is open (a HANDSHAKE): what waited goes, in order. */
  opened(): void {
    for (const p of this.list.values()) if (!p.sent) this.trySend(p);
  }

  /** A RESPONSE. Answers false for an id not waiting (answered, timed out). */
  response(id: number, status: number, body: string): boolean {
    const p = this.list.get(id);
    if (p === undefined || !p.sent) return false;
    this.list.delete(id);
    clearTimeout(p.timer);
    let json: unknown;
    try {
      json = JSON.parse(body);
    } catch {
      json = undefined;
    }
    if (status >= 200 && status < 300) {
      if (json === undefined) p.reject(new OverworldRequestError(status, "bad_response", `${p.method}: an answer that is not JSON`, p.method));
      else p.resolve(json);
    } else {
      const o = isObject(json) ? json : {};
      const code = typeof o.error === "string" ? o.error : "bad_response";
      const message = typeof o.message === "string" ? o.message : `${p.method}: status ${status}`;
      p.reject(new OverworldRequestError(status, code, message, p.method));
    }
    return true;
  }

  /** The socket closed: what was sent on it will not be answered. What waited to be sent waits on. */
  disconnected(): void {
    for (const p of [...this.list.values()]) if (p.sent) this.fail(p.id, "disconnected", `${p.method}: the connection was lost before the answer`);
  }

  /** The connection is closed for good: every request fails. */
  closed(): void {
    this.over = true;
    for (const p of [...this.list.values()])
      if (p.sent) this.fail(p.id, "disconnected", `${p.method}: the connection was closed before the answer`);
      else this.fail(p.id, "closed", `${p.method}: the connection is closed`);
  }

  private trySend(p: Pending): void {
    p.sent = this.send({ type: "request", id: p.id, method: p.method, body: p.body });
  }

  private fail(id: number, code: RequestFailureCode, message: string): void {
    const p = this.list.get(id);
    if (p === undefined) return;
    this.list.delete(id);
    clearTimeout(p.timer);
    p.reject(new OverworldRequestError(0, code, message, p.method));
  }
}
