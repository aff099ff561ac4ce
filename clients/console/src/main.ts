// The console page (served at /console): the login, then two tabs, Map and Console. The
// operator token lives in sessionStorage; any 401 (an expired or revoked token) comes back
// here and shows the login again. The server's status is polled every second for the charts
// whichever tab is open, so their five minutes are there when looked at.
import { Api, OverworldHttpError } from "./api.js";
import { TokenStore } from "./token.js";
import { ConsoleTab } from "./console-tab.js";
import { fill, h, show } from "./dom.js";
import { MapTab } from "./map.js";
import { StatusHistory } from "./ring.js";
import { stats } from "./stats.js";

declare global {
  interface Window {
    __overworldStats: typeof stats;
    /** For browser tests: the map's on-screen entities, camera, players' views and walls (null before the login). */
    __overworldMap: Pick<MapTab, "onScreen" | "view" | "views" | "walls"> | null;
  }
}

window.__overworldStats = stats;
window.__overworldMap = null;

const params = new URLSearchParams(location.search);
// The decoding worker's script sits beside this one (/console/worker.js); ?worker=0 decodes on
// the page's thread instead (to compare).
const script = (document.currentScript as HTMLScriptElement | null)?.src ?? new URL("/console/app.js", location.href).href;
const workerUrl = params.get("worker") === "0" ? null : new URL("worker.js", script).href;
const store = new TokenStore(sessionStorageOrNull());
const api = new Api({ token: () => store.get(), onUnauthorized: () => loggedOut("your session ended: log in again") });
const history = new StatusHistory();
const app = document.getElementById("app") ?? document.body;

let map: MapTab | null = null;
let consoleTab: ConsoleTab | null = null;
let poller: ReturnType<typeof setInterval> | undefined;

function sessionStorageOrNull(): Storage | null {
  try {
    return window.sessionStorage;
  } catch {
    return null;
  }
}

function failed(e: unknown): void {
  if (e instanceof OverworldHttpError && e.status === 401) loggedOut("your session ended: log in again");
  else console.error(e);
}

function loggedOut(why: string): void {
  store.clear();
  map?.dispose();
  map = null;
  window.__overworldMap = null;
  clearInterval(poller);
  showLogin(why);
}

/** The Log out button: the token revoked on the server first (else it would stay valid until it expires). */
async function logOut(): Promise<void> {
  try {
    await api.logout();
  } catch {
    // Refused already (expired, revoked) or the server is gone: logged out here all the same.
  }
  loggedOut("");
}

function showLogin(why = ""): void {
  const name = h("input", { type: "text", name: "name", autocomplete: "username", required: true, testid: "login-name" });
  const password = h("input", { type: "password", name: "password", autocomplete: "current-password", required: true, testid: "login-password" });
  const error = h("div", { class: "message", testid: "login-error" }, why);
  const button = h("button", { type: "submit", testid: "login-submit" }, "Log in");
  const form = h(
    "form",
    { class: "login card", testid: "login-form" },
    h("h2", {}, "Overworld operator console"),
    h("label", {}, "Name", name),
    h("label", {}, "Password", password),
    button,
    error,
  );
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    button.disabled = true;
    error.textContent = "";
    api.login(name.value.trim(), password.value).then(
      (r) => {
        store.set(r.token, r.expiresIn);
        showApp();
      },
      (e: unknown) => {
        button.disabled = false;
        if (!(e instanceof OverworldHttpError)) error.textContent = String(e);
        else if (e.status === 401) error.textContent = "wrong name or password";
        else if (e.status === 429 && e.retryAfter !== undefined) waitToRetry(e, e.retryAfter, button, error);
        else error.textContent = `${e.message} (${e.status})`;
      },
    );
  });
  fill(app, form);
  name.focus();
}

/** A login refused for now (429: too many attempts, or the server busy): the button comes back after the seconds it said. */
function waitToRetry(e: OverworldHttpError, seconds: number, button: HTMLButtonElement, error: HTMLElement): void {
  const why = e.code === "busy" ? "the server is busy" : "too many attempts";
  const until = Date.now() + seconds * 1000;
  const tick = () => {
    const left = Math.ceil((until - Date.now()) / 1000);
    button.disabled = left > 0;
    error.textContent = left > 0 ? `${why} (${e.status}): try again in ${left} s` : `${why} (${e.status}): try again now`;
    if (left > 0 && button.isConnected) setTimeout(tick, 1000);
  };
  tick();
}

function showApp(): void {
  const fps = Number(params.get("fps") ?? "0");
  map = new MapTab({ api, token: () => store.get(), history, base: location.href, failed, maxFps: Number.isFinite(fps) ? fps : 0, workerUrl });
  window.__overworldMap = map;
  consoleTab = new ConsoleTab({ api, failed });
  const mapTab = h("button", { class: "tab", testid: "tab-map" }, "Map");
  const consoleButton = h("button", { class: "tab", testid: "tab-console" }, "Console");
  const select = (which: "map" | "console") => {
    mapTab.classList.toggle("active", which === "map");
    consoleButton.classList.toggle("active", which === "console");
    show(map!.root, which === "map");
    show(consoleTab!.root, which === "console");
    map!.setVisible(which === "map");
    if (which === "console") void consoleTab!.refresh();
  };
  mapTab.addEventListener("click", () => select("map"));
  consoleButton.addEventListener("click", () => select("console"));
  fill(
    app,
    h(
      "header",
      { class: "top" },
      h("strong", {}, "Overworld"),
      mapTab,
      consoleButton,
      h("span", { class: "spacer" }),
      h("button", { testid: "logout", onclick: () => void logOut() }, "Log out"),
    ),
    map.root,
    consoleTab.root,
  );
  select("map");
  void map.loadZones().then(() => {
    // ?zone=NAME watches a zone (or world) at once: for links and the benchmark.
    // (Not in the zone list, or no list: watched by name all the same.)
    const want = params.get("zone");
    if (want === null || map === null) return;
    const item = document.querySelector<HTMLButtonElement>(`[data-testid="zone-item"][data-zone="${CSS.escape(want)}"]`);
    if (item !== null) item.click();
    else map.watch({ name: want, world: false, zones: [] });
  });
  const poll = () =>
    api.status().then(
      (s) => {
        history.ingest(s, performance.now());
        map?.charts.draw();
      },
      () => undefined,
    );
  void poll();
  clearInterval(poller);
  poller = setInterval(poll, 1000);
}

if (store.get() === null) showLogin();
else showApp();
