// The Console tab: accounts (search, view, disable and enable), zones (stop, start, snapshot now,
// history download), sessions per zone (kick), and the audit log of every operator action.
import { OverworldHttpError, zoneLabel, type AccountDetails, type AccountSummary, type Api, type ZoneInfo } from "./api.js";
import { fill, h, table } from "./dom.js";
import { formatNumber, formatTime } from "./format.js";

export interface ConsoleOptions {
  api: Api;
  /** A failure that is not the console's to show (a 401: back to the login). */
  failed: (e: unknown) => void;
  /** Saves a downloaded file (the page makes a link to a blob URL and clicks it). */
  save?: (blob: Blob, name: string) => void;
  /** Asks a confirmation (window.confirm). */
  confirm?: (text: string) => boolean;
}

export class ConsoleTab {
  readonly root: HTMLElement;
  private readonly o: ConsoleOptions;
  private readonly confirm: (text: string) => boolean;
  private readonly message = h("div", { class: "message", testid: "console-message" });
  private readonly query = h("input", { type: "search", placeholder: "user id, device, email…", testid: "account-search" });
  private readonly accountList = h("div", { testid: "account-results" });
  private readonly accountBox = h("div", { testid: "account-details", class: "card", hidden: true });
  private readonly zoneBox = h("div", { testid: "zone-table-box" });
  private readonly sessionZone = h("select", { testid: "session-zone" });
  private readonly sessionBox = h("div", { testid: "session-table-box" });
  private readonly auditBox = h("div", { testid: "audit-box" });
  private zones: ZoneInfo[] = [];
  /** The query of the results shown (null: none yet), searched again after an account changes. */
  private shownQuery: string | null = null;

  constructor(o: ConsoleOptions) {
    this.o = o;
    this.confirm = o.confirm ?? ((text) => window.confirm(text));
    this.sessionZone.addEventListener("change", () => void this.loadSessions());
    this.root = h(
      "div",
      { class: "console-tab" },
      this.message,
      h(
        "section",
        { class: "card" },
        h("h3", {}, "Accounts"),
        h(
          "form",
          { class: "row", testid: "account-search-form", onsubmit: (e: Event) => (e.preventDefault(), void this.search()) },
          this.query,
          h("button", { type: "submit", testid: "account-search-button" }, "Search"),
        ),
        this.accountList,
        this.accountBox,
      ),
      h(
        "section",
        { class: "card" },
        h("div", { class: "row" }, h("h3", {}, "Zones"), h("button", { testid: "console-zones-refresh", onclick: () => void this.loadZones() }, "Refresh")),
        this.zoneBox,
      ),
      h(
        "section",
        { class: "card" },
        h("div", { class: "row" }, h("h3", {}, "Sessions"), this.sessionZone, h("button", { testid: "sessions-refresh", onclick: () => void this.loadSessions() }, "Refresh")),
        this.sessionBox,
      ),
      h(
        "section",
        { class: "card" },
        h("div", { class: "row" }, h("h3", {}, "Audit log"), h("button", { testid: "audit-refresh", onclick: () => void this.loadAudit() }, "Refresh")),
        this.auditBox,
      ),
    );
  }

  /** Loads what the tab shows (when it is opened). */
  async refresh(): Promise<void> {
    await Promise.all([this.loadZones(), this.loadAudit()]);
  }

  private say(text: string): void {
    this.message.textContent = text;
  }

  /** Runs an action: its message on success; the error's on failure (a 401 goes to the login). */
  private async act<T>(what: string, f: () => Promise<T>): Promise<T | undefined> {
    try {
      const r = await f();
      this.say(`${what}: done`);
      return r;
    } catch (e) {
      this.fail(what, e);
      return undefined;
    }
  }

  private fail(what: string, e: unknown): void {
    if (e instanceof OverworldHttpError && e.status !== 401) this.say(`${what}: ${e.message} (${e.status} ${e.code})`);
    else this.o.failed(e);
  }

