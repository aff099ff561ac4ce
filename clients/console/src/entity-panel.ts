// The selected entity's panel on the map: id, template, cell and zone; its fields as the
// template decodes them; its full server-side state (operator API); the follow toggle.
import { zoneLabel, type ZoneInfo } from "./api.js";
import { fill, h, show } from "./dom.js";
import { formatField, formatJson } from "./format.js";

export interface EntitySummary {
  id: number;
  template: string;
  /** The cell key (-1: none known) and its column and row (null: outside the grid). */
  key: number;
  cell: { col: number; row: number } | null;
  zone: ZoneInfo | undefined;
}

export class EntityPanel {
  readonly root = h("div", { class: "entity", testid: "entity-panel", hidden: true });
  private readonly head = h("div", { testid: "entity-summary" });
  private readonly fieldRows = h("tbody", { testid: "entity-fields" });
  private readonly stateText = h("pre", { testid: "entity-state", class: "state" });
  private readonly followBox = h("input", { type: "checkbox", testid: "follow-toggle" });
  private open = false;

  constructor(on: { close(): void; refresh(): void }) {
    // Following needs an entity.
    this.followBox.addEventListener("change", () => this.followBox.checked && !this.open && (this.followBox.checked = false));
    fill(
      this.root,
      h("div", { class: "row" }, h("h3", {}, "Entity"), h("label", {}, this.followBox, " follow"), h("button", { testid: "entity-close", onclick: () => on.close() }, "×")),
      this.head,
      h("table", { class: "fields" }, this.fieldRows),
      h("div", { class: "row" }, h("h4", {}, "Server-side state"), h("button", { testid: "entity-refresh", onclick: () => on.refresh() }, "Refresh")),
      this.stateText,
    );
  }

  get following(): boolean {
    return this.followBox.checked;
  }

  stopFollowing(): void {
    this.followBox.checked = false;
  }

  /** Shows the panel for an entity (empty until told more), or hides it (null). */
  select(id: number | null): void {
    this.open = id !== null;
    if (id === null) this.stopFollowing();
    show(this.root, this.open);
    fill(this.head, id === null ? null : h("div", { testid: "entity-id" }, `#${id}`));
    fill(this.fieldRows);
    this.stateText.textContent = "";
  }

  /** The entity is not in the scene drawn. */
  missing(id: number): void {
    fill(this.head, h("div", { testid: "entity-id" }, `#${id}`), h("div", { class: "dim" }, "not in view"));
    fill(this.fieldRows);
  }

  summary(s: EntitySummary): void {
    const cell = s.key < 0 ? "cell –" : `cell ${s.key}${s.cell !== null && s.cell.col >= 0 ? ` (col ${s.cell.col}, row ${s.cell.row})` : ""}`;
    const zone = s.zone === undefined ? "zone –" : `zone ${zoneLabel(s.zone)}`;
    fill(
      this.head,
      h("div", { testid: "entity-id" }, `#${s.id}`),
      h("div", { testid: "entity-template" }, s.template),
      h("div", { testid: "entity-cell" }, cell),
      h("div", { testid: "entity-zone" }, zone),
    );
  }

  fields(values: Array<[string, unknown]>): void {
    fill(this.fieldRows, ...values.map(([k, v]) => h("tr", { testid: "entity-field", "data-field": k }, h("th", {}, k), h("td", {}, formatField(v)))));
  }

  /** The server-side state: any JSON, or a message. */
  state(v: unknown): void {
    this.stateText.textContent = typeof v === "string" ? v : formatJson(v);
  }
}
