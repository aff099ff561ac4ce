// In a real browser (Debian's headless Chromium, driven by playwright-core) against the real
// server: the status page of `GET /`, and the SDK built to ES modules and imported by a page of
// another origin, with the browser's fetch (CORS) and native WebSocket.
// Needs /usr/bin/chromium (`make deps-ts` installs it); skipped only when OVERWORLD_SKIP_BROWSER=1.
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { createRequire } from "node:module";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { extname, join, normalize, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { chromium, type Browser, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CHROMIUM, CHROMIUM_ARGS, sleep, until } from "./chromium.mjs";
import { WebSocket } from "ws";
import { Client, type ZoneConnection } from "../src/index.js";
import { START_TIMEOUT, startServer, type RunningServer } from "./server.js";

const SKIP = process.env.OVERWORLD_SKIP_BROWSER === "1";
if (SKIP) console.warn("browser.test.ts: skipped (OVERWORLD_SKIP_BROWSER=1)");

const PACKAGE = fileURLToPath(new URL("..", import.meta.url));
const FIXTURE = fileURLToPath(new URL("./browser/", import.meta.url));

/** The SDK's build (`tsc -p tsconfig.build.json`, ESM), into a directory of its own. */
async function buildSdk(outDir: string): Promise<void> {
  const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
  try {
    await promisify(execFile)(process.execPath, [tsc, "-p", "tsconfig.build.json", "--outDir", outDir], { cwd: PACKAGE });
  } catch (e) {
    const { stdout, stderr } = e as { stdout?: string; stderr?: string };
    throw new Error(`the SDK's build failed:\n${stdout ?? ""}${stderr ?? ""}`);
  }
}

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".map": "application/json",
};

/** Serves the test page (test/browser/) on `/` and the SDK's build on `/sdk/`. */
function serveStatic(sdkDir: string): Promise<Server> {
  const server = createServer((req, res) => {
    const path = decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname);
    if (path === "/favicon.ico") {
      res.writeHead(204).end();
      return;
    }
    const [root, rel] = path.startsWith("/sdk/") ? [sdkDir, path.slice(5)] : [FIXTURE, path === "/" ? "index.html" : path.slice(1)];
    const file = normalize(join(root, rel));
    const type = TYPES[extname(file)];
    if (req.method !== "GET" || !file.startsWith(normalize(root + sep)) || type === undefined || !existsSync(file)) {
      res.writeHead(404, { "content-type": "text/plain" }).end("not found");
      return;
    }
    res.writeHead(200, { "content-type": type, "cache-control": "no-store" }).end(readFileSync(file));
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve(server));
  });
}

