// The console (/console) in a real browser (Debian's headless Chromium, driven by
// playwright-core) against the real server: the goblin example's `mix goblins.server` with
// 2000 goblins in one zone and two operators (alice, an operator; victor, a viewer). The map
// draws every entity where the server has it (live, and at a past tick of the history), a click
// shows an entity's fields and server-side state, the charts move, the players' table shows two
// connected players' figures and the map their views (circles, the selected one's held cells
// as the operator API answers them), an operator disables a connected player's account (the
// player is closed with 4003, the audit log shows it), a player's token is refused, logout
// revokes the token, a viewer cannot disable.
// Needs /usr/bin/chromium (`make deps-ts` installs it); skipped only when OVERWORLD_SKIP_BROWSER=1.
import { existsSync } from "node:fs";
import { chromium, type Browser, type BrowserContext, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CHROMIUM, CHROMIUM_ARGS, sleep, until } from "../../typescript/test/chromium.mjs";
import { WebSocket } from "ws";
import { Client, type CloseInfo, type Session, type ZoneConnection } from "../../typescript/src/index.js";
import { ALICE, START_TIMEOUT, TOKEN_KEY, VICTOR, api, call, loginFromNode, startConsoleServer, type Operator, type RunningServer } from "./server.js";

const SKIP = process.env.OVERWORLD_SKIP_BROWSER === "1";
if (SKIP) console.warn("browser.test.ts: skipped (OVERWORLD_SKIP_BROWSER=1)");

const VIEWPORT = { width: 1280, height: 800 };
const ENTITIES = 2000;
/** The map's colours of the goblin world's kinds (src/colors.ts), and what is not an entity (src/render.ts). */
const GOBLIN = [95, 191, 74];
const WARLORD = [232, 84, 58];
const WORLD = [28, 32, 40];
const NOT_ENTITIES = [[17, 19, 24], WORLD, [44, 50, 62]];
/** The goblin world's cells (metres: examples/goblins/lib/goblins.ex, `cell_size: 12`). */
const CELL = 12;


/** What a page logged and threw, for failure messages. */
function record(page: Page): string[] {
  const log: string[] = [];
  page.on("console", (m) => log.push(`console.${m.type()}: ${m.text()}`));
  page.on("pageerror", (e) => log.push(`pageerror: ${e.message}`));
  page.on("requestfailed", (r) => log.push(`requestfailed: ${r.url()} ${r.failure()?.errorText ?? ""}`));
  return log;
}
const tail = (log: string[]) => () => (log.length ? `\npage log:\n${log.slice(-20).join("\n")}` : "");

interface Point {
  id: number;
  x: number;
  y: number;
}

/** One frame of the map, read at once in the page: the scene's entities on the canvas, the camera, the pixels under them. */
interface Frame {
  mode: string;
  tick: number;
  drawn: number;
  points: Point[];
  view: { cx: number; cy: number; zoom: number };
  width: number;
  height: number;
  /** The canvas pixel (RGB) under each point. */
  pixels: number[][];
}

/**
 * The map's next frame, read in an animation frame callback right after the map drew it: the
 * scene a scrubber step or a snapshot brought is drawn on the canvas by then (the map draws in
 * its own callback, asked for before this one).
 */
async function frame(page: Page): Promise<Frame> {
  return page.evaluate(
    () =>
      new Promise<Frame>((resolve) => {
        const map = window.__overworldMap!;
        const stats = window.__overworldStats;
        const canvas = document.querySelector<HTMLCanvasElement>('[data-testid="map-canvas"]')!;
        const label = document.querySelector('[data-testid="scrubber-tick"]')!;
        const drawn = stats.frames;
        const read = () => {
          if (stats.frames === drawn) return void requestAnimationFrame(read);
          const points = map.onScreen(1_000_000);
          const image = canvas.getContext("2d")!.getImageData(0, 0, canvas.width, canvas.height).data;
          // (src/render.ts draws a square of `side` pixels from (x - half, y - half), rounded
          // down: this pixel is in it whichever way the rounding of the position's arithmetic goes.)
          const side = Math.min(12, Math.max(2, Math.round(map.view().zoom * 0.8)));
          const half = side >> 1;
          const pixels = points.map((p) => {
            const o = (Math.round(p.y - half) * canvas.width + Math.round(p.x - half)) * 4;
            return [image[o]!, image[o + 1]!, image[o + 2]!];
          });
          resolve({
            mode: stats.mode,
            tick: stats.mode === "history" ? Number(/^tick (\d+)/.exec(label.textContent ?? "")?.[1]) : stats.sceneTick,
            drawn: stats.entitiesDrawn,
            points,
            view: map.view(),
            width: canvas.width,
            height: canvas.height,
            pixels,
          });
        };
        requestAnimationFrame(read);
      }),
  );
}

