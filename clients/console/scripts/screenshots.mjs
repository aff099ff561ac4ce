// Screenshots of the console for the documentation, from the real server:
//
//   node scripts/screenshots.mjs OUT_DIR [--zones 2x2] [--entities N]     (from clients/console)
//
// Starts the goblin example's server as the browser tests do (test/server.ts, bundled here with
// esbuild: `mix goblins.server --port 0 --no-persist`, an operator added to its fresh data
// directory first),
// connects a few players (the SDK's sources, bundled here with esbuild, over `ws`), logs in to
// /console in headless Chromium (1280 x 800) and saves:
//
//   console-map.png       the live map of the zone (or world), zoomed in, the entity panel open on a clicked entity
//   console-history.png   the map in history mode (a past tick) with the scrubber
//   console-charts.png    the charts and the players' table
//   console-accounts.png  the Console tab, all of it (1280 wide, as tall as it is): an account
//                         searched, viewed and disabled; the zones, the sessions, the audit log
import { mkdirSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { build } from "esbuild";
import { chromium } from "playwright-core";
import { CHROMIUM, CHROMIUM_ARGS, sleep, until } from "../../typescript/test/chromium.mjs";
import { WebSocket } from "ws";

const HERE = fileURLToPath(new URL("..", import.meta.url));
const OPERATOR = { name: "alice", password: "alice's password", role: "operator" };
const PLAYERS = 3;

const { values, positionals } = parseArgs({ allowPositionals: true, options: { zones: { type: "string", default: "1x1" }, entities: { type: "string", default: "2000" } } });
if (positionals.length !== 1 || !/^\d+x\d+$/.test(values.zones) || !/^[1-9]\d*$/.test(values.entities)) {
  console.error("usage: node scripts/screenshots.mjs OUT_DIR [--zones 2x2] [--entities N]");
  process.exit(2);
}
const out = resolve(positionals[0]);
mkdirSync(out, { recursive: true });
const world = values.zones !== "1x1";

/**
 * A TypeScript module of this repository bundled by esbuild into `dir` and imported: the SDK's
 * sources (its Client, for players over `ws`), and test/server.ts (the server as the browser
 * tests start it; `import.meta.url` kept pointing at the SDK's test/server.ts, which finds the
 * repository from it).
 */
async function load(dir, name, entry) {
  const file = join(dir, name);
  const serverTs = resolve(HERE, "../typescript/test/server.ts");
  await build({
    entryPoints: [resolve(HERE, entry)],
    bundle: true,
    format: "esm",
    platform: "node",
    packages: "external",
    outfile: file,
    logLevel: "warning",
    define: { "import.meta.url": JSON.stringify(pathToFileURL(serverTs).href) },
  });
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
  const servers = await load(dataDir, "server.mjs", "test/server.ts");
  const [s, b, l] = await Promise.allSettled([
    servers.startConsoleServer("overworld-screenshots-", ["--zones", values.zones, "--entities", values.entities], [OPERATOR]),
    chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS }),
    load(dataDir, "sdk.mjs", "../typescript/src/index.ts"),
  ]);
  if (s.status === "fulfilled") server = s.value;
  if (b.status === "fulfilled") browser = b.value;
  for (const r of [s, b, l]) if (r.status === "rejected") throw r.reason;
  const sdk = l.value;
  const base = server.baseUrl;
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