/** What a page logged and threw, for failure messages. */
function record(page: Page): string[] {
  const log: string[] = [];
  page.on("console", (m) => log.push(`console.${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => log.push(`pageerror: ${e.message}`));
  page.on("requestfailed", (r) => log.push(`requestfailed: ${r.url()} ${r.failure()?.errorText ?? ""}`));
  return log;
}
const tail = (log: string[]) => () => (log.length ? `\npage log:\n${log.slice(-20).join("\n")}` : "");

interface ZoneRow {
  zone: string;
  players: number;
  entities: number;
  tick: number;
  /** The ticks the percentiles rest on, and the p99 cell's text. */
  measured: number;
  p99: string;
  /** The ticks of the "now" columns (the last 150 to 300). */
  recent: number;
  /** A world's zone: its crossings per second (the text of the cell; "" for a lone zone). */
  crossings: string;
}

/** The status page's zones table. */
async function zoneRows(page: Page): Promise<ZoneRow[]> {
  const rows = await page.$$eval("#zones tr", (trs) => trs.map((tr) => [...tr.children].map((td) => td.textContent ?? "")));
  return rows.map((c) => ({
    zone: c[0] ?? "",
    players: Number(c[1]),
    entities: Number(c[2]),
    tick: Number(c[3]),
    measured: Number(c[4]),
    p99: c[6] ?? "",
    recent: Number(c[9]),
    crossings: c[12] ?? "",
  }));
}

/** The results window.runSdk (test/browser/page.js) answers. */
interface SdkRun {
  origin: string;
  nativeWebSocket: boolean;
  userAgent: string;
  entityId: number;
  tickRate: number;
  templates: string[];
  version: number;
  input: { name: string; fields: string[] } | null;
  protocol: { encoded: number[]; reader: number[]; version: number };
  connectError: { name: string; isConnectError: boolean; code: number; errorCode: number | null } | null;
  snapshots: number;
  goblins: number;
  tick: number;
  lastSeq: number;
  inputSeq: number;
  inputAck: number;
  x0: number;
  x1: number;
  sampled: number;
  sampledWithXY: number;
  sampledGoblins: number;
  firstSample: { id: number; x: number; y: number } | null;
  self: { x: number; y: number } | null;
  serverTime: number;
  rtt: number | null;
  refused: number;
  resyncs: number;
  state: string;
  errors: { code: number; message: string }[];
  closes: { code: number; reason: string; willReconnect: boolean }[];
}

describe.skipIf(SKIP)("in headless Chromium against the real server", () => {
  let game: RunningServer | undefined;
  // A world of 2 x 2 zones (500 goblins each) for the status page of a world.
  let world: RunningServer | undefined;
  let browser: Browser | undefined;
  let statics: Server | undefined;
  let staticUrl = "";
  let sdkDir = "";
  const open: ZoneConnection[] = [];

  beforeAll(async () => {
    if (!existsSync(CHROMIUM))
      throw new Error(`${CHROMIUM} is missing: run \`make deps-ts\` (installs Debian's chromium), or set OVERWORLD_SKIP_BROWSER=1 to skip this file`);
    sdkDir = mkdtempSync(join(tmpdir(), "overworld-sdk-"));
    // The three at once; whatever started is stopped in afterAll even if another failed.
    const [g, w, b, s, built] = await Promise.allSettled([
      startServer("overworld-browser-"),
      startServer("overworld-browser-world-", ["--zones", "2x2", "--entities", "500"]),
      chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS }),
      serveStatic(sdkDir),
      buildSdk(sdkDir),
    ]);
    if (g.status === "fulfilled") game = g.value;
    if (w.status === "fulfilled") world = w.value;
    if (b.status === "fulfilled") browser = b.value;
    if (s.status === "fulfilled") {
      statics = s.value;
      staticUrl = `http://127.0.0.1:${(statics.address() as AddressInfo).port}`;
    }
    for (const r of [g, w, b, s, built]) if (r.status === "rejected") throw r.reason;
  }, 3 * START_TIMEOUT + 10_000);

  afterAll(async () => {
    for (const c of open) c.close();
    await browser?.close().catch(() => undefined);
    await new Promise((r) => (statics ? statics.close(r) : r(undefined)));
    await game?.stop();
    await world?.stop();
    if (sdkDir) rmSync(sdkDir, { recursive: true, force: true });
  }, 20_000);

  it("the status page shows the goblins zone ticking, its 2000 entities, the sessions, and a player who connects", async () => {
    const page = await browser!.newPage();
    const log = record(page);
    const response = await page.goto(`${game!.baseUrl}/`);
    expect(response?.status()).toBe(200);
    expect(await page.title()).toBe("Overworld");

    const goblins = async () => (await zoneRows(page)).find((r) => r.zone === "goblins");
    await until("a goblins row in the zones table", async () => (await goblins()) !== undefined, 10_000, tail(log));
    const first = (await goblins())!;
    expect(first.entities).toBe(2000);
    expect(first.tick).toBeGreaterThan(0);
    // The percentiles say how many ticks they rest on; a young zone's p99 is not shown.
    expect(first.measured).toBeGreaterThan(0);
    // (Tick 0 is measured too, and the counters are read a moment apart: a tick more at most.)
    expect(first.measured).toBeLessThanOrEqual(first.tick + 1);
    expect(first.p99).toBe("needs 10,000 ticks");
    // "now": the last 150 to 300 ticks, never more.
    expect(first.recent).toBeGreaterThan(0);
    expect(first.recent).toBeLessThanOrEqual(Math.min(first.measured, 300));
    // The page polls every second: the tick it shows goes on.
    await until(`the shown tick to pass ${first.tick}`, async () => ((await goblins())?.tick ?? 0) > first.tick, 5_000, tail(log));
    expect(await page.textContent("#server")).toMatch(/^\d+ sessions, \d+ connections, /);
    // The snapshot rate in force (every tick on an idle server) and the refusals.
    expect(await page.textContent("#server")).toMatch(/a snapshot every 1 tick \(\d+ changes\), \d+ connections refused/);
    expect(await page.textContent("#error")).toBe("");

    // A player from Node (the SDK over `ws`): the page counts it.
    const client = new Client({ baseUrl: game!.baseUrl, WebSocket });
    const session = await client.authenticateDevice(`browser-status-${process.pid}-${Date.now()}`);
    const conn = await client.connect(session, { zone: "goblins" });
    open.push(conn);
    expect(conn.entityId).toBeGreaterThan(0);
    await until("the page to show a player in goblins", async () => ((await goblins())?.players ?? 0) >= 1, 5_000, tail(log));
    await until("the page to show a session", async () => /^[1-9]\d* sessions/.test((await page.textContent("#server")) ?? ""), 5_000, tail(log));
    conn.close();
    await page.close();
  }, 30_000);

  it("the status page of a world lists its four zones ticking, their entities and crossings per second", async () => {
    const page = await browser!.newPage();
    const log = record(page);
    expect((await page.goto(`${world!.baseUrl}/`))?.status()).toBe(200);

    const names = ["goblins/0,0", "goblins/0,1", "goblins/1,0", "goblins/1,1"];
    const rows = () => zoneRows(page);
    await until("the world's four zones in the zones table", async () => (await rows()).map((r) => r.zone).join() === names.join(), 10_000, tail(log));
    const first = await rows();
    for (const r of first) {
      expect(r.entities).toBeGreaterThan(0);
      expect(r.tick).toBeGreaterThan(0);
    }
    // Every zone ticks: the shown ticks go on.
    await until(
      "every zone's shown tick to go on",
      async () => (await rows()).every((r, i) => r.tick > first[i]!.tick),
      5_000,
      tail(log),
    );
    // Crossings per second, from two polls: a number in every zone's row once the page has them.
    await until("a crossings/s figure in every row", async () => (await rows()).every((r) => /^\d+\.\d$/.test(r.crossings)), 5_000, tail(log));
    // The world's line: its zones, its 2,000 goblins (one may be on its way between two zones
    // at a poll: read again) and its crossings per second.
    await until(
      "the world's line",
      async () => /^world goblins: 4 zones, 2,000 entities, \d+\.\d crossings\/s$/.test((await page.textContent("#crossings")) ?? ""),
      5_000,
      tail(log),
    );
    expect(await page.textContent("#error")).toBe("");
    await page.close();
  }, 30_000);

  it("the SDK, built to ES modules and imported by a page of another origin, plays with fetch and the native WebSocket", async () => {
    const page = await browser!.newPage();
    const log = record(page);
    await page.goto(`${staticUrl}/`);
    await until("the test page's module (and the SDK) to load", () => page.evaluate(() => (window as { sdkReady?: boolean }).sdkReady === true), 10_000, tail(log));

    const run = await page
      .evaluate((url) => (window as unknown as { runSdk(url: string): Promise<SdkRun> }).runSdk(url), game!.baseUrl)
      .catch((e: Error) => {
        throw new Error(`${e.message}${tail(log)()}`);
      });

    // Another origin than the game server's: authenticateDevice went through CORS.
    expect(run.origin).toBe(staticUrl);
    expect(run.origin).not.toBe(game!.baseUrl);
    expect(run.userAgent).toContain("Chrome/");
    expect(run.nativeWebSocket).toBe(true);
    expect(run.entityId).toBeGreaterThan(0);
    expect(run.tickRate).toBeGreaterThan(0);
    expect(run.templates).toEqual(expect.arrayContaining(["goblin", "player"]));
    expect(run.version).toBe(2);
    expect(run.input).toEqual({ name: "move", fields: ["mx", "my"] });
    // The subpath build (/sdk/protocol.js) loads in the page: encodeInput and BitReader from it.
    expect(run.protocol).toEqual({ encoded: [227, 127], reader: [100, 0], version: 2 });
    // A refused token: client.connect rejects with the main entry's ConnectError.
    expect(run.connectError).toEqual({ name: "ConnectError", isConnectError: true, code: 4003, errorCode: 3 });
    expect(run.snapshots).toBeGreaterThanOrEqual(3);
    expect(run.goblins).toBeGreaterThan(0);
    // Typed inputs acknowledged, and the player moved along x.
    expect(run.lastSeq).toBe(10);
    expect(run.inputSeq).toBe(10);
    expect(run.inputAck).toBeGreaterThanOrEqual(run.lastSeq);
    expect(run.x1).toBeGreaterThan(run.x0);
    // Interpolated entities with numeric positions, the player among them.
    expect(run.sampled).toBeGreaterThan(0);
    expect(run.sampledWithXY).toBe(run.sampled);
    expect(run.sampledGoblins).toBeGreaterThan(0);
    expect(run.firstSample).toMatchObject({ x: expect.any(Number), y: expect.any(Number) });
    expect(run.self).toMatchObject({ x: expect.any(Number), y: expect.any(Number) });
    expect(run.serverTime).toBeGreaterThan(0);
    expect(run.refused).toBe(0);
    expect(run.resyncs).toBe(0);
    expect(run.state).toBe("open");
    expect(run.errors).toEqual([]);
    expect(run.closes).toEqual([]);
    expect(log.filter((l) => l.startsWith("pageerror") || l.startsWith("requestfailed"))).toEqual([]);
    await page.close();
  }, 40_000);
});
