/** Accounts on the server: identities, links and their errors (docs/protocol.md, 'Accounts'). */
import type { Session } from "./client.js";

/**
 * The `code` of an `OverworldHttpError` from the account routes (docs/protocol.md, 'Accounts'):
 * 400 `invalid_email`, `invalid_password` (8 to 256 bytes), `invalid_code`,
 * `invalid_custom_id`, `invalid_device_id`, `invalid_identity`; 401 `invalid_credentials` (an
 * unknown address and a wrong password alike), `invalid_assertion`, `invalid_token`; 403
 * `account_disabled`; 404 `not_found` (also: custom ids not configured on the server),
 * `not_linked`; 409 `already_linked` (another account has it), `identity_exists` (unlink the
 * account's address or custom id first), `last_identity` (an account keeps one way to log in),
 * `email_taken` (only from a server without email confirmation); 429 `rate_limited`, `busy`
 * (with `retryAfter`); 503 `no_quorum`.
 */
export type AccountErrorCode =
  | "invalid_email"
  | "invalid_password"
  | "invalid_credentials"
  | "invalid_code"
  | "invalid_custom_id"
  | "invalid_device_id"
  | "invalid_identity"
  | "invalid_assertion"
  | "invalid_token"
  | "account_disabled"
  | "not_found"
  | "not_linked"
  | "already_linked"
  | "identity_exists"
  | "last_identity"
  | "email_taken"
  | "rate_limited"
  | "busy"
  | "no_quorum";

/** Every `AccountErrorCode`, e.g. to check that a `switch` over them is exhaustive. */
export const ACCOUNT_ERROR_CODES: readonly AccountErrorCode[] = Object.freeze([
  "invalid_email",
  "invalid_password",
  "invalid_credentials",
  "invalid_code",
  "invalid_custom_id",
  "invalid_device_id",
  "invalid_identity",
  "invalid_assertion",
  "invalid_token",
  "account_disabled",
  "not_found",
  "not_linked",
  "already_linked",
  "identity_exists",
  "last_identity",
  "email_taken",
  "rate_limited",
  "busy",
  "no_quorum",
] as const);

/** An account and its identities. Times in ms since the epoch. */
export interface Account {
  userId: string;
  /** When the account was made (ms since the epoch; the server keeps whole seconds). */
  createdAt: number;
  /** Its device ids, sorted. */
  devices: string[];
  /** Its confirmed email address (lowercased), or null. */
  email: string | null;
  /** Its custom id, or null. */
  customId: string | null;
}

/**
 * The answer (HTTP 202) to an email registration or link on a server that confirms addresses:
 * if the address can be used, a code was mailed to it, for `client.confirmEmail`. The same
 * answer for a taken address (whose owner is mailed a notice instead): nothing tells whether
 * an address has an account.
 */
export interface EmailPending {
  status: "confirmation_sent";
  /** The server's explanation, for people. */
  message: string;
}

/**
 * What the server's custom authentication checks, sent as is (no case conversion): for the
 * built-in `Overworld.Accounts.CustomAuth.HMAC`, `{ assertion: "id.expires.mac" }` made by the
 * game's own auth server.
 */
export type CustomAuthBody = Record<string, unknown>;

/**
 * One call of the HTTP API as the session's user: `convert` turns the answer's status and
 * decoded JSON into the result, or undefined for a body that is not what the route answers
 * (an `OverworldHttpError` `bad_response` then).
 */
type Call = <T>(
  method: "GET" | "POST",
  path: string,
  session: Session,
  body: unknown,
  convert: (json: unknown, status: number) => T | undefined,
) => Promise<T>;

/**
 * `client.account`: the session's account, and the identities it may log in with (device ids,
 * one email address with a password, one custom id). Every call acts on the session's account
 * and resolves with the account as it is after it. Errors are `OverworldHttpError`s whose
 * `code` is an `AccountErrorCode`.
 */
export class Accounts {
  constructor(private readonly call: Call) {}

  /** The account. */
  get(session: Session): Promise<Account> {
    return this.call("GET", "/api/v1/account", session, undefined, toAccount);
  }

  /**
   * Adds a device id (10 to 128 printable ASCII characters, else `invalid_identity`);
   * `already_linked` if another account has it.
   */
  linkDevice(session: Session, deviceId: string): Promise<Account> {
    return this.call("POST", "/api/v1/account/link/device", session, { device_id: deviceId }, toAccount);
  }

  /** Adds a custom id vouched for by `body` (as `client.authenticateCustom`'s). */
  linkCustom(session: Session, body: CustomAuthBody): Promise<Account> {
    return this.call("POST", "/api/v1/account/link/custom", session, body, toAccount);
  }

  /**
   * Adds an email address and password: on a server that confirms addresses (the default)
   * resolves with `EmailPending`, and the mailed code, given to `client.confirmEmail`, links
   * the address to this account (a guest's device account keeps its id and data); otherwise
   * with the account, linked at once (or `email_taken`). An account with an address already
   * fails with `identity_exists` (unlink it first), and so does a confirmation if the account
   * got one meanwhile.
   */
  linkEmail(session: Session, email: string, password: string): Promise<EmailPending | Account> {
    return this.call("POST", "/api/v1/account/link/email", session, { email, password }, (json, status) =>
      status === 202 ? toPending(json) : toAccount(json),
    );
  }

  /** Removes a device id; `not_linked` if the account has not it, `last_identity` if it is its only one. */
  unlinkDevice(session: Session, deviceId: string): Promise<Account> {
    return this.call("POST", "/api/v1/account/unlink/device", session, { device_id: deviceId }, toAccount);
  }

  /** Removes the account's custom id. */
  unlinkCustom(session: Session): Promise<Account> {
    return this.call("POST", "/api/v1/account/unlink/custom", session, {}, toAccount);
  }

  /** Removes the account's email address (and its password). */
  unlinkEmail(session: Session): Promise<Account> {
    return this.call("POST", "/api/v1/account/unlink/email", session, {}, toAccount);
  }
}

/** An account from its JSON (`{user_id, created_at, devices, email, custom_id}`), or undefined. */
export function toAccount(json: unknown): Account | undefined {
  if (typeof json !== "object" || json === null) return undefined;
  const { user_id, created_at, devices, email, custom_id } = json as Record<string, unknown>;
  if (typeof user_id !== "string" && typeof user_id !== "number") return undefined;
  if (typeof created_at !== "number") return undefined;
  if (!Array.isArray(devices) || !devices.every((d) => typeof d === "string")) return undefined;
  const orNull = (v: unknown) => (typeof v === "string" ? v : v === null || v === undefined ? null : undefined);
  const e = orNull(email);
  const c = orNull(custom_id);
  if (e === undefined || c === undefined) return undefined;
  return { userId: String(user_id), createdAt: created_at * 1000, devices: devices as string[], email: e, customId: c };
}

/** `EmailPending` from a 202's JSON, or undefined. */
export function toPending(json: unknown): EmailPending | undefined {
  if (typeof json !== "object" || json === null) return undefined;
  const { status, message } = json as Record<string, unknown>;
  if (status !== "confirmation_sent") return undefined;
  return { status, message: typeof message === "string" ? message : "" };
}
