// The map's walls in a real browser (Debian's headless Chromium, driven by playwright-core)
// against the real server: the goblin example's `mix goblins.server --map rooms` (600 goblins
// in a maze of rooms, the zone's physics in Elixir). The map asks the zone's obstacles once and
// draws every wall the operator API lists, in the walls' colour, under the entities.
// Needs /usr/bin/chromium (`make deps-ts` installs it); skipped only when OVERWORLD_SKIP_BROWSER=1.
import { existsSync } from "node:fs";
import { chromium, type Browser, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CHROMIUM, CHROMIUM_ARGS, until } from "../../typescript/test/chromium.mjs";
import type { Obstacles } from "../src/api.js";
import { ALICE, START_TIMEOUT, TOKEN_KEY, api, loginFromNode, startConsoleServer, type RunningServer } from "./server.js";

const SKIP = process.env.OVERWORLD_SKIP_BROWSER === "1";
if (SKIP) console.warn("walls.browser.test.ts: skipped (OVERWORLD_SKIP_BROWSER=1)");

/** The walls' colour (src/render.ts). */
const WALL = [124, 114, 98];

/**
 * On the map's next frame, the canvas pixel (RGB) at the centre of each box and each circle,
 * found through the camera as src/walls.ts finds their pixels (edges rounded, at least a pixel).
 */
async function wallPixels(page: Page, walls: Obstacles): Promise<{ boxes: number[][]; circles: number[][] }> {
  return page.evaluate(
    (walls) =>
      new Promise<{ boxes: number[][]; circles: number[][] }>((resolve) => {
        const map = window.__overworldMap!;
        const stats = window.__overworldStats;
        const canvas = document.querySelector<HTMLCanvasElement>('[data-testid="map-canvas"]')!;
        const drawn = stats.frames;
        const read = () => {
          if (stats.frames === drawn) return void requestAnimationFrame(read);
          const w = canvas.width;
          const data = canvas.getContext("2d")!.getImageData(0, 0, w, canvas.height).data;
          const { cx, cy, zoom } = map.view();
          const sx = (x: number) => (x - cx) * zoom + w / 2;
          const sy = (y: number) => (y - cy) * zoom + canvas.height / 2;
          const at = (x: number, y: number) => {
            const o = (y * w + x) * 4;
            return [data[o]!, data[o + 1]!, data[o + 2]!];
          };
          const mid = (a: number, b: number) => {
            const lo = Math.round(a);
            return Math.floor((lo + Math.max(Math.round(b), lo + 1) - 1) / 2);
          };
          resolve({
            boxes: walls.boxes.map(([x0, y0, x1, y1]) => at(mid(sx(x0), sx(x1)), mid(sy(y0), sy(y1)))),
            circles: walls.circles.map(([x, y]) => at(Math.floor(sx(x)), Math.floor(sy(y)))),
          });
        };
        requestAnimationFrame(read);
      }),
    walls,
  );
}

describe.skipIf(SKIP)("the map's walls in headless Chromium against the real server (--map rooms)", () => {
  let server: RunningServer | undefined;
  let browser: Browser | undefined;

  beforeAll(async () => {
    if (!existsSync(CHROMIUM))
      throw new Error(`${CHROMIUM} is missing: run \`make deps-ts\` (installs Debian's chromium), or set OVERWORLD_SKIP_BROWSER=1 to skip this file`);
    const [s, b] = await Promise.allSettled([
      startConsoleServer("overworld-console-walls-", ["--entities", "600", "--map", "rooms", "--physics", "elixir"], [ALICE]),
      chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS }),
    ]);
    if (s.status === "fulfilled") server = s.value;
    if (b.status === "fulfilled") browser = b.value;
    for (const r of [s, b]) if (r.status === "rejected") throw r.reason;
  }, START_TIMEOUT + 20_000);

  afterAll(async () => {
    await browser?.close().catch(() => undefined);
    await server?.stop();
  }, 20_000);

  it("the map draws every wall of the zone's obstacles, in the walls' colour", async () => {
    const base = server!.baseUrl;
    // (The server's list from Node, not through the console's client: what the map must draw.)
    const token = await loginFromNode(base, ALICE);
    const { zones } = await api(base, "/api/v1/operator/zones", token);
    const zone = zones.find((z: { watch: string }) => z.watch === "goblins");
    const walls: Obstacles = await api(base, `/api/v1/operator/zones/${encodeURIComponent(zone.ref)}/obstacles`, token);
    expect(walls.boxes.length).toBeGreaterThan(10);
    expect(zone.obstacles).toBe(walls.boxes.length + walls.circles.length);

    // Logged in already: the token where the console keeps it.
    const context = await browser!.newContext({ viewport: { width: 1280, height: 800 } });
    await context.addInitScript(([key, value]) => sessionStorage.setItem(key, value), [TOKEN_KEY, JSON.stringify({ token, expiresAt: null })] as const);
    const page = await context.newPage();
    const log: string[] = [];
    page.on("pageerror", (e) => log.push(`pageerror: ${e.message}`));
    expect((await page.goto(`${base}/console?zone=goblins`))?.status()).toBe(200);

    // The whole world fitted: every wall on the canvas, drawn in the last frame.
    let drawn: unknown = null;
    await until(
      "the map to draw every wall",
      async () => {
        drawn = await page.evaluate(() => window.__overworldStats.mode === "live" && window.__overworldMap?.walls());
        return JSON.stringify(drawn) === JSON.stringify({ boxes: walls.boxes.length, circles: walls.circles.length });
      },
      15_000,
      () => `\ndrawn: ${JSON.stringify(drawn)}, the API's: ${walls.boxes.length} boxes, ${walls.circles.length} circles\n${log.join("\n")}`,
    );

    // The pixel at each wall's centre is the walls' colour (but where a goblin stands over it:
    // they are drawn on top; pushed out of the walls, few are).
    const px = await wallPixels(page, walls);
    const onWall = [...px.boxes, ...px.circles].filter(([r, g, b]) => r === WALL[0] && g === WALL[1] && b === WALL[2]).length;
    expect(onWall / (px.boxes.length + px.circles.length)).toBeGreaterThan(0.9);
    expect(log).toEqual([]);
    await context.close();
  }, 30_000);
});
