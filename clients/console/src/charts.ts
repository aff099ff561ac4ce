// The charts under the map: the last five minutes of the server's status (polled every second
// by the app into a StatusHistory) for the zones watched. (The players' table and charts are
// src/players-panel.ts.)
import { drawChart, type Line } from "./chart.js";
import { h, show } from "./dom.js";
import type { Series, StatusHistory } from "./ring.js";

const COLOURS = ["#4ab8ff", "#f0c846", "#5fbf4a", "#e8543a", "#c77dff", "#46d2c8", "#ff8cbe", "#a0c85a"];

export class ChartsPanel {
  readonly root: HTMLElement;
  private readonly history: StatusHistory;
  private readonly canvases: Record<string, HTMLCanvasElement> = {};
  private watched = "";

  constructor(history: StatusHistory) {
    this.history = history;
    const chart = (id: string) => (this.canvases[id] = h("canvas", { class: "chart", testid: `chart-${id}` }));
    this.root = h(
      "section",
      { class: "charts", testid: "charts" },
      h("div", { class: "chart-grid" }, chart("tick"), chart("phases"), chart("overruns"), chart("entities"), chart("sessions"), chart("bytes"), chart("inputs-dropped")),
    );
    show(this.canvases.phases!, false);
  }

  /** Charts the zones of a watched target (its name as clients give it). */
  watch(name: string): void {
    this.watched = name;
    this.draw();
  }

  /** The status zones of the target watched: its own name, or a world's zones. */
  private zoneNames(): string[] {
    const all = [...this.history.zones.keys()];
    if (this.watched === "") return all.slice(0, COLOURS.length);
    return all.filter((n) => n === this.watched || n.startsWith(this.watched + "/"));
  }

  draw(now = performance.now()): void {
    if (this.root.offsetParent === null) return;
    const w = this.history.windowMs;
    const names = this.zoneNames();
    const short = (n: string) => (n.startsWith(this.watched + "/") ? n.slice(this.watched.length + 1) : n);
    const per = (series: string, suffix = ""): Line[] =>
      names.flatMap((n, i) => {
        const s = this.history.zones.get(n)?.get(series);
        return s === undefined ? [] : [{ label: short(n) + suffix, colour: COLOURS[i % COLOURS.length]!, series: s }];
      });
    // A zone's p99 in its p50's colour, translucent.
    const tick = [...per("tick_p50_ms", " p50"), ...per("tick_p99_ms", " p99").map((l) => ({ ...l, colour: l.colour + "99" }))];
    drawChart(this.canvases.tick!, "Tick (ms)", "ms", tick, now, w);
    const phases: Line[] = [];
    for (const n of names) {
      const g = this.history.zones.get(n);
      if (g === undefined) continue;
      for (const [k, s] of g) if (k.startsWith("phase:")) phases.push({ label: `${short(n)} ${k.slice(6)}`, colour: COLOURS[phases.length % COLOURS.length]!, series: s });
    }
    show(this.canvases.phases!, phases.length > 0);
    if (phases.length > 0) drawChart(this.canvases.phases!, "Tick phases (ms)", "ms", phases, now, w);
    drawChart(this.canvases.overruns!, "Overruns per second", "", per("overruns_per_s"), now, w);
    drawChart(this.canvases.entities!, "Entities", "", per("entities"), now, w);
    const server = (name: string, label: string, colour: string): Line[] => {
      const s: Series | undefined = this.history.server.get(name);
      return s === undefined ? [] : [{ label, colour, series: s }];
    };
    drawChart(this.canvases.sessions!, "Sessions", "", [...server("sessions", "server", "#d6dbe4"), ...per("players")], now, w);
    drawChart(this.canvases.bytes!, "Bytes out per second", "B/s", server("bytes_out_per_s", "server", "#4ab8ff"), now, w);
    drawChart(this.canvases["inputs-dropped"]!, "Inputs dropped per second", "", server("inputs_dropped_per_s", "server", "#e8543a"), now, w);
  }
}