/**
 * The most common colour (RGB) inside each of some grid cells `[row, col]` of `cell` metres on
 * the map's next frame (2 pixels in from the cell's edges: no grid line).
 */
async function cellModes(page: Page, cells: Array<[number, number]>, cell: number): Promise<number[][]> {
  return page.evaluate(
    ([cells, cell]) =>
      new Promise<number[][]>((resolve) => {
        const map = window.__overworldMap!;
        const stats = window.__overworldStats;
        const canvas = document.querySelector<HTMLCanvasElement>('[data-testid="map-canvas"]')!;
        const drawn = stats.frames;
        const read = () => {
          if (stats.frames === drawn) return void requestAnimationFrame(read);
          const w = canvas.width;
          const h = canvas.height;
          const data = canvas.getContext("2d")!.getImageData(0, 0, w, h).data;
          const { cx, cy, zoom } = map.view();
          const sx = (x: number) => Math.round((x - cx) * zoom + w / 2);
          const sy = (y: number) => Math.round((y - cy) * zoom + h / 2);
          resolve(
            cells.map(([row, col]) => {
              const counts = new Map<string, number>();
              for (let y = Math.max(0, sy(row * cell) + 2); y < Math.min(h, sy((row + 1) * cell) - 2); y++)
                for (let x = Math.max(0, sx(col * cell) + 2); x < Math.min(w, sx((col + 1) * cell) - 2); x++) {
                  const o = (y * w + x) * 4;
                  const k = `${data[o]},${data[o + 1]},${data[o + 2]}`;
                  counts.set(k, (counts.get(k) ?? 0) + 1);
                }
              let best = "";
              let n = 0;
              for (const [k, c] of counts) if (c > n) [best, n] = [k, c];
              return best === "" ? [] : best.split(",").map(Number);
            }),
          );
        };
        requestAnimationFrame(read);
      }),
    [cells, cell] as const,
  );
}

interface ViewPlayer {
  userId: string;
  entity: number;
}

interface HistoryEntity {
  id: number;
  template: string;
  kind: string;
  x: number;
  y: number;
}

/** The indexes of the points with no other within `px` pixels (their squares overlap no other's). */
function alone(points: Point[], px: number): number[] {
  const out: number[] = [];
  points.forEach((p, i) => {
    if (points.every((q, j) => j === i || Math.abs(q.x - p.x) > px || Math.abs(q.y - p.y) > px)) out.push(i);
  });
  return out;
}

