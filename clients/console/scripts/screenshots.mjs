// Screenshots of the console for the documentation, from the real server:
//
//   node scripts/screenshots.mjs OUT_DIR [--zones 2x2] [--entities N]     (from clients/console)
//
// Starts the goblin example's server (examples/goblins, `mix goblins.server --port 0
// --no-persist`, an operator added to its fresh data directory first, as test/server.ts does),
// connects a few players (the SDK's sources, bundled here with esbuild, over `ws`), logs in to
// /console in headless Chromium (1280 x 800) and saves:
//
//   console-map.png       the live map of the zone (or world), zoomed in, the entity panel open on a clicked entity
//   console-history.png   the map in history mode (a past tick) with the scrubber
//   console-charts.png    the charts and the players' table
//   console-accounts.png  the Console tab, all of it (1280 wide, as tall as it is): an account
//                         searched, viewed and disabled; the zones, the sessions, the audit log
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { build } from "esbuild";
import { chromium } from "playwright-core";
import { WebSocket } from "ws";

const HERE = fileURLToPath(new URL("..", import.meta.url));
const GAME = resolve(HERE, "../../examples/goblins");
const CHROMIUM = "/usr/bin/chromium";
const CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"];
const OPERATOR = { name: "alice", password: "alice's password" };
const PLAYERS = 3;

const { values, positionals } = parseArgs({ allowPositionals: true, options: { zones: { type: "string", default: "1x1" }, entities: { type: "string", default: "2000" } } });
if (positionals.length !== 1 || !/^\d+x\d+$/.test(values.zones) || !/^[1-9]\d*$/.test(values.entities)) {
  console.error("usage: node scripts/screenshots.mjs OUT_DIR [--zones 2x2] [--entities N]");
  process.exit(2);
}
const out = resolve(positionals[0]);
mkdirSync(out, { recursive: true });
const world = values.zones !== "1x1";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(what, check, ms) {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(100);
  }
}

/** Runs a mix task in the goblin example; `input` on its stdin. */
function mix(args, input) {
  return new Promise((resolve, reject) => {
    const child = spawn("mix", args, { cwd: GAME, env: { ...process.env, MIX_ENV: "dev" }, stdio: ["pipe", "pipe", "pipe"] });
    let output = "";
    child.stdout.on("data", (c) => (output += c));
    child.stderr.on("data", (c) => (output += c));
    child.on("error", reject);
    child.on("exit", (code) => (code === 0 ? resolve() : reject(new Error(`mix ${args.join(" ")} exited with ${code}:\n${output}`))));
    child.stdin.end(input);
  });
}

