// Time travel for a zone that keeps a history: a slider over its kept ticks, one-tick steps,
// back to live, and rewinding the zone to the tick shown (after a confirmation). While the
// slider is away from live, the map draws the zone's state at that tick (history/state).
import { OverworldHttpError, zoneLabel, type Api, type HistoryRange, type HistoryState, type ZoneInfo } from "./api.js";
import { fill, h, show } from "./dom.js";

export interface ScrubberHost {
  /** A tick's state came (null: back to live). */
  showHistory(state: HistoryState | null, zone: ZoneInfo | null): void;
  /** A call failed with a 401 or worse: the host decides (a message, or the login). */
  failed(e: unknown): void;
}

export class Scrubber {
  readonly root: HTMLElement;
  private readonly api: Api;
  private readonly host: ScrubberHost;
  private readonly zoneSelect = h("select", { testid: "scrubber-zone" });
  private readonly range = h("input", { type: "range", min: 0, max: 0, value: 0, step: 1, testid: "scrubber-range" });
  private readonly tickLabel = h("span", { testid: "scrubber-tick", class: "mono" });
  private readonly message = h("span", { testid: "rewind-message", class: "message" });
  private readonly rewindButton = h("button", { testid: "rewind-button", disabled: true }, "Rewind to this tick…");
  private zones: ZoneInfo[] = [];
  private bounds: HistoryRange | null = null;
  /** The tick shown (null: live). */
  private tick: number | null = null;
  private seq = 0;
  private debounce: ReturnType<typeof setTimeout> | undefined;
  private poll: ReturnType<typeof setInterval> | undefined;
  /** Asks confirmation (window.confirm in the page; replaced in tests). */
  confirm: (text: string) => boolean = (text) => window.confirm(text);

  constructor(api: Api, host: ScrubberHost) {
    this.api = api;
    this.host = host;
    this.range.addEventListener("input", () => {
      clearTimeout(this.debounce);
      const t = Number(this.range.value);
      this.debounce = setTimeout(() => void this.load(t), 60);
    });
    this.zoneSelect.addEventListener("change", () => {
      this.live();
      void this.refresh();
    });
    this.rewindButton.addEventListener("click", () => void this.rewind());
    this.root = h(
      "div",
      { class: "scrubber", testid: "scrubber", hidden: true },
      h("span", { class: "label" }, "History"),
      this.zoneSelect,
      h("button", { testid: "scrub-back", title: "one tick back", onclick: () => void this.step(-1) }, "◀ 1"),
      this.range,
      h("button", { testid: "scrub-forward", title: "one tick forward", onclick: () => void this.step(1) }, "1 ▶"),
      h("button", { testid: "scrub-live", onclick: () => this.live() }, "Live"),
      this.tickLabel,
      this.rewindButton,
      this.message,
    );
  }

  /** The zones watched: the scrubber shows when one keeps a history. */
  setZones(zones: readonly ZoneInfo[]): void {
    this.zones = zones.filter((z) => z.history);
    this.live();
    fill(this.zoneSelect, ...this.zones.map((z) => h("option", { value: z.ref }, zoneLabel(z))));
    show(this.zoneSelect, this.zones.length > 1);
    show(this.root, this.zones.length > 0);
    clearInterval(this.poll);
    this.bounds = null;
    if (this.zones.length === 0) return;
    void this.refresh();
    // The kept ticks move on while the zone runs: the slider's ends follow while live.
    this.poll = setInterval(() => {
      if (this.tick === null) void this.refresh();
    }, 3000);
  }

  get zone(): ZoneInfo | null {
    return this.zones.find((z) => z.ref === this.zoneSelect.value) ?? this.zones[0] ?? null;
  }

  stop(): void {
    clearInterval(this.poll);
    clearTimeout(this.debounce);
    this.zones = [];
    this.tick = null;
    show(this.root, false);
  }

  private async refresh(): Promise<void> {
    const z = this.zone;
    if (z === null) return;
    try {
      this.bounds = await this.api.historyRange(z.ref);
    } catch (e) {
      this.say(e);
      return;
    }
    this.range.min = String(this.bounds.oldest);
    this.range.max = String(this.bounds.newest);
    if (this.tick === null) this.range.value = String(this.bounds.newest);
    this.label();
  }

  private label(): void {
    const b = this.bounds;
    const kept = b === null ? "" : ` (kept ${b.oldest}–${b.newest})`;
    this.tickLabel.textContent = this.tick === null ? `live${kept}` : `tick ${this.tick}${kept}`;
    this.rewindButton.disabled = this.tick === null;
  }

  private async step(d: number): Promise<void> {
    if (this.bounds === null) await this.refresh();
    const b = this.bounds;
    if (b === null) return;
    const from = this.tick ?? b.newest;
    const t = Math.min(b.newest, Math.max(b.oldest, from + d));
    this.range.value = String(t);
    await this.load(t);
  }

  /** Shows the zone at tick `t` (the newest request wins). */
  async load(t: number): Promise<void> {
    const z = this.zone;
    if (z === null) return;
    const seq = ++this.seq;
    try {
      const state = await this.api.historyState(z.ref, t);
      if (seq !== this.seq) return;
      this.tick = state.tick;
      this.message.textContent = "";
      this.label();
      this.host.showHistory(state, z);
    } catch (e) {
      if (seq === this.seq) this.say(e);
    }
  }

  live(): void {
    this.seq++;
    this.tick = null;
    if (this.bounds !== null) this.range.value = String(this.bounds.newest);
    this.label();
    this.host.showHistory(null, null);
  }

  private async rewind(): Promise<void> {
    const z = this.zone;
    const t = this.tick;
    if (z === null || t === null) return;
    if (!this.confirm(`Rewind zone ${zoneLabel(z)} (${z.id}) to tick ${t}? Everything after it is lost.`)) return;
    try {
      await this.api.rewind(z.ref, t);
      this.message.textContent = `rewound to tick ${t}`;
      this.live();
      await this.refresh();
    } catch (e) {
      this.say(e);
    }
  }

  private say(e: unknown): void {
    if (e instanceof OverworldHttpError && e.status !== 401) this.message.textContent = e.message || e.code;
    else this.host.failed(e);
  }
}
