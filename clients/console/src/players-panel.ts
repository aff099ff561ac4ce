// The players of the target watched (the operator API's sessions, polled every 2 s by the map):
// a table with each one's bandwidth, RTT, frame interval, jitter and budget deferrals, and the
// last minutes of the selected player's figures as two charts. A click on a row selects the
// player (the map shades the cells its view holds).
import type { SessionInfo } from "./api.js";
import { drawChart, formatValue } from "./chart.js";
import { fill, h, show } from "./dom.js";
import { formatBytes, formatNumber, formatTime } from "./format.js";
import { PlayerStats, type PlayerRow } from "./players.js";

interface Column {
  /** `data-col` of its cells. */
  col: string;
  head: string;
  text(r: PlayerRow): string;
  /** Numeric columns: the raw number (`data-value` of the cell; "" for none). */
  num: boolean;
  value?(r: PlayerRow): number | null;
}

const numeric = (col: string, head: string, value: (r: PlayerRow) => number | null, text: (v: number | null) => string): Column => ({
  col,
  head,
  num: true,
  value,
  text: (r) => text(value(r)),
});
const perSecond = (v: number | null, f: (v: number) => string) => (v === null || !Number.isFinite(v) ? "–" : f(v));

const COLUMNS: Column[] = [
  { col: "user", head: "user", num: false, text: (r) => short(r.session.userId) },
  numeric("entity", "entity", (r) => r.session.entity, formatNumber),
  { col: "connected", head: "connected", num: false, text: (r) => (r.session.connected === false ? "no socket" : formatTime(r.session.connectedAt)) },
  { col: "address", head: "address", num: false, text: (r) => r.session.address ?? "–" },
  numeric("bytes", "bytes out", (r) => r.session.bytesOut, formatBytes),
  numeric("bandwidth", "bandwidth", (r) => r.bandwidth, (v) => perSecond(v, (b) => `${formatBytes(Math.round(b))}/s`)),
  numeric("rtt", "RTT", (r) => r.session.rttMs, formatMs),
  numeric("interval", "frame interval", (r) => r.session.frameIntervalMs, formatMs),
  numeric("jitter", "jitter", (r) => r.session.frameJitterMs, formatMs),
  numeric("deferred-rate", "deferred/s", (r) => r.deferredPerS, (v) => perSecond(v, (d) => formatValue(d))),
  numeric("deferred", "deferred", (r) => r.session.deferred, formatNumber),
];

/** Sets an attribute unless it already has that value. */
function set(el: HTMLElement, name: string, value: string): void {
  if (el.getAttribute(name) !== value) el.setAttribute(name, value);
}

/** Milliseconds with the digits that matter (a loopback RTT is a few hundredths). */
export function formatMs(v: number | null | undefined): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return "–";
  const a = Math.abs(v);
  return `${a >= 100 ? Math.round(v) : a >= 10 ? v.toFixed(1) : v.toFixed(2)} ms`;
}

/** A user id as the table shows it: its first 12 characters (the whole in the cell's title). */
function short(userId: string): string {
  return userId.length > 13 ? `${userId.slice(0, 12)}…` : userId;
}

export class PlayersPanel {
  readonly root: HTMLElement;
  private readonly stats: PlayerStats;
  private readonly box = h("div", { testid: "player-table-box" });
  private readonly chartBox = h("div", { class: "chart-grid", testid: "player-charts", hidden: true });
  private readonly bandwidthChart = h("canvas", { class: "chart", testid: "chart-player-bandwidth" });
  private readonly timingChart = h("canvas", { class: "chart", testid: "chart-player-timing" });
  private readonly onSelect: (userId: string) => void;
  private readonly tbody = h("tbody");
  private readonly table = h(
    "div",
    { class: "scroll" },
    h("table", { testid: "player-table" }, h("thead", {}, h("tr", {}, ...COLUMNS.map((c) => h("th", {}, c.head)))), this.tbody),
  );
  /** The rows shown, by user id. */
  private readonly trs = new Map<string, HTMLTableRowElement>();
  private rows: PlayerRow[] = [];
  private selected: string | null = null;

