// Accounts (docs/protocol.md, 'Accounts'): the wire mapping against a fake fetch, then the email
// flow against the real server (the goblin example's `mix goblins.server --port 0`, whose default
// mailer logs each mail, code included, on the server's output). The integration part is skipped
// only when OVERWORLD_SKIP_INTEGRATION=1.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ACCOUNT_ERROR_CODES,
  Client,
  OverworldHttpError,
  toHttpError,
  type Account,
  type AccountErrorCode,
  type EmailPending,
  type FetchLike,
  type Session,
} from "../src/index.js";
import { START_TIMEOUT, startServer, type RunningServer } from "./server.js";

const TOKENS = { user_id: "u1", token: "t", expires_in: 3600, refresh_token: "r", refresh_expires_in: 604800 };
const ACCOUNT = { user_id: "u1", created_at: 1_700_000_000, devices: ["device-0123456789"], email: "a@example.com", custom_id: null };
const PENDING = { status: "confirmation_sent", message: "if the address can be used, a code has been mailed to it" };

interface Answer {
  status: number;
  body: unknown;
  headers?: Record<string, string>;
}

/** A fetch answering `answers` in turn (the last one again), recording the calls. */
function fake(...answers: Answer[]) {
  const calls: Array<{ url: string; method: string; headers: Record<string, string>; body: unknown }> = [];
  const f: FetchLike = async (url, init) => {
    calls.push({ url, method: init.method, headers: init.headers, body: init.body === undefined ? undefined : JSON.parse(init.body) });
    const a = answers[Math.min(calls.length - 1, answers.length - 1)]!;
    return {
      status: a.status,
      statusText: "Status",
      headers: new Headers(a.headers ?? {}),
      text: async () => (typeof a.body === "string" ? a.body : JSON.stringify(a.body)),
    };
  };
  return { client: new Client({ baseUrl: "http://game.example:4000/", fetch: f }), calls };
}

const session = (token = "tok"): Session => ({ userId: "u1", token, refreshToken: "ref", expiresAt: 0, refreshExpiresAt: 0, created: false });
const error = (status: number, code: string, message = "why", headers?: Record<string, string>): Answer => ({
  status,
  body: { error: code, message },
  ...(headers ? { headers } : {}),
});

