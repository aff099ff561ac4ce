import { describe, expect, it } from "vitest";
import { Api, ApiError, PATHS, toRect, type FetchFn } from "../src/api.js";
import { TokenStore } from "../src/token.js";

interface Call {
  url: string;
  method: string;
  headers: Record<string, string>;
  body: unknown;
}

/** A fetch that records each call and answers from a list (status, body text, headers). */
function fake(...answers: Array<[number, unknown, Record<string, string>?]>) {
  const calls: Call[] = [];
  const f: FetchFn = async (url, init) => {
    calls.push({ url, method: init.method, headers: init.headers, body: init.body === undefined ? undefined : JSON.parse(init.body) });
    const [status, body, headers = {}] = answers.shift() ?? [500, ""];
    const text = typeof body === "string" ? body : JSON.stringify(body);
    return { status, headers: { get: (n: string) => headers[n.toLowerCase()] ?? null }, text: async () => text, blob: async () => new Blob([text]) };
  };
  return { calls, f };
}

const api = (f: FetchFn, token: string | null = "tok", onUnauthorized?: (e: ApiError) => void) =>
  new Api({ baseUrl: "http://h:4000/", fetch: f, token: () => token, onUnauthorized });

describe("Api: request shapes", () => {
  it("logs in with name and password, without a token, and answers the token and its lifetime", async () => {
    const { calls, f } = fake([200, { token: "op-token", expires_in: 3600 }]);
    expect(await api(f).login("ops", "secret")).toEqual({ token: "op-token", expiresIn: 3600 });
    expect(calls).toEqual([
      {
        url: "http://h:4000/api/v1/operator/login",
        method: "POST",
        headers: { accept: "application/json", "content-type": "application/json" },
        body: { name: "ops", password: "secret" },
      },
    ]);
  });

  it("a login answer without a token is a bad response", async () => {
    const { f } = fake([200, { expires_in: 5 }]);
    await expect(api(f).login("a", "b")).rejects.toMatchObject({ code: "bad_response" });
  });

  it("sends the operator token as a bearer token on every operator call", async () => {
    const { calls, f } = fake([200, { zones: [] }], [200, {}], [200, {}], [200, {}], [200, {}], [200, {}], [200, {}], [200, {}], [200, { entries: [] }], [200, { accounts: [] }]);
    const a = api(f);
    await a.zones();
    await a.rewind("z 1", 42);
    await a.startZone("{goblins, {0, 1}}");
    await a.stopZone("z1");
    await a.snapshotZone("z1");
    await a.kick("user/1");
    await a.disableAccount("u1");
    await a.enableAccount("u1");
    await a.audit();
    await a.accounts("bob & co");
    expect(calls.map((c) => [c.method, c.url.replace("http://h:4000", ""), c.body])).toEqual([
      ["GET", "/api/v1/operator/zones", undefined],
      ["POST", "/api/v1/operator/zones/z%201/rewind", { tick: 42 }],
      ["POST", "/api/v1/operator/zones/start", { id: "{goblins, {0, 1}}" }],
      ["POST", "/api/v1/operator/zones/z1/stop", {}],
      ["POST", "/api/v1/operator/zones/z1/snapshot", {}],
      ["POST", "/api/v1/operator/sessions/user%2F1/kick", {}],
      ["POST", "/api/v1/operator/accounts/u1/disable", {}],
      ["POST", "/api/v1/operator/accounts/u1/enable", {}],
      ["GET", "/api/v1/operator/audit?limit=100", undefined],
      ["GET", "/api/v1/operator/accounts?q=bob%20%26%20co", undefined],
    ]);
    for (const c of calls) expect(c.headers.authorization).toBe("Bearer tok");
  });

  it("the status is public: no token sent", async () => {
    const { calls, f } = fake([200, { sessions: 1, zones: [] }]);
    expect(await api(f).status()).toEqual({ sessions: 1, zones: [] });
    expect(calls[0]!.url).toBe("http://h:4000/api/v1/status");
    expect(calls[0]!.headers.authorization).toBeUndefined();
  });

  it("paths are built in one place", () => {
    expect(PATHS.historyState("a/b", 7)).toBe("/api/v1/operator/zones/a%2Fb/history/state?tick=7");
    expect(PATHS.entity("z", 12)).toBe("/api/v1/operator/zones/z/entities/12");
  });
});

