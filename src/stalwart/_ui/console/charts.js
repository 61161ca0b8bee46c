// Pictures in plain SVG, drawn in the page (no library, nothing fetched): each chart is an
// <svg role="img"> named for screen readers, with a "Show as table" twin that holds the same
// numbers (for screen readers, and to copy them). Values reach the SVG as text nodes only.

import { h, setAttr, uid } from "./dom.js";

const NS = "http://www.w3.org/2000/svg";

/** An SVG element: s("rect", {x: 1, class: "bar"}, child, ...); children as in dom.h. */
export function s(tag, props = {}, ...children) {
  const el = document.createElementNS(NS, tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "text") el.textContent = String(value);
    else if (key === "on") for (const [name, fn] of Object.entries(value)) el.addEventListener(name, fn);
    else if (key === "data") for (const [name, v] of Object.entries(value)) el.dataset[name] = String(v);
    else setAttr(el, key, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** A <title> child: what a bar says on hover (and to assistive technology inside it). */
export function title(text) {
  return s("title", { text });
}

/** Round numbers for an axis from 0 to max: about n ticks at 1, 2 or 5 times a power of ten
 * (whole numbers only when `integer`, for counts). */
export function ticks(max, n = 4, integer = false) {
  if (!(max > 0)) return integer ? [0, 1] : [0];
  const raw = integer ? Math.max(1, max / n) : max / n;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((v) => v >= raw);
  const out = [];
  for (let v = 0; v <= max + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  if (out[out.length - 1] < max) out.push(Number((out[out.length - 1] + step).toPrecision(12)));
  return out;
}

/** A table: columns [{title, num}], rows of cells (text or nodes). */
export function dataTable(label, columns, rows, emptyText = "Nothing in this window.") {
  return h("div", { class: "table-wrap" }, h("table", { "aria-label": label },
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col", class: c.num ? "num" : null, text: c.title })))),
    h("tbody", {}, rows.length
      ? rows.map((cells) => h("tr", {}, cells.map((cell, i) => h("td", { class: columns[i].num ? "num" : null }, cell))))
      : h("tr", {}, h("td", { colspan: columns.length, class: "empty", text: emptyText })))));
}

/**
 * A chart and its table twin: a figure named `name` holding the SVG (role="img", the name as
 * its accessible name, `summary` as its description) and a "Show as table" button that shows
 * the table `makeTable()` builds (built when first shown, and again on each update while shown).
 */
export function figure(name, { note = "" } = {}) {
  const tableBox = h("div", { class: "twin", id: uid("twin"), hidden: true });
  const toggle = h("button", { type: "button", class: "quiet small", "aria-expanded": "false", "aria-controls": tableBox.id, text: "Show as table" });
  const desc = h("p", { class: "muted small chart-note", id: uid("desc"), text: note });
  const plot = h("div", { class: "plot" });
  const el = h("figure", { class: "chart", "aria-label": name },
    h("figcaption", {}, h("span", { class: "chart-name", text: name }), toggle), desc, plot, tableBox);
  let makeTable = () => null;
  const fill = () => {
    tableBox.replaceChildren();
    const table = makeTable();
    if (table) tableBox.append(table);
  };
  toggle.addEventListener("click", () => {
    const open = tableBox.hidden;
    tableBox.hidden = !open;
    toggle.setAttribute("aria-expanded", String(open));
    toggle.textContent = open ? "Hide table" : "Show as table";
    if (open) fill();
  });
  return {
    el,
    /** Show `svg` (given role="img" and the chart's name) and keep `table` for the twin. */
    draw(svg, table, text = null) {
      setAttr(svg, "role", "img");
      setAttr(svg, "aria-label", name);
      setAttr(svg, "aria-describedby", desc.id);
      if (text !== null) desc.textContent = text;
      plot.replaceChildren(svg);
      makeTable = table;
      if (!tableBox.hidden) fill();
    },
  };
}

/**
 * Horizontal bars, one row per item: items [{label, parts: [{value, cls, title}], text}] where
 * parts stack left to right; `text` is written after the bar. Returns the SVG.
 */
export function hbars(items, { width = 640, gutter = 150, unit = (v) => String(v), integer = false } = {}) {
  const row = 24;
  const right = 170;
  const top = 22;
  const height = top + Math.max(1, items.length) * row + 6;
  const max = Math.max(0, ...items.map((it) => it.parts.reduce((a, p) => a + (p.value || 0), 0)));
  const scale = ticks(max, 4, integer);
  const end = scale[scale.length - 1] || 1;
  const plotW = width - gutter - right;
  const x = (v) => gutter + (v / end) * plotW;
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, class: "hbars", preserveAspectRatio: "xMinYMin meet" });
  for (const v of scale) {
    svg.append(s("line", { x1: x(v), x2: x(v), y1: top - 4, y2: height - 4, class: "grid" }),
      s("text", { x: x(v), y: top - 8, class: "tick", "text-anchor": "middle", text: unit(v) }));
  }
  if (!items.length) svg.append(s("text", { x: gutter, y: top + 16, class: "tick", text: "nothing in this window" }));
  items.forEach((it, i) => {
    const y = top + i * row;
    svg.append(s("text", { x: gutter - 8, y: y + 15, class: "label", "text-anchor": "end", text: clip(it.label, 22) }, title(it.label)));
    let at = 0;
    for (const p of it.parts) {
      if (!p.value) continue;
      svg.append(s("rect", { x: x(at), y: y + 4, width: Math.max(1, x(at + p.value) - x(at)), height: row - 8, class: ["bar", p.cls].join(" ") }, title(p.title)));
      at += p.value;
    }
    svg.append(s("text", { x: x(at) + 6, y: y + 15, class: "value", text: it.text }));
  });
  return svg;
}

/** Milliseconds as a person reads them: "0.42 ms", "3.1 ms", "250 ms", "4.2 s". */
export function msText(v) {
  if (v === null || v === undefined) return "—";
  if (v < 1) return `${Number(v.toFixed(2))} ms`;
  if (v < 10) return `${Number(v.toFixed(1))} ms`;
  if (v < 1000) return `${Math.round(v)} ms`;
  const sec = v / 1000;
  return sec < 60 ? `${Number(sec.toFixed(sec < 10 ? 1 : 0))} s` : `${Math.floor(sec / 60)} min ${Math.round(sec % 60)} s`;
}

/** `text` cut to n characters with an ellipsis. */
export function clip(text, n) {
  const t = String(text);
  return t.length > n ? `${t.slice(0, n - 1)}…` : t;
}