describe("accounts: the wire", () => {
  it("registers an email address: 202 is EmailPending, 200 (no confirmation) a session", async () => {
    const { client, calls } = fake({ status: 202, body: PENDING }, { status: 200, body: { ...TOKENS, created: true } });
    const pending = await client.registerEmail("A@Example.com", "hunter2hunter2");
    expect(pending).toEqual<EmailPending>({ status: "confirmation_sent", message: PENDING.message });
    expect(calls[0]).toEqual({
      url: "http://game.example:4000/api/v1/auth/email/register",
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json" },
      body: { email: "A@Example.com", password: "hunter2hunter2" },
    });
    const s = await client.registerEmail("b@example.com", "hunter2hunter2");
    expect("status" in s).toBe(false);
    expect(s).toMatchObject({ userId: "u1", token: "t", refreshToken: "r", created: true });
  });

  it("confirms a code, logs in with an address, with a custom body, and logs out", async () => {
    const { client, calls } = fake(
      { status: 200, body: { ...TOKENS, created: true } },
      { status: 200, body: { ...TOKENS, created: false } },
      { status: 200, body: { ...TOKENS, created: true } },
      { status: 200, body: {} },
    );
    const before = Date.now();
    const confirmed = await client.confirmEmail("AbC-_9");
    expect(confirmed).toMatchObject({ userId: "u1", token: "t", refreshToken: "r", created: true });
    expect(confirmed.expiresAt).toBeGreaterThanOrEqual(before + 3_600_000);
    expect(await client.authenticateEmail("a@example.com", "pw-pw-pw-pw")).toMatchObject({ token: "t", created: false });
    expect(await client.authenticateCustom({ assertion: "player-7.1700000000.mac", extra_field: 1 })).toMatchObject({ created: true });
    expect(await client.logout(session("tok-1"))).toBeUndefined();
    expect(calls.map((c) => [c.method, c.url.replace("http://game.example:4000", ""), c.body])).toEqual([
      ["POST", "/api/v1/auth/email/confirm", { code: "AbC-_9" }],
      ["POST", "/api/v1/auth/email/login", { email: "a@example.com", password: "pw-pw-pw-pw" }],
      // The custom body goes as is.
      ["POST", "/api/v1/auth/custom", { assertion: "player-7.1700000000.mac", extra_field: 1 }],
      ["POST", "/api/v1/auth/logout", {}],
    ]);
    expect(calls.slice(0, 3).every((c) => c.headers.authorization === undefined)).toBe(true);
    expect(calls[3]!.headers.authorization).toBe("Bearer tok-1");
  });

  it("gets the account, links and unlinks, with the session's token; snake_case in, camelCase out", async () => {
    const { client, calls } = fake({ status: 200, body: ACCOUNT });
    const expected: Account = { userId: "u1", createdAt: 1_700_000_000_000, devices: ["device-0123456789"], email: "a@example.com", customId: null };
    const s = session("tok-2");
    expect(await client.account.get(s)).toEqual(expected);
    expect(await client.account.linkDevice(s, "device-9876543210")).toEqual(expected);
    expect(await client.account.linkCustom(s, { assertion: "x.1.y" })).toEqual(expected);
    expect(await client.account.unlinkDevice(s, "device-9876543210")).toEqual(expected);
    expect(await client.account.unlinkCustom(s)).toEqual(expected);
    expect(await client.account.unlinkEmail(s)).toEqual(expected);
    expect(await client.account.linkEmail(s, "b@example.com", "password1")).toEqual(expected);
    expect(calls.map((c) => [c.method, c.url.replace("http://game.example:4000", ""), c.body])).toEqual([
      ["GET", "/api/v1/account", undefined],
      ["POST", "/api/v1/account/link/device", { device_id: "device-9876543210" }],
      ["POST", "/api/v1/account/link/custom", { assertion: "x.1.y" }],
      ["POST", "/api/v1/account/unlink/device", { device_id: "device-9876543210" }],
      ["POST", "/api/v1/account/unlink/custom", {}],
      ["POST", "/api/v1/account/unlink/email", {}],
      ["POST", "/api/v1/account/link/email", { email: "b@example.com", password: "password1" }],
    ]);
    expect(calls.every((c) => c.headers.authorization === "Bearer tok-2")).toBe(true);
  });

  it("linkEmail: 202 is EmailPending; an account with a custom id and no address", async () => {
    const { client } = fake({ status: 202, body: PENDING }, { status: 200, body: { ...ACCOUNT, email: null, custom_id: "player-7", user_id: 42 } });
    expect(await client.account.linkEmail(session(), "b@example.com", "password1")).toEqual({ status: "confirmation_sent", message: PENDING.message });
    expect(await client.account.get(session())).toMatchObject({ userId: "42", email: null, customId: "player-7" });
  });

  it("errors: code, status and message; retry-after in seconds on 429, from the header or else the message", async () => {
    const { client } = fake(
      error(401, "invalid_credentials", "unknown address or wrong password"),
      error(429, "rate_limited", "too many attempts: retry in 30 s", { "retry-after": "30" }),
      error(429, "busy", "the server is busy hashing passwords: retry in 1 s", { "Retry-After": " 1 " }),
      // A browser hides the header from a page of another origin: the message tells.
      error(429, "rate_limited", "too many attempts: retry in 12 s"),
      error(409, "last_identity", "an account keeps at least one way to log in"),
      error(503, "no_quorum", "try another node", { "retry-after": new Date(Date.now() + 5_000).toUTCString() }),
      error(429, "rate_limited", "slow down", { "retry-after": "soon" }),
    );
    const fail = (p: Promise<unknown>) => p.then(() => expect.fail("resolved"), (e: unknown) => e as OverworldHttpError);

    const bad = await fail(client.authenticateEmail("a@example.com", "wrong-password"));
    expect(bad).toBeInstanceOf(OverworldHttpError);
    expect([bad.status, bad.code, bad.message, bad.retryAfter]).toEqual([401, "invalid_credentials", "unknown address or wrong password", undefined]);

    expect(await fail(client.authenticateEmail("a@example.com", "x"))).toMatchObject({ status: 429, code: "rate_limited", retryAfter: 30 });
    expect(await fail(client.registerEmail("a@example.com", "password1"))).toMatchObject({ status: 429, code: "busy", retryAfter: 1 });
    expect(await fail(client.confirmEmail("c"))).toMatchObject({ status: 429, code: "rate_limited", retryAfter: 12 });
    expect(await fail(client.account.unlinkDevice(session(), "device-0123456789"))).toMatchObject({ status: 409, code: "last_identity", retryAfter: undefined });
    const date = await fail(client.account.get(session()));
    expect(date).toMatchObject({ status: 503, code: "no_quorum" });
    expect(date.retryAfter).toBeGreaterThanOrEqual(3);
    expect(date.retryAfter).toBeLessThanOrEqual(6);
    expect(await fail(client.authenticateEmail("a@example.com", "x"))).toMatchObject({ status: 429, retryAfter: undefined });
  });

  it("toHttpError: the same error from any failed answer (another client of the API)", () => {
    const h = (o: Record<string, string>) => ({ get: (n: string) => o[n] ?? null });
    expect(toHttpError(429, '{"error":"busy","message":"m"}', h({ "retry-after": "4" }))).toMatchObject({ status: 429, code: "busy", message: "m", retryAfter: 4 });
    expect(toHttpError(429, '{"error":"rate_limited","message":"retry in 9 s"}')).toMatchObject({ retryAfter: 9 });
    const plain = toHttpError(502, "<html>bad gateway</html>", undefined, "Bad Gateway");
    expect(plain).toBeInstanceOf(OverworldHttpError);
    expect(plain).toMatchObject({ status: 502, code: "http_error", message: "HTTP 502 Bad Gateway", retryAfter: undefined });
  });

  it("errors: a fetch without headers, a body that is not an account, a 202 that is not pending", async () => {
    const bare = new Client({ baseUrl: "http://x", fetch: async () => ({ status: 429, text: async () => '{"error":"busy","message":"m: retry in 2 s"}' }) });
    await expect(bare.authenticateEmail("a@example.com", "password1")).rejects.toMatchObject({ code: "busy", retryAfter: 2 });

    const { client } = fake(
      { status: 200, body: { ...ACCOUNT, devices: "nope" } },
      { status: 202, body: { status: "something_else" } },
      { status: 200, body: PENDING },
      { status: 200, body: "not json" },
    );
    await expect(client.account.get(session())).rejects.toMatchObject({ status: 200, code: "bad_response" });
    await expect(client.registerEmail("a@example.com", "password1")).rejects.toMatchObject({ status: 202, code: "bad_response" });
    // A 200 to a registration is a session, not the 202's body.
    await expect(client.registerEmail("a@example.com", "password1")).rejects.toMatchObject({ status: 200, code: "bad_response" });
    await expect(client.logout(session())).rejects.toMatchObject({ status: 200, code: "bad_response" });
  });

  it("exports every account error code", () => {
    const codes: readonly AccountErrorCode[] = ACCOUNT_ERROR_CODES;
    expect(new Set(codes).size).toBe(19);
    expect(codes).toEqual(expect.arrayContaining(["invalid_credentials", "invalid_token", "rate_limited", "busy", "no_quorum", "account_disabled"]));
    expect(Object.isFrozen(ACCOUNT_ERROR_CODES)).toBe(true);
  });
});