describe("Api: answers", () => {
  it("reads zones tolerantly: missing fields are null, a region as an array or an object", async () => {
    const { f } = fake([
      200,
      {
        zones: [
          { ref: "r1", id: "{w, {0, 0}}", name: "w", world: "w", module: "Goblins", players: 2, entities: 10000, tick_p50_ms: 1.5, tick_p99_ms: 4, node: "n@h", debug: true, history: true, region: [0, 0, 500, 500] },
          { id: "solo", name: "solo", region: { x0: 0, y0: 0, x1: 10, y1: 20 } },
          "not a zone",
        ],
      },
    ]);
    const [a, b, ...rest] = await api(f).zones();
    expect(rest).toEqual([]);
    expect(a).toEqual({
      ref: "r1",
      id: "{w, {0, 0}}",
      name: "w",
      world: "w",
      module: "Goblins",
      players: 2,
      entities: 10000,
      tickP50Ms: 1.5,
      tickP99Ms: 4,
      node: "n@h",
      debug: true,
      history: true,
      running: null,
      region: { x0: 0, y0: 0, x1: 500, y1: 500 },
    });
    expect(b).toMatchObject({ ref: "solo", id: "solo", world: null, players: null, debug: false, history: false, region: { x0: 0, y0: 0, x1: 10, y1: 20 } });
    expect(toRect([0, 0, 1])).toBeNull();
    expect(toRect([0, "a", 1, 2])).toBeNull();
  });

  it("an entity's details, the history range and a tick's state", async () => {
    const { f } = fake(
      [200, { id: 5, template: "goblin", fields: { x: 1 }, owner: "u9", cell: 40, zone: "w/0,0", state: { hp: 3 } }],
      [200, { oldest: 100, newest: 400, tick_rate: 30 }],
      [200, { tick: 150, entities: [{ id: 1, template: "goblin", x: 1.5, y: 2.5 }, { id: 2 }, { id: 3, template: 0, x: 0, y: 0, kind: "warlord" }] }],
      [200, { oldest: 1 }],
    );
    const a = api(f);
    expect(await a.entity("z", 5)).toEqual({ id: 5, template: "goblin", fields: { x: 1 }, owner: "u9", cell: 40, zone: "w/0,0", state: { hp: 3 } });
    expect(await a.historyRange("z")).toEqual({ oldest: 100, newest: 400, tickRate: 30 });
    expect(await a.historyState("z", 150)).toEqual({
      tick: 150,
      entities: [
        { id: 1, template: "goblin", x: 1.5, y: 2.5, kind: null },
        { id: 3, template: 0, x: 0, y: 0, kind: "warlord" },
      ],
    });
    await expect(a.historyRange("z")).rejects.toMatchObject({ code: "bad_response" });
  });

  it("sessions, accounts and the audit log, with fields missing or named otherwise", async () => {
    const { f } = fake(
      [200, { sessions: [{ user_id: "u1", connected_at: 1700000000000, address: "1.2.3.4:5", bytes_out: 100, rtt_ms: 12.5, frame_jitter_ms: null, deferrals: 0, entity_id: 7, view_radius: 60, cells: [1, "x", 2] }, {}] }],
      [200, { accounts: [{ user_id: "u1", disabled: false, last_seen: "2026-01-01T00:00:00Z" }, { id: "u2", status: "disabled" }] }],
      [200, { account: { id: "u1", devices: [{ id: "dev-1" }, "dev-2"], email: "a@b.c", custom_id: null, disabled: true } }],
      [200, { entries: [{ at: 1, operator: "ops", action: "kick", target: { user: "u1" }, result: "ok", address: "::1" }, {}] }],
    );
    const a = api(f);
    const [s1, s2] = await a.sessions("z");
    expect(s1).toEqual({ userId: "u1", connectedAt: 1700000000000, address: "1.2.3.4:5", bytesOut: 100, rttMs: 12.5, frameJitterMs: null, deferrals: 0, entityId: 7, viewRadius: 60, cells: [1, 2] });
    expect(s2).toMatchObject({ userId: "", bytesOut: null, cells: null, entityId: null });
    const accounts = await a.accounts("u");
    expect(accounts.map((x) => [x.id, x.disabled, x.lastSeen])).toEqual([
      ["u1", false, "2026-01-01T00:00:00Z"],
      ["u2", true, null],
    ]);
    const one = await a.account("u1");
    expect([one.id, one.devices, one.email, one.customId, one.disabled]).toEqual(["u1", ["dev-1", "dev-2"], "a@b.c", null, true]);
    const audit = await a.audit(100);
    expect(audit[0]).toEqual({ at: 1, operator: "ops", action: "kick", target: '{"user":"u1"}', result: "ok", address: "::1" });
    expect(audit[1]).toEqual({ at: null, operator: null, action: null, target: null, result: null, address: null });
  });

  it("a history dump as a blob, with the file name the server suggests", async () => {
    const { calls, f } = fake([200, "BYTES", { "content-disposition": 'attachment; filename="zone-1.history"' }]);
    const r = await api(f).historyDump("z1");
    expect(await r.blob.text()).toBe("BYTES");
    expect(r.filename).toBe("zone-1.history");
    expect(calls[0]!.url).toBe("http://h:4000/api/v1/operator/zones/z1/history");
    expect(calls[0]!.headers.authorization).toBe("Bearer tok");
  });
});

