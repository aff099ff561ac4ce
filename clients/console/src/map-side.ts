// The map's side bar lists: the zones and worlds to watch, and the legend of the colours.
import type { ZoneInfo } from "./api.js";
import { css, type ColourTable } from "./colors.js";
import { h } from "./dom.js";
import type { Target } from "./layout.js";

/** The list items of the watch targets: a button each (`data-zone`: the name watched), and its figures. */
export function zoneItems(ts: readonly Target[], current: string | null, watch: (t: Target) => void): HTMLElement[] {
  if (ts.length === 0) return [h("li", { class: "dim" }, "no zones")];
  return ts.map((t) =>
    h(
      "li",
      { class: current === t.name ? "current" : "" },
      h("button", { testid: "zone-item", "data-zone": t.name, onclick: () => watch(t) }, t.name),
      h("span", { class: "dim" }, t.world ? ` world of ${t.zones.length} zones` : ` ${t.zones[0]?.module ?? ""}`),
      h("span", { class: "dim" }, ` · ${sum(t.zones, (z) => z.entities)} entities · ${sum(t.zones, (z) => z.players)} players`),
    ),
  );
}

function sum(zones: readonly ZoneInfo[], f: (z: ZoneInfo) => number | null): string {
  let n = 0;
  let any = false;
  for (const z of zones) {
    const v = f(z);
    if (v !== null) {
      n += v;
      any = true;
    }
  }
  return any ? String(n) : "–";
}

/** The legend: each colour slot with its count in the scene, then the rings' meanings. */
export function legendItems(colours: ColourTable, perSlot: readonly number[]): HTMLElement[] {
  const slots: HTMLElement[] = [];
  for (let slot = 0; slot < colours.size; slot++) {
    const n = perSlot[slot] ?? 0;
    if (n === 0 && slot === colours.unknown) continue;
    slots.push(h("div", { "data-slot": slot }, h("span", { class: `swatch swatch-${slot}` }), ` ${colours.labels[slot]} (${n})`));
  }
  return [
    ...slots,
    h("div", {}, h("span", { class: "swatch ring-band" }), " in a border band (not handed yet)"),
    h("div", {}, h("span", { class: "swatch ring-handed" }), " handed to the next zone"),
    h("div", { class: "dim" }, "darker: in a cell the server held back (an older tick)"),
  ];
}

let sheet: CSSStyleSheet | null = null;

/** The swatches' colours, from the zone's templates: a style sheet rule per slot (the page's CSP allows no inline style). */
export function swatchColours(colours: ColourTable): void {
  if (typeof CSSStyleSheet === "undefined" || !("adoptedStyleSheets" in document)) return;
  if (sheet === null) {
    sheet = new CSSStyleSheet();
    document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
  }
  sheet.replaceSync(colours.rgb.map((c, i) => `.swatch-${i}{background:${css(c)}}`).join("\n"));
}
