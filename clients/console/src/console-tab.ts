// The Console tab: accounts (search, view, disable and enable), zones (stop, start, snapshot now,
// history download), sessions per zone (kick), and the audit log of every operator action.
import { ApiError, type AccountDetails, type AccountSummary, type Api, type ZoneInfo } from "./api.js";
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
  private readonly message = h("div", { class: "message", testid: "console-message" });
  private readonly query = h("input", { type: "search", placeholder: "user id, device, email…", testid: "account-search" });
  private readonly accountList = h("div", { testid: "account-results" });
  private readonly accountBox = h("div", { testid: "account-details", class: "card", hidden: true });
  private readonly zoneBox = h("div", { testid: "zone-table-box" });
  private readonly startId = h("input", { type: "text", placeholder: "zone id", testid: "zone-start-id" });
  private readonly sessionZone = h("select", { testid: "session-zone" });
  private readonly sessionBox = h("div", { testid: "session-table-box" });
  private readonly auditBox = h("div", { testid: "audit-box" });
  private zones: ZoneInfo[] = [];

  constructor(o: ConsoleOptions) {
    this.o = o;
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
        h(
          "form",
          { class: "row", testid: "zone-start-form", onsubmit: (e: Event) => (e.preventDefault(), void this.start(this.startId.value.trim())) },
          this.startId,
          h("button", { type: "submit", testid: "zone-start-submit" }, "Start zone"),
        ),
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
    if (e instanceof ApiError && e.status !== 401) this.say(`${what}: ${e.message} (${e.status} ${e.code})`);
    else this.o.failed(e);
  }

  // ---- accounts ----

  async search(): Promise<void> {
    let found: AccountSummary[];
    try {
      found = await this.o.api.accounts(this.query.value.trim());
    } catch (e) {
      return this.fail("search", e);
    }
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
    const extra = Object.entries(a.raw).filter(([k]) => !["id", "user_id", "devices", "device_ids", "email", "custom_id", "disabled", "last_seen", "status"].includes(k));
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
          row("last seen", formatTime(a.lastSeen), "account-last-seen"),
          ...extra.map(([k, v]) => row(k, typeof v === "string" ? v : JSON.stringify(v))),
        ),
      ),
      a.disabled === true
        ? h("button", { testid: "account-enable", onclick: () => void this.setDisabled(a.id, false) }, "Enable")
        : h("button", { testid: "account-disable", class: "danger", onclick: () => void this.setDisabled(a.id, true) }, "Disable"),
    );
  }

  private async setDisabled(id: string, disable: boolean): Promise<void> {
    if (disable && !(this.o.confirm ?? window.confirm.bind(window))(`Disable account ${id}? Its tokens are refused and its connections closed.`)) return;
    const done = await this.act(disable ? `disable ${id}` : `enable ${id}`, () => (disable ? this.o.api.disableAccount(id) : this.o.api.enableAccount(id)));
    if (done !== undefined) await Promise.all([this.view(id), this.loadAudit()]);
  }

  // ---- zones ----

  async loadZones(): Promise<void> {
    try {
      this.zones = await this.o.api.zones();
    } catch (e) {
      return this.fail("zones", e);
    }
    fill(
      this.zoneBox,
      table(
        "zone-table",
        ["name", "id", "world", "module", "node", "players", "entities", "tick p50/p99 ms", "actions", "flags"],
        this.zones.map((z) => [
          z.name,
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
            z.running === false
              ? h("button", { testid: "zone-start", "data-zone": z.ref, onclick: () => void this.start(z.id) }, "Start")
              : h("button", { testid: "zone-stop", class: "danger", "data-zone": z.ref, onclick: () => void this.stop(z) }, "Stop"),
            h("button", { testid: "zone-snapshot", "data-zone": z.ref, onclick: () => void this.act(`snapshot ${z.name}`, () => this.o.api.snapshotZone(z.ref)).then(() => this.loadAudit()) }, "Snapshot now"),
            z.history ? h("button", { testid: "zone-history-download", "data-zone": z.ref, onclick: () => void this.download(z) }, "History") : null,
          ),
          [z.debug ? "debug" : "", z.history ? "history" : ""].filter(Boolean).join(", "),
        ]),
        "zone-row",
      ),
    );
    const current = this.sessionZone.value;
    fill(this.sessionZone, ...this.zones.map((z) => h("option", { value: z.ref, selected: z.ref === current }, z.world === null ? z.name : `${z.name} (${z.id})`)));
    await this.loadSessions();
  }

  private async stop(z: ZoneInfo): Promise<void> {
    if (!(this.o.confirm ?? window.confirm.bind(window))(`Stop zone ${z.name} (${z.id})? Its players are disconnected.`)) return;
    await this.act(`stop ${z.name}`, () => this.o.api.stopZone(z.ref));
    await Promise.all([this.loadZones(), this.loadAudit()]);
  }

  private async start(id: string): Promise<void> {
    if (id === "") return this.say("start: give a zone id");
    await this.act(`start ${id}`, () => this.o.api.startZone(id));
    await Promise.all([this.loadZones(), this.loadAudit()]);
  }

  private async download(z: ZoneInfo): Promise<void> {
    const r = await this.act(`history of ${z.name}`, () => this.o.api.historyDump(z.ref));
    if (r === undefined) return;
    const name = r.filename ?? `history-${z.name.replace(/[^A-Za-z0-9_.-]+/g, "_")}.bin`;
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
              ["user", "connected", "address", "RTT ms", ""],
              sessions.map((s) => [
                h("span", { class: "mono" }, s.userId),
                formatTime(s.connectedAt),
                s.address ?? "–",
                formatNumber(s.rttMs),
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
    if (!(this.o.confirm ?? window.confirm.bind(window))(`Kick ${user}?`)) return;
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