describe("Api: errors", () => {
  it("the server's {error, message}: a 409 of a rewind keeps its message", async () => {
    const { f } = fake([409, { error: "not_debug", message: "zone z1 is not a debug zone" }]);
    const e = await api(f).rewind("z1", 3).catch((e: unknown) => e);
    expect(e).toBeInstanceOf(ApiError);
    expect(e).toMatchObject({ status: 409, code: "not_debug", message: "zone z1 is not a debug zone" });
  });

  it("a 401 anywhere tells onUnauthorized, then fails", async () => {
    const told: ApiError[] = [];
    const { f } = fake([401, { error: "invalid_token", message: "expired" }], [403, { error: "forbidden", message: "no" }]);
    const a = api(f, "old", (e) => told.push(e));
    await expect(a.zones()).rejects.toMatchObject({ status: 401, code: "invalid_token" });
    expect(told.map((e) => e.message)).toEqual(["expired"]);
    await expect(a.zones()).rejects.toMatchObject({ status: 403 });
    expect(told).toHaveLength(1);
  });

  it("a body that is not the error JSON: http_error with the status; a success that is not JSON: bad_response", async () => {
    const { f } = fake([502, "<html>bad gateway</html>"], [200, "not json"], [200, "[1, 2]"], [204, ""]);
    const a = api(f);
    await expect(a.zones()).rejects.toMatchObject({ status: 502, code: "http_error", message: "HTTP 502" });
    await expect(a.zones()).rejects.toMatchObject({ code: "bad_response" });
    await expect(a.zones()).rejects.toMatchObject({ code: "bad_response" });
    // An empty success reads as {}: no zones.
    expect(await a.zones()).toEqual([]);
  });

  it("no answer at all: status 0, network_error", async () => {
    const a = api(async () => {
      throw new TypeError("Failed to fetch");
    });
    await expect(a.zones()).rejects.toMatchObject({ status: 0, code: "network_error" });
  });

  it("without a token, no authorization header (the server answers 401)", async () => {
    const { calls, f } = fake([401, { error: "invalid_token", message: "missing" }]);
    await expect(api(f, null).zones()).rejects.toMatchObject({ status: 401 });
    expect(calls[0]!.headers.authorization).toBeUndefined();
  });
});

describe("TokenStore", () => {
  const storage = () => {
    const m = new Map<string, string>();
    return { m, s: { getItem: (k: string) => m.get(k) ?? null, setItem: (k: string, v: string) => void m.set(k, v), removeItem: (k: string) => void m.delete(k) } };
  };

  it("keeps the token until it expires, then forgets it", () => {
    let now = 1000;
    const { m, s } = storage();
    const t = new TokenStore(s, "k", () => now);
    expect(t.get()).toBeNull();
    t.set("abc", 60);
    expect(JSON.parse(m.get("k")!)).toEqual({ token: "abc", expiresAt: 61_000 });
    expect(new TokenStore(s, "k", () => now).get()).toBe("abc");
    now = 61_000;
    expect(t.get()).toBeNull();
    expect(m.has("k")).toBe(false);
  });

  it("a token without a lifetime lasts; clear forgets it; garbage reads as none", () => {
    const { m, s } = storage();
    const t = new TokenStore(s, "k");
    t.set("x", null);
    expect(t.get()).toBe("x");
    t.clear();
    expect(t.get()).toBeNull();
    m.set("k", "{oops");
    expect(t.get()).toBeNull();
  });

  it("without storage (or when it throws), the token lives in memory", () => {
    const throwing = {
      getItem: () => {
        throw new Error("denied");
      },
      setItem: () => {
        throw new Error("denied");
      },
      removeItem: () => {
        throw new Error("denied");
      },
    };
    for (const s of [null, throwing]) {
      const t = new TokenStore(s);
      t.set("m", 10);
      expect(t.get()).toBe("m");
      t.clear();
      expect(t.get()).toBeNull();
    }
  });
});
