// The visualizer's frame rate in headless Chromium (Debian's /usr/bin/chromium, driven by
// playwright-core), against a running server: for `mix goblins.bench.visualizer`, which starts
// the server and reads this script's output. Logs in as an operator, watches a zone (or a
// world) on the live map, lets it warm up, then counts over the window:
//
//   node bench/fps.mjs BASE_URL ZONE OPERATOR PASSWORD WARMUP_S SECONDS
//
// Prints `measuring` when the window starts and, at its end, one line `result {json}` (or
// `failed: why`): the
// page's counters (window.__overworldStats) at both ends, the full frames per second
// (frames that drew every entity of the newest snapshot the page had), each whole second's
// full fps, the snapshots applied, and the CPU the browser's processes (and this script) used.
import { readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { CHROMIUM, CHROMIUM_ARGS } from "../../typescript/test/chromium.mjs";

const [base, zone, name, password, warmupS, seconds] = process.argv.slice(2);
if (!seconds) {
  console.error("usage: node bench/fps.mjs BASE_URL ZONE OPERATOR PASSWORD WARMUP_S SECONDS");
  process.exit(2);
}
const require = createRequire(import.meta.url);
const { chromium } = require("playwright-core");

const TICKS = 100; // clock ticks per second of /proc's times (getconf CLK_TCK on Linux)

// utime + stime (clock ticks) of `root` and every process below it.
function treeTicks(root) {
  const parent = new Map();
  const ticks = new Map();
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, "utf8");
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      parent.set(+d, +f[1]);
      ticks.set(+d, +f[11] + +f[12]);
    } catch {
      // Gone meanwhile.
    }
  }
  let sum = 0;
  for (const [pid, t] of ticks) {
    for (let p = pid; p > 1; p = parent.get(p) ?? 0) {
      if (p === root) {
        sum += t;
        break;
      }
    }
  }
  return sum;
}

// (A failure is said on a line of its own, for the task reading this output.)
const fail = (e) => {
  console.log(`failed: ${e instanceof Error ? e.message : String(e)}`.replaceAll("\n", " "));
  process.exit(1);
};
const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS }).catch(fail);
// (Chromium's processes are this script's descendants: the tree's time less this process's.)
const selfTicks = () => {
  const u = process.cpuUsage();
  return ((u.user + u.system) / 1e6) * TICKS;
};
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.on("pageerror", (e) => console.error(`page error: ${e.message}`));
  await page.goto(`${base}/console?zone=${encodeURIComponent(zone)}`);
  await page.getByTestId("login-name").fill(name);
  await page.getByTestId("login-password").fill(password);
  await page.getByTestId("login-submit").click();
  await page.waitForFunction(() => window.__overworldStats?.mode === "live" && window.__overworldStats.snapshots > 0, null, {
    timeout: 60_000,
  });
  await page.waitForTimeout(+warmupS * 1000);

  const read = () => page.evaluate(() => ({ ...window.__overworldStats }));
  const cpu0 = { tree: treeTicks(process.pid), self: process.cpuUsage(), selfTicks: selfTicks() };
  const t0 = performance.now();
  const s0 = await read();
  console.log("measuring");
  const perSecond = [];
  let last = s0;
  for (let i = 0; i < +seconds; i++) {
    await page.waitForTimeout(1000);
    const s = await read();
    perSecond.push({ fullFrames: s.fullFrames - last.fullFrames, frames: s.frames - last.frames, snapshots: s.snapshots - last.snapshots, entitiesDrawn: s.entitiesDrawn, applyMs: s.applyMs, sceneMs: s.sceneMs, frameMs: s.frameMs });
    last = s;
  }
  const s1 = last;
  const elapsed = (performance.now() - t0) / 1000;
  const self = process.cpuUsage(cpu0.self);
  const browserCpu = (treeTicks(process.pid) - cpu0.tree - (selfTicks() - cpu0.selfTicks)) / TICKS;
  console.log(
    "result " +
      JSON.stringify({
        seconds: elapsed,
        start: s0,
        end: s1,
        full_fps: (s1.fullFrames - s0.fullFrames) / elapsed,
        fps: (s1.frames - s0.frames) / elapsed,
        snapshots_per_second: (s1.snapshots - s0.snapshots) / elapsed,
        per_second: perSecond,
        browser_cpu_percent: (100 * browserCpu) / elapsed,
        script_cpu_percent: (100 * (self.user + self.system)) / 1e6 / elapsed,
        chromium: browser.version(),
      }),
  );
} catch (e) {
  await browser.close();
  fail(e);
}
await browser.close();
