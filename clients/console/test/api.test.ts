import { describe, expect, it } from "vitest";
import { Api, OverworldHttpError, PATHS, heldCells, type FetchFn } from "../src/api.js";
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

const api = (f: FetchFn, token: string | null = "tok", onUnauthorized?: (e: OverworldHttpError) => void) =>
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
    const { calls, f } = fake([200, { zones: [] }], [200, {}], [200, {}], [200, {}], [200, {}], [200, {}], [200, {}], [200, {}], [200, { entries: [] }], [200, { accounts: [] }], [200, {}]);
    const a = api(f);
    await a.zones();
    await a.rewind("z 1", 42);
    await a.startZone("goblins");
    await a.stopZone("z1");
    await a.snapshotZone("z1");
    await a.kick("user/1");
    await a.disableAccount("u1");
    await a.enableAccount("u1");
    await a.audit();
    await a.accounts("bob & co");
    await a.logout();
    expect(calls.map((c) => [c.method, c.url.replace("http://h:4000", ""), c.body])).toEqual([
      ["GET", "/api/v1/operator/zones", undefined],
      ["POST", "/api/v1/operator/zones/z%201/rewind", { tick: 42 }],
      ["POST", "/api/v1/operator/zones/start", { name: "goblins" }],
      ["POST", "/api/v1/operator/zones/z1/stop", {}],
      ["POST", "/api/v1/operator/zones/z1/snapshot", {}],
      ["POST", "/api/v1/operator/sessions/user%2F1/kick", {}],
      ["POST", "/api/v1/operator/accounts/u1/disable", {}],
      ["POST", "/api/v1/operator/accounts/u1/enable", {}],
      ["GET", "/api/v1/operator/audit?limit=100", undefined],
      ["GET", "/api/v1/operator/accounts?q=bob%20%26%20co", undefined],
      ["POST", "/api/v1/operator/logout", {}],
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
  it("reads zones (ticks in µs shown in ms, the name to watch) and the stopped zones' names; missing fields are null", async () => {
    const { f } = fake([
      200,
      {
        zones: [
          // (Overworld.Operators.Zones.describe/2.)
          { ref: "r1", id: "{w, {0, 0}}", name: null, watch: "w", module: "Goblins", world: "w", node: "n@h", tick: 9, tick_rate: 30, players: 2, entities: 10000, tick_p50_us: 1500, tick_p99_us: 4000, tick_samples: 100, debug: true, history: 300, persistent: false, obstacles: 12 },
          { ref: "r2", id: "solo", name: "solo", history: 0 },
          "not a zone",
        ],
        stopped: ["arena", 7],
      },
    ]);
    const { zones, stopped } = await api(f).zones();
    expect(stopped).toEqual(["arena", "7"]);
    const [a, b, ...rest] = zones;
    expect(rest).toEqual([]);
    expect(a).toEqual({
      ref: "r1",
      id: "{w, {0, 0}}",
      name: null,
      watch: "w",
      world: "w",
      module: "Goblins",
      players: 2,
      entities: 10000,
      tickP50Ms: 1.5,
      tickP99Ms: 4,
      node: "n@h",
      debug: true,
      history: true,
      obstacles: 12,
    });
    expect(b).toMatchObject({ ref: "r2", id: "solo", name: "solo", watch: null, world: null, players: null, tickP50Ms: null, debug: false, history: false, obstacles: 0 });
  });

  it("a zone's obstacles: boxes with their corners in order, circles of a positive radius, anything else left out", async () => {
    const { calls, f } = fake(
      [
        200,
        {
          width: 240,
          height: 180.5,
          boxes: [[0, 0, 240, 1], [10.5, 20, 4, 2], [1, 2, 3], [1, "2", 3, 4], "wall", [0, 0, 1, 1, 9]],
          circles: [[50, 60, 2.5], [1, 1, 0], [1, 1, -2], [1, 1], null],
        },
      ],
      [200, {}],
      [200, { boxes: "none", circles: { cx: 1 } }],
    );
    const a = api(f);
    expect(await a.obstacles("w/0,0")).toEqual({
      width: 240,
      height: 180.5,
      boxes: [
        [0, 0, 240, 1],
        [4, 2, 10.5, 20],
        [0, 0, 1, 1],
      ],
      circles: [[50, 60, 2.5]],
    });
    // A zone without a map, or an answer without its fields: nothing to draw.
    const none = { width: null, height: null, boxes: [], circles: [] };
    expect(await a.obstacles("solo")).toEqual(none);
    expect(await a.obstacles("solo")).toEqual(none);
    expect(calls.map((c) => [c.method, c.url.replace("http://h:4000", ""), c.headers.authorization])).toEqual([
      ["GET", "/api/v1/operator/zones/w%2F0%2C0/obstacles", "Bearer tok"],
      ["GET", "/api/v1/operator/zones/solo/obstacles", "Bearer tok"],
      ["GET", "/api/v1/operator/zones/solo/obstacles", "Bearer tok"],
    ]);
  });

  it("an entity's details, the history range and a tick's state", async () => {
    const { f } = fake(
      [200, { id: 5, template: "goblin", kind: "warlord", fields: { x: 1 }, owner: "u9", cell: 40, zone: "w/0,0", state: { hp: 3 } }],
      [200, { oldest: 100, newest: 400, tick_rate: 30 }],
      [200, { tick: 150, entities: [{ id: 1, template: "goblin", x: 1.5, y: 2.5 }, { id: 2 }, { id: 3, template: 0, x: 0, y: 0, kind: "warlord" }] }],
      [200, { oldest: 1 }],
    );
    const a = api(f);
    expect(await a.entity("z", 5)).toEqual({ id: 5, template: "goblin", kind: "warlord", owner: "u9", cell: 40, zone: "w/0,0", state: { hp: 3 } });
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

  it("sessions, accounts and the audit log, with fields missing", async () => {
    const { f } = fake(
      // (Overworld.Operators.Sessions.of_zone/2.)
      [
        200,
        {
          sessions: [
            {
              user_id: "u1",
              entity: 7,
              connected: true,
              connected_at: 1700000000,
              address: "1.2.3.4:5",
              bytes_out: 100,
              rtt_ms: 0.052,
              frames: 40,
              frame_interval_ms: 33.3,
              frame_jitter_ms: 0.625,
              deferred: 3,
              node: "n@h",
            },
            {},
          ],
          total: 2,
        },
      ],
      // (Overworld.Accounts.account/1 and its last_seen_at.)
      [200, { accounts: [{ user_id: "u1", created_at: 1600000000, devices: [], email: null, custom_id: null, disabled: false, last_seen_at: 1700000000 }, { user_id: "u2", disabled: true }] }],
      [200, { user_id: "u1", created_at: 1600000000, devices: ["dev-1", "dev-2"], email: "a@b.c", custom_id: null, disabled: true, last_seen_at: null }],
      [200, { entries: [{ at: 1, operator: "ops", action: "kick", target: { user: "u1" }, result: "ok", address: "::1" }, {}] }],
    );
    const a = api(f);
    const [s1, s2] = await a.sessions("z");
    expect(s1).toEqual({
      userId: "u1",
      entity: 7,
      connected: true,
      connectedAt: 1700000000,
      address: "1.2.3.4:5",
      bytesOut: 100,
      rttMs: 0.052,
      frames: 40,
      frameIntervalMs: 33.3,
      frameJitterMs: 0.625,
      deferred: 3,
      node: "n@h",
    });
    expect(s2).toEqual({
      userId: "",
      entity: null,
      connected: null,
      connectedAt: null,
      address: null,
      bytesOut: null,
      rttMs: null,
      frames: null,
      frameIntervalMs: null,
      frameJitterMs: null,
      deferred: null,
      node: null,
    });
    const accounts = await a.accounts("u");
    expect(accounts.map((x) => [x.id, x.disabled, x.lastSeen])).toEqual([
      ["u1", false, 1700000000],
      ["u2", true, null],
    ]);
    const one = await a.account("u1");
    expect([one.id, one.createdAt, one.devices, one.email, one.customId, one.disabled, one.lastSeen]).toEqual(["u1", 1600000000, ["dev-1", "dev-2"], "a@b.c", null, true, null]);
    const audit = await a.audit(100);
    expect(audit[0]).toEqual({ at: 1, operator: "ops", action: "kick", target: '{"user":"u1"}', result: "ok", address: "::1" });
    expect(audit[1]).toEqual({ at: null, operator: null, action: null, target: null, result: null, address: null });
  });

  it("a session's interest (what its view holds), read field by field: held runs that are not runs are dropped", async () => {
    const { calls, f } = fake(
      // (Overworld.Operators.Sessions.interest/1, through Overworld.Web.Operator.Zones.)
      [
        200,
        {
          zone: "goblins",
          entity: 2001,
          x: 120.5,
          y: 80.25,
          radius_m: 90,
          leave_m: 114,
          held: [
            [3, 4, 9, 1200],
            [4, 2, 2, 1199],
            [5, 1, 3],
            [6, 5, 1, 10],
            ["7", 1, 2, 3],
            "junk",
            [8],
          ],
          pending: 2,
          budget: 65536,
        },
      ],
      [200, { held: "no" }],
      [409, { error: "no_view", message: "the session has sent no frame yet" }],
    );
    const a = api(f);
    const v = await a.interest("user/1");
    expect(calls[0]!.url).toBe("http://h:4000/api/v1/operator/sessions/user%2F1/interest");
    expect(calls[0]!.method).toBe("GET");
    expect(calls[0]!.headers.authorization).toBe("Bearer tok");
    expect(PATHS.interest("u 2")).toBe("/api/v1/operator/sessions/u%202/interest");
    expect(v).toEqual({
      zone: "goblins",
      entity: 2001,
      x: 120.5,
      y: 80.25,
      radiusM: 90,
      leaveM: 114,
      held: [
        { row: 3, first: 4, last: 9, tick: 1200 },
        { row: 4, first: 2, last: 2, tick: 1199 },
        { row: 5, first: 1, last: 3, tick: null },
      ],
      pending: 2,
      budget: 65536,
    });
    expect(heldCells(v.held)).toBe(6 + 1 + 3);
    expect(await a.interest("u")).toEqual({ zone: null, entity: null, x: null, y: null, radiusM: null, leaveM: null, held: [], pending: null, budget: null });
    await expect(a.interest("u")).rejects.toMatchObject({ status: 409, code: "no_view" });
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
    expect(e).toBeInstanceOf(OverworldHttpError);
    expect(e).toMatchObject({ status: 409, code: "not_debug", message: "zone z1 is not a debug zone" });
  });

  it("the SDK's error, with the seconds a 429 asks to wait (the header, else the message)", async () => {
    const { f } = fake(
      [429, { error: "rate_limited", message: "too many attempts: retry in 30 s" }, { "retry-after": "30" }],
      [429, { error: "busy", message: "the server is busy hashing passwords: retry in 2 s" }],
    );
    const a = api(f);
    const e = await a.login("ops", "x").catch((e: unknown) => e);
    expect(e).toBeInstanceOf(OverworldHttpError);
    expect(e).toMatchObject({ status: 429, code: "rate_limited", retryAfter: 30 });
    await expect(a.login("ops", "x")).rejects.toMatchObject({ code: "busy", retryAfter: 2 });
  });

  it("a 401 anywhere tells onUnauthorized, then fails", async () => {
    const told: OverworldHttpError[] = [];
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
    expect(await a.zones()).toEqual({ zones: [], stopped: [] });
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