  // ---- accounts ----

  async search(q = this.query.value.trim()): Promise<void> {
    let found: AccountSummary[];
    try {
      found = await this.o.api.accounts(q);
    } catch (e) {
      return this.fail("search", e);
    }
    this.shownQuery = q;
    fill(
      this.accountList,
      found.length === 0
        ? h("p", { class: "dim" }, "no account found")
        : table(
            "account-table",
            ["id", "status", "last seen", ""],
            found.map((a) => [
              h("span", { class: "mono" }, a.id),
              statusOf(a),
              formatTime(a.lastSeen),
              h("button", { testid: "account-view", "data-account": a.id, onclick: () => void this.view(a.id) }, "View"),
            ]),
            "account-row",
          ),
    );
  }

  async view(id: string): Promise<void> {
    let a: AccountDetails;
    try {
      a = await this.o.api.account(id);
    } catch (e) {
      return this.fail("account", e);
    }
    this.accountBox.hidden = false;
    fill(
      this.accountBox,
      h("h4", { testid: "account-id", class: "mono" }, a.id),
      h(
        "table",
        { class: "fields" },
        h(
          "tbody",
          {},
          row("status", statusOf(a), "account-status"),
          row("devices", a.devices.length === 0 ? "–" : a.devices.join(", "), "account-devices"),
          row("email", a.email ?? "–", "account-email"),
          row("custom id", a.customId ?? "–", "account-custom"),
          row("created", formatTime(a.createdAt), "account-created"),
          row("last seen", formatTime(a.lastSeen), "account-last-seen"),
        ),
      ),
      a.disabled === true
        ? h("button", { testid: "account-enable", onclick: () => void this.setDisabled(a.id, false) }, "Enable")
        : h("button", { testid: "account-disable", class: "danger", onclick: () => void this.setDisabled(a.id, true) }, "Disable"),
    );
  }

  private async setDisabled(id: string, disable: boolean): Promise<void> {
    if (disable && !this.confirm(`Disable account ${id}? Its tokens are refused and its connections closed.`)) return;
    const done = await this.act(disable ? `disable ${id}` : `enable ${id}`, () => (disable ? this.o.api.disableAccount(id) : this.o.api.enableAccount(id)));
    // (The results' status and the sessions too: a disabled account's connections are closed.)
    if (done !== undefined)
      await Promise.all([this.view(id), this.loadAudit(), this.shownQuery === null ? undefined : this.search(this.shownQuery), this.loadSessions()]);
  }

  // ---- zones ----

  async loadZones(): Promise<void> {
    let stopped: string[];
    try {
      ({ zones: this.zones, stopped } = await this.o.api.zones());
    } catch (e) {
      return this.fail("zones", e);
    }
    fill(
      this.zoneBox,
      table(
        "zone-table",
        ["name", "id", "world", "module", "node", "players", "entities", "tick p50/p99 ms", "actions", "flags"],
        [
          ...this.zones.map((z) => [
            z.name ?? "–",
            h("span", { class: "mono" }, z.id),
            z.world ?? "–",
            z.module ?? "–",
            z.node ?? "–",
            formatNumber(z.players),
            formatNumber(z.entities),
            `${formatNumber(z.tickP50Ms, 2)} / ${formatNumber(z.tickP99Ms, 2)}`,
            h(
              "span",
              { class: "buttons" },
              h("button", { testid: "zone-stop", class: "danger", "data-zone": z.ref, onclick: () => void this.stop(z) }, "Stop"),
              h("button", { testid: "zone-snapshot", "data-zone": z.ref, onclick: () => void this.act(`snapshot ${zoneLabel(z)}`, () => this.o.api.snapshotZone(z.ref)).then(() => this.loadAudit()) }, "Snapshot now"),
              z.history ? h("button", { testid: "zone-history-download", "data-zone": z.ref, onclick: () => void this.download(z) }, "History") : null,
            ),
            [z.debug ? "debug" : "", z.history ? "history" : ""].filter(Boolean).join(", "),
          ]),
          // The server's zones that run nowhere: started again by name.
          ...stopped.map((name) => [
            name,
            "–",
            "–",
            "–",
            "–",
            "–",
            "–",
            "–",
            h("span", { class: "buttons" }, h("button", { testid: "zone-start", "data-zone": name, onclick: () => void this.start(name) }, "Start")),
            "stopped",
          ]),
        ],
        "zone-row",
      ),
    );
    const current = this.sessionZone.value;
    fill(this.sessionZone, ...this.zones.map((z) => h("option", { value: z.ref, selected: z.ref === current }, zoneLabel(z))));
    await this.loadSessions();
  }