/** The server, in its own process group: its base URL and a stop function. */
async function startServer(dataDir) {
  await mix(["overworld.operator.add", OPERATOR.name, "--data-dir", dataDir, "--iterations", "1000"], `${OPERATOR.password}\n`);
  const args = ["goblins.server", "--port", "0", "--zones", values.zones, "--entities", values.entities, "--data-dir", dataDir, "--no-persist", "--interval", "3600"];
  const child = spawn("mix", args, { cwd: GAME, env: { ...process.env, MIX_ENV: "dev" }, detached: true, stdio: ["ignore", "pipe", "pipe"] });
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once("exit", r));
    try {
      process.kill(-child.pid, "SIGTERM");
    } catch {
      return;
    }
    if ((await Promise.race([exited, sleep(5000).then(() => "timeout")])) === "timeout") process.kill(-child.pid, "SIGKILL");
  };
  let output = "";
  try {
    const base = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no 'listening on' line in 120 s:\n${output.slice(-4000)}`)), 120_000);
      const read = (c) => {
        output += c;
        const m = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(output);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]);
        }
      };
      child.stdout.on("data", read);
      child.stderr.on("data", read);
      child.on("exit", (code) => reject(new Error(`the server exited (${code}):\n${output.slice(-4000)}`)));
    });
    return { base, stop };
  } catch (e) {
    await stop();
    throw e;
  }
}

/** The SDK's sources bundled into one module and imported (its Client, for players over `ws`). */
async function loadSdk(dir) {
  const file = join(dir, "sdk.mjs");
  await build({ entryPoints: [resolve(HERE, "../typescript/src/index.ts")], bundle: true, format: "esm", platform: "node", outfile: file, logLevel: "warning" });
  return import(pathToFileURL(file).href);
}

async function save(page, name) {
  const file = join(out, name);
  await page.screenshot({ path: file });
  console.log(`${file} (${Math.round(statSync(file).size / 1024)} KB)`);
}

const dataDir = mkdtempSync(join(tmpdir(), "overworld-screenshots-"));
let server;
let browser;
const players = [];
try {
  // (All three at once; whatever started is stopped below even if another failed.)
  const [s, b, l] = await Promise.allSettled([
    startServer(dataDir),
    chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS }),
    loadSdk(dataDir),
  ]);
  if (s.status === "fulfilled") server = s.value;
  if (b.status === "fulfilled") browser = b.value;
  for (const r of [s, b, l]) if (r.status === "rejected") throw r.reason;
  const sdk = l.value;
  const base = server.base;
  console.log(`server at ${base}`);

  // A few players in the zone (blue on the map, rows of the players' table).
  const client = new sdk.Client({ baseUrl: base, WebSocket });
  const sessions = [];
  for (let i = 0; i < PLAYERS; i++) {
    const session = await client.authenticateDevice(`screenshot-player-${i}-${Date.now()}`);
    sessions.push(session);
    players.push(await client.connect(session, { zone: "goblins" }));
  }

  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.on("pageerror", (e) => console.error(`page error: ${e.message}`));
  await page.goto(`${base}/console?zone=goblins`);
  await page.getByTestId("login-name").fill(OPERATOR.name);
  await page.getByTestId("login-password").fill(OPERATOR.password);
  await page.getByTestId("login-submit").click();
  await until("the live map", () => page.evaluate(() => window.__overworldStats.mode === "live" && window.__overworldStats.entitiesDrawn > 0), 30_000);
  // The charts gather a point a second meanwhile.
  await sleep(world ? 3000 : 1500);

  // (a) Zoomed in on the middle, an entity with room around it clicked.
  const canvas = await page.getByTestId("map-canvas").boundingBox();
  await page.mouse.move(canvas.x + canvas.width / 2, canvas.y + canvas.height / 2);
  await page.mouse.wheel(0, -450);
  await sleep(300);
  const points = await page.evaluate(() => window.__overworldMap.onScreen(100000));
  const margin = 40;
  const inside = points.filter((p) => p.x > margin && p.y > margin && p.x < canvas.width - margin && p.y < canvas.height - margin);
  const lone = inside.find((p) => inside.every((q) => q === p || Math.hypot(q.x - p.x, q.y - p.y) > 16)) ?? inside[0];
  await page.mouse.click(canvas.x + lone.x, canvas.y + lone.y);
  await until("the entity's server-side state", async () => ((await page.getByTestId("entity-state").textContent()) ?? "").startsWith("{"), 10_000);
  await until("the entity's fields", async () => (await page.getByTestId("entity-field").count()) > 0, 10_000);
  await sleep(500);
  await save(page, "console-map.png");

  // (b) History: the entity panel closed, the whole zone, some ticks back.
  await page.getByTestId("entity-close").click();
  await page.getByTestId("fit-button").click();
  for (let i = 0; i < 5; i++) await page.getByTestId("scrub-back").click();
  const range = page.getByTestId("scrubber-range");
  await range.evaluate((el) => {
    el.value = String(Math.round(Number(el.min) + (Number(el.max) - Number(el.min)) * 0.4));
    el.dispatchEvent(new Event("input", { bubbles: true }));
  });
  await until("history mode", () => page.evaluate(() => window.__overworldStats.mode === "history"), 10_000);
  await sleep(800);
  await save(page, "console-history.png");
  await page.getByTestId("scrub-live").click();

  // (c) The charts (and the players' table below them), after some more seconds of polls.
  await sleep(15_000);
  await page.getByTestId("charts").evaluate((el) => el.scrollIntoView({ block: "start" }));
  await sleep(1200);
  await save(page, "console-charts.png");

  // (d) The Console tab: a player's account searched, viewed and disabled; the audit log.
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.getByTestId("tab-console").click();
  const victim = sessions[0];
  await page.getByTestId("account-search").fill(victim.userId.slice(0, 8));
  await page.getByTestId("account-search-button").click();
  await until("the search result", async () => (await page.getByTestId("account-row").count()) > 0, 10_000);
  await page.locator(`[data-testid="account-view"][data-account="${victim.userId}"]`).click();
  await until("the account", async () => (await page.getByTestId("account-id").textContent()) === victim.userId, 10_000);
  page.once("dialog", (d) => void d.accept());
  await page.getByTestId("account-disable").click();
  await until("the account disabled", async () => ((await page.getByTestId("account-status").textContent()) ?? "").includes("disabled"), 10_000);
  await until("the audit log", async () => (await page.getByTestId("audit-row").count()) > 0, 10_000);
  // The whole tab, down to the audit log: the tab scrolls inside the page (its height is the
  // viewport's), so the viewport is made as tall as its contents for this one.
  const tall = await page.evaluate(() => document.querySelector(".console-tab").scrollHeight + 41);
  await page.setViewportSize({ width: 1280, height: Math.min(Math.max(tall, 800), 1600) });
  await sleep(500);
  await save(page, "console-accounts.png");
} finally {
  for (const p of players) p.close();
  await browser?.close().catch(() => undefined);
  await server?.stop();
  rmSync(dataDir, { recursive: true, force: true });
}