describe.skipIf(SKIP)("the console in headless Chromium against the real server", () => {
  let server: RunningServer | undefined;
  let browser: Browser | undefined;
  let base = "";
  let ref = "";
  /** alice's token, logged in from Node for the API calls the page's are compared with. */
  let token = "";
  // alice's page: the map tests, then the console tab; logged out at the end.
  let context: BrowserContext | undefined;
  let page: Page;
  let log: string[] = [];
  const open: ZoneConnection[] = [];
  /** The players connected for the players' table and views tests. */
  const players: ViewPlayer[] = [];

  /** The zone's entities after tick `tick` (the operator API's history/state, as Zone.state_at/2 replays them). */
  async function historyAt(tick: number): Promise<Map<number, HistoryEntity>> {
    const r = await api(base, `/api/v1/operator/zones/${ref}/history/state?tick=${tick}`, token);
    expect(r.tick).toBe(tick);
    return new Map((r.entities as HistoryEntity[]).map((e) => [e.id, e]));
  }

  /** Fills the login form and submits it; waits for the app (the tabs) to show. */
  async function logIn(p: Page, op: Operator, l: string[]): Promise<void> {
    await p.getByTestId("login-name").fill(op.name);
    await p.getByTestId("login-password").fill(op.password);
    await p.getByTestId("login-submit").click();
    await p.getByTestId("tab-console").waitFor({ timeout: 10_000 }).catch((e: Error) => {
      throw new Error(`${e.message}${tail(l)()}`);
    });
  }

  /** A player of the goblin world from Node (the SDK over `ws`), optionally connected to the zone. */
  async function player(name: string): Promise<{ client: Client; session: Session; device: string }> {
    const client = new Client({ baseUrl: base, WebSocket });
    const device = `console-${name}-${process.pid}-${Date.now()}`;
    return { client, session: await client.authenticateDevice(device), device };
  }

  /** The map's entities compared with the server's at the frame's tick: every one drawn where the server has it. */
  function expectDrawnAt(f: Frame, server: Map<number, HistoryEntity>, tolerance: number): void {
    expect(f.drawn).toBe(server.size);
    // The whole zone is in view (fitted): every entity is on the canvas.
    expect(f.points.length).toBe(server.size);
    const metres = (p: Point) => ({ x: (p.x - f.width / 2) / f.view.zoom + f.view.cx, y: (p.y - f.height / 2) / f.view.zoom + f.view.cy });
    let worst = 0;
    const seen = new Set<number>();
    for (const p of f.points) {
      const e = server.get(p.id);
      if (e === undefined) throw new Error(`entity ${p.id} is drawn but the server has no such entity at tick ${f.tick}`);
      seen.add(p.id);
      const m = metres(p);
      worst = Math.max(worst, Math.abs(m.x - e.x), Math.abs(m.y - e.y));
    }
    expect(seen.size).toBe(server.size);
    expect(worst).toBeLessThanOrEqual(tolerance);
    // The pixels under the entities are the goblin world's colours, never the background's;
    // an entity whose square overlaps no other's is its kind's colour.
    expect(f.pixels.length).toBe(server.size);
    for (const px of f.pixels) {
      expect(NOT_ENTITIES).not.toContainEqual(px);
      expect([GOBLIN, WARLORD]).toContainEqual(px);
    }
    // (src/render.ts: a square of 2 to 12 pixels a side, by the zoom.)
    const side = Math.min(12, Math.max(2, Math.round(f.view.zoom * 0.8)));
    const lone = alone(f.points, side + 1);
    expect(lone.length).toBeGreaterThan(100);
    const kinds = new Set<string>();
    for (const i of lone) {
      const kind = server.get(f.points[i]!.id)!.kind;
      kinds.add(kind);
      expect([f.points[i]!.id, kind, f.pixels[i]]).toEqual([f.points[i]!.id, kind, kind === "warlord" ? WARLORD : GOBLIN]);
    }
    expect([...kinds].sort()).toEqual(["goblin", "warlord"]);
  }

  beforeAll(async () => {
    if (!existsSync(CHROMIUM))
      throw new Error(`${CHROMIUM} is missing: run \`make deps-ts\` (installs Debian's chromium), or set OVERWORLD_SKIP_BROWSER=1 to skip this file`);
    const [s, b] = await Promise.allSettled([
      startConsoleServer("overworld-console-browser-", ["--entities", String(ENTITIES)]),
      chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS }),
    ]);
    if (s.status === "fulfilled") server = s.value;
    if (b.status === "fulfilled") browser = b.value;
    for (const r of [s, b]) if (r.status === "rejected") throw r.reason;
    base = server!.baseUrl;
    token = await loginFromNode(base, ALICE);
    const { zones } = await api(base, "/api/v1/operator/zones", token);
    const zone = zones.find((z: { name: string }) => z.name === "goblins");
    expect(zone).toMatchObject({ watch: "goblins", history: 300 });
    ref = zone.ref;
    context = await browser!.newContext({ viewport: VIEWPORT });
    page = await context.newPage();
    log = record(page);
  }, START_TIMEOUT + 20_000);

  afterAll(async () => {
    for (const c of open) c.close();
    await browser?.close().catch(() => undefined);
    await server?.stop();
  }, 20_000);

  it("after the login, the map of goblins draws all 2000 entities where the server has them at the tick shown", async () => {
    expect((await page.goto(`${base}/console?zone=goblins`))?.status()).toBe(200);
    // No token yet: the login form.
    await page.getByTestId("login-form").waitFor({ timeout: 10_000 });
    await logIn(page, ALICE, log);
    expect(await page.evaluate((k) => sessionStorage.getItem(k) !== null, TOKEN_KEY)).toBe(true);

    const { zones } = await api(base, "/api/v1/operator/zones", token);
    expect(zones.find((z: { ref: string }) => z.ref === ref).entities).toBe(ENTITIES);
    await until(
      `the live map to draw ${ENTITIES} entities`,
      () => page.evaluate((n) => window.__overworldStats.mode === "live" && window.__overworldStats.entitiesDrawn === n, ENTITIES),
      15_000,
      tail(log),
    );
    const stats = await page.evaluate(() => ({ ...window.__overworldStats }));
    expect(stats).toMatchObject({ zone: "goblins", decoder: "worker", entitiesVisible: ENTITIES });
    expect(stats.fullFrames).toBeGreaterThan(0);

    // A live frame: the scene of the snapshot of tick T, against the server's entities after
    // tick T (positions go over the wire at 1/64 m).
    const f = await frame(page);
    expect(f.mode).toBe("live");
    expect(f.tick).toBeGreaterThan(0);
    expectDrawnAt(f, await historyAt(f.tick), 1 / 64 + 1e-3);
  }, 30_000);

  it("a click on an entity shows its id, its fields and its server-side state", async () => {
    // Zoomed in (the wheel, at the canvas's centre): 2000 goblins fitted are a few pixels apart.
    const box = (await page.getByTestId("map-canvas").boundingBox())!;
    const zoom = (await page.evaluate(() => window.__overworldMap!.view())).zoom;
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    await page.mouse.wheel(0, -500);
    await page.mouse.wheel(0, -500);
    await until("the map to zoom in", async () => (await page.evaluate(() => window.__overworldMap!.view())).zoom > zoom * 3, 5_000, tail(log));
    // An entity with no other within 24 pixels, so the click (nearest within 8) is its even if it moves a little.
    const f = await frame(page);
    const lone = f.points.find((p) => f.points.every((q) => q === p || Math.hypot(q.x - p.x, q.y - p.y) > 24));
    expect(lone).toBeDefined();
    await page.mouse.click(box.x + lone!.x, box.y + lone!.y);

    const panel = page.getByTestId("entity-panel");
    await panel.waitFor({ state: "visible", timeout: 5_000 });
    await until(`the panel to show #${lone!.id}`, async () => (await panel.getByTestId("entity-id").textContent()) === `#${lone!.id}`, 5_000, tail(log));
    // Its fields as the goblin template decodes them.
    const fields = panel.getByTestId("entity-field");
    await until("the entity's decoded fields", async () => (await fields.count()) === 5, 5_000, tail(log));
    const values = Object.fromEntries(
      await fields.evaluateAll((rows) => rows.map((r) => [(r as HTMLElement).dataset.field!, r.querySelector("td")!.textContent ?? ""])),
    );
    expect(Object.keys(values).sort()).toEqual(["heading", "kind", "state", "x", "y"]);
    expect(await panel.getByTestId("entity-zone").textContent()).toBe("zone goblins");

    // Its server-side state (GET zones/:ref/entities/:id) as the operator API answers it.
    const state = panel.getByTestId("entity-state");
    await until("the server-side state", async () => ((await state.textContent()) ?? "").startsWith("{"), 5_000, tail(log));
    const shown = JSON.parse((await state.textContent())!);
    const served = await api(base, `/api/v1/operator/zones/${ref}/entities/${lone!.id}`, token);
    expect(served.id).toBe(lone!.id);
    expect(shown).toMatchObject({ zone: served.zone, template: served.template, kind: served.kind, owner: served.owner });
    // Its template as the handshake names it, and the kind its wire field decodes to, are the server's;
    // it is where the server has it (it may walk a little meanwhile).
    expect(served.template).toBe("goblin");
    expect(await panel.getByTestId("entity-template").textContent()).toBe(served.template);
    expect(values.kind).toBe(served.kind);
    expect(Math.abs(Number(values.x) - served.state.x)).toBeLessThan(3);
    expect(Math.abs(Number(values.y) - served.state.y)).toBeLessThan(3);
    expect(Math.abs(shown.state.x - served.state.x)).toBeLessThan(3);
    expect(typeof shown.state.rng).toBe("number");

    await panel.getByTestId("entity-close").click();
    await panel.waitFor({ state: "hidden", timeout: 5_000 });
    // Fit: the whole zone in view again.
    await page.getByTestId("fit-button").click();
    await until("the zoom fitted again", async () => (await page.evaluate(() => window.__overworldMap!.view())).zoom === zoom, 5_000, tail(log));
  }, 20_000);

  it("the scrubber shows a past tick: every entity drawn at its position of history/state (Zone.state_at/2)", async () => {
    const scrubber = page.getByTestId("scrubber");
    await scrubber.waitFor({ state: "visible", timeout: 5_000 });
    const label = page.getByTestId("scrubber-tick");
    const shownTick = async () => Number(/^tick (\d+)/.exec((await label.textContent()) ?? "")?.[1] ?? NaN);

    // One tick back from the newest kept, twice, then one forward: the ticks step by one.
    await page.getByTestId("scrub-back").click();
    await until("history mode", () => page.evaluate(() => window.__overworldStats.mode === "history"), 5_000, tail(log));
    await until("a tick in the scrubber's label", async () => Number.isInteger(await shownTick()), 5_000, tail(log));
    const first = await shownTick();
    await page.getByTestId("scrub-back").click();
    await until(`tick ${first - 1}`, async () => (await shownTick()) === first - 1, 5_000, tail(log));
    await page.getByTestId("scrub-forward").click();
    await until(`tick ${first}`, async () => (await shownTick()) === first, 5_000, tail(log));

    // The page stays at that tick while the zone goes on: what it draws is history/state's.
    const f = await frame(page);
    expect(f.mode).toBe("history");
    expect(f.tick).toBe(first);
    const past = await historyAt(first);
    expect(past.size).toBe(ENTITIES);
    expectDrawnAt(f, past, 1e-3);
    await sleep(300);
    const again = await frame(page);
    expect(again.tick).toBe(first);
    expect(again.points).toEqual(f.points);

    // The slider, moved to the middle of the kept ticks.
    const mid = await page.getByTestId("scrubber-range").evaluate((el) => {
      const input = el as HTMLInputElement;
      const t = Math.round((Number(input.min) + Number(input.max)) / 2);
      input.value = String(t);
      input.dispatchEvent(new Event("input", { bubbles: true }));
      return t;
    });
    expect(mid).toBeLessThan(first);
    await until(`tick ${mid}`, async () => (await shownTick()) === mid, 5_000, tail(log));
    const g = await frame(page);
    expect(g.tick).toBe(mid);
    expectDrawnAt(g, await historyAt(mid), 1e-3);
    // The goblins wander: the two ticks' scenes differ.
    expect(g.points).not.toEqual(f.points);

    await page.getByTestId("scrub-live").click();
    await until("live mode again", () => page.evaluate(() => window.__overworldStats.mode === "live"), 5_000, tail(log));
    expect(await label.textContent()).toMatch(/^live/);
  }, 30_000);

  it("the charts update as the server's status is polled", async () => {
    const ids = ["chart-tick", "chart-entities", "chart-sessions", "chart-bytes"];
    const pictures = () => page.evaluate((ids) => ids.map((id) => document.querySelector<HTMLCanvasElement>(`[data-testid="${id}"]`)!.toDataURL()), ids);
    const before = await pictures();
    // Drawn: not a blank canvas of one colour.
    const blank = await page.evaluate(() => {
      const c = document.createElement("canvas");
      const o = document.querySelector<HTMLCanvasElement>('[data-testid="chart-tick"]')!;
      c.width = o.width;
      c.height = o.height;
      const ctx = c.getContext("2d")!;
      ctx.fillStyle = "#161a21";
      ctx.fillRect(0, 0, c.width, c.height);
      return c.toDataURL();
    });
    for (const p of before) expect(p).not.toBe(blank);
    // Over a few seconds (a poll a second), the tick and bytes charts change.
    await until(
      "the tick and bytes-out charts to change",
      async () => {
        const now = await pictures();
        return now[0] !== before[0] && now[3] !== before[3];
      },
      6_000,
      tail(log),
    );
  }, 15_000);

  it("the players' table: each player's bandwidth, RTT, frame interval, jitter and deferrals, updated every 2 s", async () => {
    // Two players in the zone (the SDK in Node), kept for the views test.
    for (const name of ["view-a", "view-b"]) {
      const { client, session } = await player(name);
      const conn = await client.connect(session, { zone: "goblins" });
      open.push(conn);
      expect(conn.entityId).toBeGreaterThan(0);
      players.push({ userId: session.userId, entity: conn.entityId });
    }
    const users = players.map((p) => p.userId).sort();
    const rows = page.getByTestId("player-row");
    const figures = () =>
      rows.evaluateAll((rs) =>
        rs.map((r) => {
          const cells = [...r.querySelectorAll<HTMLElement>("td[data-col]")];
          return {
            user: (r as HTMLElement).dataset.user!,
            value: Object.fromEntries(cells.map((td) => [td.dataset.col!, td.dataset.value === "" || td.dataset.value === undefined ? NaN : Number(td.dataset.value)])),
            text: Object.fromEntries(cells.map((td) => [td.dataset.col!, td.textContent ?? ""])),
          };
        }),
      );
    type Figures = Awaited<ReturnType<typeof figures>>;
    const numeric = (f: Figures) =>
      f.length === 2 &&
      f.every(
        (r) =>
          r.value.bandwidth! > 0 &&
          r.value.rtt! >= 0 &&
          r.value.interval! > 0 &&
          r.value.jitter! >= 0 &&
          r.value.deferred! >= 0 &&
          r.value["deferred-rate"]! >= 0 &&
          r.value.bytes! > 0,
      );
    let first: Figures = [];
    // (Two polls of the sessions, 2 s apart, give a bandwidth.)
    await until(
      "both players in the table with numeric figures",
      async () => numeric((first = await figures())),
      10_000,
      () => `\nrows: ${JSON.stringify(first)}${tail(log)()}`,
    );
    expect(first.map((r) => r.user).sort()).toEqual(users);
    expect(await page.getByTestId("player-table").count()).toBe(1);
    for (const r of first) {
      expect(r.value.entity).toBe(players.find((p) => p.userId === r.user)!.entity);
      // Shown as numbers with their units.
      expect(r.text.bandwidth).toMatch(/^\d+(\.\d)? (B|KiB|MiB)\/s$/);
      expect(r.text.rtt).toMatch(/^\d+(\.\d+)? ms$/);
      expect(r.text.interval).toMatch(/^\d+(\.\d+)? ms$/);
      expect(r.text.jitter).toMatch(/^\d+(\.\d+)? ms$/);
      // The server's frames are a tick apart (30 Hz), give or take.
      expect(r.value.interval!).toBeGreaterThan(5);
      expect(r.value.interval!).toBeLessThan(500);
    }
    // What the operator API answers is what the table shows (sent totals only grow).
    const { sessions } = await api(base, `/api/v1/operator/zones/${ref}/sessions`, token);
    for (const r of first) {
      const s = sessions.find((x: { user_id: string }) => x.user_id === r.user);
      expect(s.bytes_out).toBeGreaterThanOrEqual(r.value.bytes!);
      expect(s.frames).toBeGreaterThan(0);
      expect(typeof s.rtt_ms).toBe("number");
    }
    // The next polls: the totals have grown, the figures are still numbers.
    let next: Figures = [];
    await until(
      "the table's figures to update",
      async () => {
        next = await figures();
        return numeric(next) && next.every((r) => r.value.bytes! > first.find((f) => f.user === r.user)!.value.bytes!);
      },
      8_000,
      () => `\nrows: ${JSON.stringify(next)}${tail(log)()}`,
    );
  }, 30_000);

  it("the players' views: a circle around each player, and the cells the selected player's view holds shaded on the map", async () => {
    const views = () => page.evaluate(() => window.__overworldMap!.views());
    // Both players' entities are on the map, and each gets a view circle.
    let last: unknown = null;
    await until("two view circles", async () => ((last = await views()) as { circles: number }).circles === players.length, 10_000, () => `\nviews: ${JSON.stringify(last)}${tail(log)()}`);
    const ids = new Set((await page.evaluate(() => window.__overworldMap!.onScreen(1_000_000))).map((p) => p.id));
    for (const p of players) expect(ids.has(p.entity)).toBe(true);
    expect(await views()).toMatchObject({ on: true, selected: null, heldCells: 0 });

    // A click on a player's row selects it: its entity on the map, its charts, its held cells.
    const [a, b] = players as [ViewPlayer, ViewPlayer];
    await page.locator(`[data-testid="player-row"][data-user="${a.userId}"]`).click();
    await until("the player selected", async () => (await views()).selected === a.userId, 5_000, tail(log));
    await until(`the panel to show #${a.entity}`, async () => (await page.getByTestId("entity-id").textContent()) === `#${a.entity}`, 5_000, tail(log));
    await page.getByTestId("player-charts").waitFor({ state: "visible", timeout: 5_000 });
    expect(await page.locator(`[data-testid="player-row"][data-user="${a.userId}"]`).getAttribute("class")).toContain("selected");
    // (The click scrolled the table into view: the map back in view, as one would look at it;
    // headless Chromium draws a page's animation frames at a crawl while the canvas is out of view.)
    await page.evaluate(() => document.querySelector('[data-testid="map-canvas"]')!.scrollIntoView({ block: "nearest" }));

    // The cells drawn are the API's held runs (polled every second; the player stands still).
    let interest: any = null;
    let shown = -1;
    const cellsOf = (held: number[][]) => held.reduce((n, [, first, last]) => n + last! - first! + 1, 0);
    await until(
      "the map's held cells to be the API's",
      async () => {
        interest = await api(base, `/api/v1/operator/sessions/${a.userId}/interest`, token);
        shown = (await views()).heldCells;
        return shown > 0 && shown === cellsOf(interest.held);
      },
      10_000,
      () => `\nmap ${shown}, API ${interest === null ? "–" : cellsOf(interest.held)}${tail(log)()}`,
    );
    expect(interest.entity).toBe(a.entity);
    expect(interest.radius_m).toBeGreaterThan(0);
    expect(interest.leave_m).toBeGreaterThan(interest.radius_m);
    const held = new Set<string>();
    for (const [row, first, last] of interest.held as number[][]) for (let c = first!; c <= last!; c++) held.add(`${row},${c}`);
    // (The goblin world's cells are 12 m, examples/goblins/lib/goblins.ex: the player's own cell is held.)
    expect(held.has(`${Math.floor(interest.y / CELL)},${Math.floor(interest.x / CELL)}`)).toBe(true);

    // The pixels: the most common colour inside a held cell is shaded, inside a cell far from
    // every held one it is the world's plain background.
    const { zones } = await api(base, "/api/v1/operator/zones", token);
    expect(zones.find((z: { ref: string }) => z.ref === ref).entities).toBeGreaterThan(0);
    const side = Math.sqrt(ENTITIES * 50);
    const cols = Math.floor(side / CELL);
    const near = (row: number, col: number) => Math.hypot((col + 0.5) * CELL - interest.x, (row + 0.5) * CELL - interest.y);
    // A held cell 20 to 60 m from the player (off its selection ring), and the unheld cell
    // farthest from it, inside the world.
    const heldCell = [...held].map((k) => k.split(",").map(Number) as [number, number]).find(([r, c]) => near(r, c) > 20 && near(r, c) < 60)!;
    expect(heldCell).toBeDefined();
    let far: [number, number] = [0, 0];
    for (let r = 0; r < cols; r++) for (let c = 0; c < cols; c++) if (!held.has(`${r},${c}`) && near(r, c) > near(...far)) far = [r, c];
    expect(near(...far)).toBeGreaterThan(interest.leave_m + 2 * CELL);
    const modes = await cellModes(page, [heldCell, far], CELL);
    expect(modes[1]).toEqual(WORLD);
    expect(modes[0]).not.toEqual(WORLD);
    expect(NOT_ENTITIES).not.toContainEqual(modes[0]);
    // (Shaded in the players' blue: bluer than the background.)
    expect(modes[0]![2]! - modes[0]![0]!).toBeGreaterThan(WORLD[2]! - WORLD[0]!);

    // The other player's row: its cells instead.
    await page.locator(`[data-testid="player-row"][data-user="${b.userId}"]`).click();
    await until("the other player selected, its cells drawn", async () => {
      const v = await views();
      return v.selected === b.userId && v.heldCells > 0;
    }, 10_000, tail(log));

    // The views toggle: nothing drawn, then back.
    await page.getByTestId("views-toggle").uncheck();
    await until("no views drawn", async () => {
      const v = await views();
      return !v.on && v.circles === 0 && v.heldCells === 0;
    }, 5_000, tail(log));
    expect((await cellModes(page, [heldCell], CELL))[0]).toEqual(WORLD);
    await page.getByTestId("views-toggle").check();
    await until("the views drawn again", async () => (await views()).circles === players.length, 5_000, tail(log));

    // Closing the entity's panel lets the player go.
    await page.getByTestId("entity-close").click();
    await until("no player selected", async () => (await views()).selected === null, 5_000, tail(log));
    expect((await views()).heldCells).toBe(0);
    expect(log.filter((x) => x.startsWith("pageerror"))).toEqual([]);
  }, 40_000);

  it("an operator disables a connected player's account in the Console tab: the player is closed with 4003 and the audit log shows it", async () => {
    const { client, session, device } = await player("disabled");
    const conn = await client.connect(session, { zone: "goblins" });
    open.push(conn);
    const closes: CloseInfo[] = [];
    conn.onClose((c) => closes.push(c));
    expect(conn.entityId).toBeGreaterThan(0);

    await page.getByTestId("tab-console").click();
    await page.getByTestId("account-search").fill(device);
    await page.getByTestId("account-search-button").click();
    const row = page.getByTestId("account-row");
    await until("one account found", async () => (await row.count()) === 1, 5_000, tail(log));
    expect(await row.textContent()).toContain(session.userId);
    await row.getByTestId("account-view").click();
    await until("the account's details", async () => (await page.getByTestId("account-id").textContent()) === session.userId, 5_000, tail(log));
    expect(await page.getByTestId("account-status").textContent()).toContain("active");

    // The confirmation, dismissed: nothing happens.
    const dialogs: string[] = [];
    page.once("dialog", (d) => {
      dialogs.push(d.message());
      void d.dismiss();
    });
    await page.getByTestId("account-disable").click();
    await until("the confirmation", () => dialogs.length === 1, 5_000, tail(log));
    expect(dialogs[0]).toContain(session.userId);
    await sleep(300);
    expect((await api(base, `/api/v1/operator/accounts/${session.userId}`, token)).disabled).toBe(false);
    expect(conn.state).toBe("open");

    // Accepted: disabled, and the player's connection closed.
    page.once("dialog", (d) => void d.accept());
    await page.getByTestId("account-disable").click();
    await until("the player's connection to close", () => closes.length > 0, 5_000, tail(log));
    expect(closes[0]).toMatchObject({ code: 4003, willReconnect: false });
    expect(conn.state).toBe("closed");
    expect((await api(base, `/api/v1/operator/accounts/${session.userId}`, token)).disabled).toBe(true);
    await until("the account shown disabled", async () => ((await page.getByTestId("account-status").textContent()) ?? "").includes("disabled"), 5_000, tail(log));
    await page.getByTestId("account-enable").waitFor({ timeout: 5_000 });
    // The search's results are searched again: the row says disabled too.
    await until("the result row shown disabled", async () => ((await row.textContent()) ?? "").includes("disabled"), 5_000, tail(log));
    expect(await page.getByTestId("console-message").textContent()).toBe(`disable ${session.userId}: done`);

    // The audit log's newest row: alice disabled that account.
    const audit = page.getByTestId("audit-table");
    await until(
      "the disable in the audit table",
      async () => ((await audit.getByTestId("audit-row").first().textContent()) ?? "").includes(session.userId),
      5_000,
      tail(log),
    );
    const cells = await audit
      .getByTestId("audit-row")
      .first()
      .evaluate((tr) => [...tr.children].map((td) => td.textContent ?? ""));
    expect(cells.slice(1, 5)).toEqual(["alice", "disable", session.userId, "ok"]);
  }, 30_000);

  it("a player's token where the console keeps its token is refused: the login form, and the API answers 401", async () => {
    const { session } = await player("token");
    const ctx = await browser!.newContext({ viewport: VIEWPORT });
    try {
      await ctx.addInitScript(
        ([k, t]) => {
          if (sessionStorage.getItem("planted") === null) {
            sessionStorage.setItem(k, JSON.stringify({ token: t, expiresAt: null }));
            sessionStorage.setItem("planted", "1");
          }
        },
        [TOKEN_KEY, session.token] as const,
      );
      const p = await ctx.newPage();
      const l = record(p);
      const refused: string[] = [];
      p.on("response", (r) => r.status() === 401 && r.url().includes("/api/v1/operator/") && refused.push(new URL(r.url()).pathname));
      await p.goto(`${base}/console?zone=goblins`);
      await p.getByTestId("login-form").waitFor({ timeout: 10_000 });
      expect(await p.getByTestId("login-error").textContent()).toBe("your session ended: log in again");
      expect(refused).toContain("/api/v1/operator/zones");
      expect(await p.evaluate((k) => sessionStorage.getItem(k), TOKEN_KEY)).toBeNull();
      expect(await p.evaluate(() => window.__overworldMap)).toBeNull();
      expect(l.filter((x) => x.startsWith("pageerror"))).toEqual([]);
    } finally {
      await ctx.close();
    }
    // The API itself refuses it.
    const r = await call(base, "/api/v1/operator/zones", session.token);
    expect(r.status).toBe(401);
    expect(r.body).toMatchObject({ error: "invalid_token", message: "wrong_type" });
  }, 20_000);

  it("logout revokes the token; a viewer cannot disable an account (403 in the page and from the API)", async () => {
    const old = await page.evaluate((k) => JSON.parse(sessionStorage.getItem(k)!).token as string, TOKEN_KEY);
    expect((await call(base, "/api/v1/operator/me", old)).status).toBe(200);
    await page.getByTestId("logout").click();
    await page.getByTestId("login-form").waitFor({ timeout: 5_000 });
    expect(await page.evaluate((k) => sessionStorage.getItem(k), TOKEN_KEY)).toBeNull();
    await until("the old token to be refused", async () => (await call(base, "/api/v1/operator/me", old)).status === 401, 5_000, tail(log));

    // victor (a viewer) logs in and tries to disable an active account.
    const { session } = await player("viewer");
    await logIn(page, VICTOR, log);
    await page.getByTestId("tab-console").click();
    await page.getByTestId("account-search").fill(session.userId);
    await page.getByTestId("account-search-button").click();
    await page.getByTestId("account-view").first().click();
    await until("the account's details", async () => (await page.getByTestId("account-id").textContent()) === session.userId, 5_000, tail(log));
    page.once("dialog", (d) => void d.accept());
    await page.getByTestId("account-disable").click();
    const message = page.getByTestId("console-message");
    await until("the refusal", async () => ((await message.textContent()) ?? "").includes("403"), 5_000, tail(log));
    expect(await message.textContent()).toMatch(new RegExp(`^disable ${session.userId}: .*\\(403 forbidden\\)$`));
    // Still logged in (a 403 is no 401), the account still active.
    expect(await page.getByTestId("login-form").count()).toBe(0);
    expect((await api(base, `/api/v1/operator/accounts/${session.userId}`, token)).disabled).toBe(false);

    const viewer = await loginFromNode(base, VICTOR);
    expect((await call(base, `/api/v1/operator/accounts/${session.userId}/disable`, viewer, "POST", {})).status).toBe(403);
    expect((await call(base, `/api/v1/operator/accounts/${session.userId}`, viewer)).status).toBe(200);
    expect(log.filter((x) => x.startsWith("pageerror"))).toEqual([]);
  }, 20_000);
});