  private async stop(z: ZoneInfo): Promise<void> {
    if (!this.confirm(`Stop zone ${zoneLabel(z)} (${z.id})? Its players are disconnected.`)) return;
    await this.act(`stop ${zoneLabel(z)}`, () => this.o.api.stopZone(z.ref));
    await Promise.all([this.loadZones(), this.loadAudit()]);
  }

  private async start(name: string): Promise<void> {
    await this.act(`start ${name}`, () => this.o.api.startZone(name));
    await Promise.all([this.loadZones(), this.loadAudit()]);
  }

  private async download(z: ZoneInfo): Promise<void> {
    const r = await this.act(`history of ${zoneLabel(z)}`, () => this.o.api.historyDump(z.ref));
    if (r === undefined) return;
    const name = r.filename ?? `history-${zoneLabel(z).replace(/[^A-Za-z0-9_.-]+/g, "_")}.bin`;
    (this.o.save ?? saveBlob)(r.blob, name);
    await this.loadAudit();
  }

  // ---- sessions ----

  async loadSessions(): Promise<void> {
    const ref = this.sessionZone.value;
    if (ref === "") return fill(this.sessionBox);
    try {
      const sessions = await this.o.api.sessions(ref);
      fill(
        this.sessionBox,
        sessions.length === 0
          ? h("p", { class: "dim" }, "no sessions")
          : table(
              "session-table",
              ["user", "entity", "connected", "address", "node", ""],
              sessions.map((s) => [
                h("span", { class: "mono" }, s.userId),
                formatNumber(s.entity),
                s.connected === false ? "no socket" : formatTime(s.connectedAt),
                s.address ?? "–",
                s.node ?? "–",
                h("button", { testid: "session-kick", class: "danger", "data-user": s.userId, onclick: () => void this.kick(s.userId) }, "Kick"),
              ]),
              "session-row",
            ),
      );
    } catch (e) {
      this.fail("sessions", e);
    }
  }

  private async kick(user: string): Promise<void> {
    if (!this.confirm(`Kick ${user}?`)) return;
    await this.act(`kick ${user}`, () => this.o.api.kick(user));
    await Promise.all([this.loadSessions(), this.loadAudit()]);
  }

  // ---- audit ----

  async loadAudit(): Promise<void> {
    try {
      const entries = await this.o.api.audit(100);
      fill(
        this.auditBox,
        table(
          "audit-table",
          ["at", "operator", "action", "target", "result", "address"],
          entries.map((e) => [formatTime(e.at), e.operator ?? "–", e.action ?? "–", e.target ?? "–", e.result ?? "–", e.address ?? "–"]),
          "audit-row",
        ),
      );
    } catch (e) {
      this.fail("audit", e);
    }
  }
}

function statusOf(a: AccountSummary): string {
  return a.disabled === true ? "disabled" : a.disabled === false ? "active" : "–";
}

function row(k: string, v: string, testid?: string): HTMLTableRowElement {
  return h("tr", { testid }, h("th", {}, k), h("td", {}, v));
}

function saveBlob(blob: Blob, name: string): void {
  const url = URL.createObjectURL(blob);
  const a = h("a", { href: url, download: name, testid: "download-link" });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}