  constructor(onSelect: (userId: string) => void, stats = new PlayerStats()) {
    this.onSelect = onSelect;
    this.stats = stats;
    this.chartBox.append(this.bandwidthChart, this.timingChart);
    this.root = h("section", { class: "players", testid: "players" }, h("h3", {}, "Players"), this.box, this.chartBox);
  }

  /** A new target watched: nothing known of its players yet. */
  clear(): void {
    this.stats.clear();
    this.rows = [];
    this.selected = null;
    this.trs.clear();
    this.tbody.replaceChildren();
    fill(this.box);
    show(this.chartBox, false);
  }

  /** A poll's sessions (null: the call failed, `error` says why). */
  setSessions(sessions: SessionInfo[] | null, error = "", now = performance.now()): void {
    if (sessions === null) {
      fill(this.box, h("p", { class: "message" }, error || "no sessions"));
      return;
    }
    this.rows = this.stats.update(sessions, now);
    this.render();
    this.draw(now);
  }

  /** The player whose row is highlighted and charted (null: none). */
  select(userId: string | null): void {
    if (userId === this.selected) return;
    this.selected = userId;
    this.render();
    this.draw();
  }

  /** The table: a row per player, kept from poll to poll (its cells written again), so a row being clicked stays. */
  private render(): void {
    if (this.rows.length === 0) {
      this.trs.clear();
      this.tbody.replaceChildren();
      return fill(this.box, h("p", { class: "message" }, "no players"));
    }
    if (this.table.parentNode !== this.box) fill(this.box, this.table);
    const order: HTMLTableRowElement[] = [];
    const seen = new Set<string>();
    for (const row of this.rows) {
      const user = row.session.userId;
      // (The same user twice, e.g. in two zones of a world for a moment: one row.)
      if (seen.has(user)) continue;
      seen.add(user);
      let tr = this.trs.get(user);
      if (tr === undefined) this.trs.set(user, (tr = this.newRow(user)));
      this.fillRow(tr, row);
      order.push(tr);
    }
    for (const user of [...this.trs.keys()]) if (!seen.has(user)) this.trs.delete(user);
    const now = this.tbody.children;
    if (now.length !== order.length || order.some((tr, i) => now[i] !== tr)) this.tbody.replaceChildren(...order);
  }

  private newRow(user: string): HTMLTableRowElement {
    return h(
      "tr",
      { testid: "player-row", "data-user": user, class: "player", title: "show this player's view on the map", onclick: () => this.onSelect(user) },
      ...COLUMNS.map((c) => h("td", { "data-col": c.col, class: c.num ? "num" : c.col === "user" ? "mono" : "" })),
    );
  }

  private fillRow(tr: HTMLTableRowElement, row: PlayerRow): void {
    const s = row.session;
    set(tr, "data-entity", s.entity === null ? "" : String(s.entity));
    tr.classList.toggle("selected", s.userId === this.selected);
    COLUMNS.forEach((c, i) => {
      const td = tr.children[i] as HTMLElement;
      const text = c.text(row);
      if (td.textContent !== text) td.textContent = text;
      if (c.num) {
        const v = c.value!(row);
        set(td, "data-value", v === null || !Number.isFinite(v) ? "" : String(v));
      }
    });
    set(tr.children[0] as HTMLElement, "title", s.userId);
  }

  /** The selected player's charts (hidden when none, or it is gone). */
  draw(now = performance.now()): void {
    const k = this.selected === null ? undefined : this.stats.get(this.selected);
    show(this.chartBox, k !== undefined);
    if (k === undefined || this.root.offsetParent === null) return;
    const w = this.stats.windowMs;
    const who = short(this.selected!);
    drawChart(this.bandwidthChart, `${who}: bandwidth`, "B/s", [{ label: "out", colour: "#4ab8ff", series: k.bandwidth }], now, w);
    drawChart(
      this.timingChart,
      `${who}: RTT, frame interval, jitter (ms)`,
      "ms",
      [
        { label: "RTT", colour: "#f0c846", series: k.rtt },
        { label: "interval", colour: "#5fbf4a", series: k.interval },
        { label: "jitter", colour: "#e8543a", series: k.jitter },
      ],
      now,
      w,
    );
  }
}
