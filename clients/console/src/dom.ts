// A few lines of DOM building: elements with attributes, listeners and children. `testid` sets
// `data-testid` (the stable hooks browser tests drive); no inline styles (the page's CSP
// forbids them: classes only).

type Child = Node | string | number | null | undefined | false;
type Attr = string | number | boolean | null | undefined | EventListener;

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Record<string, Attr> = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (typeof value === "function") el.addEventListener(name.replace(/^on/, ""), value);
    else if (name === "testid") el.dataset.testid = String(value);
    else if (name === "class") el.className = String(value);
    else if (name === "text") el.textContent = String(value);
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, String(value));
  }
  append(el, children);
  return el;
}

export function append(el: Element, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    el.append(typeof c === "number" ? String(c) : c);
  }
}

/** Replaces an element's children. */
export function fill(el: Element, ...children: Child[]): void {
  el.replaceChildren();
  append(el, children);
}

/** A table with a header row; `rows` of cells (a string or a node each). */
export function table(testid: string, head: string[], rows: Child[][], rowTestid?: string): HTMLTableElement {
  return h(
    "table",
    { testid },
    h("thead", {}, h("tr", {}, ...head.map((c) => h("th", {}, c)))),
    h("tbody", {}, ...rows.map((r) => h("tr", { testid: rowTestid }, ...r.map((c) => h("td", {}, c))))),
  );
}

export function show(el: HTMLElement, visible: boolean): void {
  el.hidden = !visible;
}