const SKIP = process.env.OVERWORLD_SKIP_INTEGRATION === "1";
/** Slow: each email login or registration hashes a password (600,000 PBKDF2 iterations, ~0.65 s). */
const EMAIL_TIMEOUT = 60_000;

describe.skipIf(SKIP)("accounts against the real server (mix goblins.server)", () => {
  let server: RunningServer | undefined;
  let client: Client;
  const tag = `${process.pid}-${Math.random().toString(36).slice(2, 10)}`;
  const deviceId = () => `ts-accounts-${Math.random().toString(36).slice(2, 12)}`;

  /** The code the server's log mailer "sent" to `address` for `kind`, once it is on the output. */
  async function mailedCode(kind: string, address: string, ms = 10_000): Promise<string> {
    const escaped = address.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
    const line = new RegExp(`mail \\(not sent: [^)]*\\) ${kind} to ${escaped} %\\{code: "([A-Za-z0-9_-]+)"\\}`);
    const end = Date.now() + ms;
    for (;;) {
      const m = line.exec(server!.output());
      if (m) return m[1]!;
      if (Date.now() > end) throw new Error(`no ${kind} mail to ${address} on the server's output within ${ms} ms; its end:\n${server!.output().slice(-2000)}`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  const failure = (p: Promise<unknown>) =>
    p.then(
      () => expect.fail("resolved"),
      (e: unknown) => {
        expect(e).toBeInstanceOf(OverworldHttpError);
        return e as OverworldHttpError;
      },
    );

  beforeAll(async () => {
    server = await startServer("overworld-ts-accounts-", ["--entities", "200"]);
    client = new Client({ baseUrl: server.baseUrl });
  }, START_TIMEOUT + 10_000);

  afterAll(async () => {
    await server?.stop();
  }, 15_000);

  it(
    "registers, confirms the mailed code, logs in, links a device, logs out (the old token refused), logs in again",
    async () => {
      const email = `ts-${tag}@example.com`;
      const password = "correct horse battery";
      const pending = await client.registerEmail(email, password);
      expect(pending).toMatchObject({ status: "confirmation_sent" });

      const code = await mailedCode("confirm_registration", email);
      const made = await client.confirmEmail(code);
      expect(made.created).toBe(true);
      expect(made.token.length).toBeGreaterThan(0);
      // A code is used once.
      expect(await failure(client.confirmEmail(code))).toMatchObject({ status: 400, code: "invalid_code" });

      // Addresses are kept lowercased.
      const s = await client.authenticateEmail(email.toUpperCase(), password);
      expect(s.userId).toBe(made.userId);
      expect(s.created).toBe(false);

      const account = await client.account.get(s);
      expect(account).toEqual<Account>({ userId: made.userId, createdAt: expect.any(Number) as number, devices: [], email, customId: null });
      expect(Math.abs(account.createdAt - Date.now())).toBeLessThan(60_000);

      const device = deviceId();
      const linked = await client.account.linkDevice(s, device);
      expect(linked.devices).toEqual([device]);
      // The device signs in to the same account now.
      const byDevice = await client.authenticateDevice(device);
      expect([byDevice.userId, byDevice.created]).toEqual([made.userId, false]);
      // (The link route says invalid_identity where /auth/device says invalid_device_id.)
      expect(await failure(client.account.linkDevice(s, "short"))).toMatchObject({ status: 400, code: "invalid_identity" });
      expect(await failure(client.account.unlinkCustom(s))).toMatchObject({ status: 404, code: "not_linked" });

      await client.logout(s);
      const refused = await failure(client.account.get(s));
      expect(refused).toMatchObject({ status: 401, code: "invalid_token" });
      await expect(client.refresh(s)).rejects.toMatchObject({ status: 401, code: "invalid_token" });
      // Other logins of the account stay.
      expect((await client.account.get(byDevice)).userId).toBe(made.userId);

      const again = await client.authenticateEmail(email, password);
      expect(again.userId).toBe(made.userId);
      expect((await client.account.get(again)).devices).toEqual([device]);
      const after = await client.account.unlinkDevice(again, device);
      expect(after).toMatchObject({ devices: [], email });
      expect(await failure(client.account.unlinkEmail(again))).toMatchObject({ status: 409, code: "last_identity" });
    },
    EMAIL_TIMEOUT,
  );

  it(
    "a wrong password and an unknown address give the same invalid_credentials",
    async () => {
      const email = `ts-${tag}@example.com`; // registered by the test above
      const wrong = await failure(client.authenticateEmail(email, "not the password"));
      const unknown = await failure(client.authenticateEmail(`nobody-${tag}@example.com`, "not the password"));
      expect([wrong.status, wrong.code, wrong.retryAfter]).toEqual([401, "invalid_credentials", undefined]);
      expect([unknown.status, unknown.code, unknown.message]).toEqual([wrong.status, wrong.code, wrong.message]);
      // Refused without hashing anything.
      expect(await failure(client.authenticateEmail("no-at-sign", "whatever1"))).toMatchObject({ status: 400, code: "invalid_email" });
      expect(await failure(client.registerEmail(`short-${tag}@example.com`, "short"))).toMatchObject({ status: 400, code: "invalid_password" });
    },
    EMAIL_TIMEOUT,
  );

  it(
    "a guest's device account links an address through the mailed code and keeps its id",
    async () => {
      const guest = await client.authenticateDevice(deviceId());
      const email = `guest-${tag}@example.com`;
      expect(await client.account.linkEmail(guest, email, "guest password")).toMatchObject({ status: "confirmation_sent" });
      const code = await mailedCode("confirm_link", email);
      // Only with the session of the account that asked.
      expect(await failure(client.confirmEmail(code))).toMatchObject({ status: 400, code: "invalid_code" });
      const linked = await client.confirmEmail(code, guest);
      expect([linked.userId, linked.created]).toEqual([guest.userId, false]);
      expect(await client.account.get(guest)).toMatchObject({ userId: guest.userId, email, customId: null });
      // An account has one address: unlink it first (said at once: it tells nothing of others' addresses).
      const other = `other-${tag}@example.com`;
      expect(await failure(client.account.linkEmail(guest, other, "guest password"))).toMatchObject({ status: 409, code: "identity_exists" });
      expect(await client.account.unlinkEmail(guest)).toMatchObject({ email: null });
    },
    EMAIL_TIMEOUT,
  );

  it("custom ids are not configured on the goblin server: not_found", async () => {
    expect(await failure(client.authenticateCustom({ assertion: "player-7.1.mac" }))).toMatchObject({ status: 404, code: "not_found" });
    const guest = await client.authenticateDevice(deviceId());
    expect(await failure(client.account.linkCustom(guest, { assertion: "player-7.1.mac" }))).toMatchObject({ status: 404, code: "not_found" });
  });

  // Last: it uses up this client address's email calls for a minute.
  it("too many email calls from one address: 429 rate_limited with retryAfter", async () => {
    let refused: OverworldHttpError | undefined;
    for (let i = 0; i < 40 && refused === undefined; i++) {
      const e = await failure(client.confirmEmail(`no-such-code-${i}`));
      if (e.status === 429) refused = e;
      else expect(e.code).toBe("invalid_code");
    }
    expect(refused).toBeDefined();
    expect(refused!.code).toBe("rate_limited");
    expect(refused!.retryAfter).toBeGreaterThan(0);
    expect(refused!.retryAfter).toBeLessThanOrEqual(60);
  });
});
