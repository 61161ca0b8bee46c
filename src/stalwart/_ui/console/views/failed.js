// Failed runs, the dead-letter queue: select some (or all shown) and retry them; each resumes
// from its failed step with a fresh attempt budget.

import * as api from "../api.js";
import { h, message, replace } from "../dom.js";
import { runHead, runRow } from "./runs.js";

const PAGE = 100;

export default function failed(ctx, _arg, params) {
  let state = { name: params.name || "", before: params.before || "" };
  const selected = new Set();
  let shown = [];
  let seen = "";

  const all = h("input", { type: "checkbox", "aria-label": "Select all" });
  const retry = h("button", { type: "button", class: "primary", disabled: true, text: "Retry selected" });
  const picked = h("span", { class: "muted", "aria-live": "polite" });
  const name = h("input", { type: "search", autocomplete: "off", placeholder: "any", "aria-label": "Workflow", value: state.name });
  const body = h("tbody");
  const pager = h("nav", { class: "pager", "aria-label": "Pages" });
  const summary = h("p", { class: "summary muted" });
  const msg = message();
  const results = h("ul", { class: "results" });
  const error = message();

  const el = h("section", { class: "view" },
    h("div", { class: "view-head" }, h("h1", { text: "Failed runs" }),
      h("p", { class: "muted", text: "The dead-letter queue: fix the cause, then retry; each run resumes from its failed step." })),
    h("div", { class: "toolbar" }, retry, picked, h("label", { class: "inline" }, "Workflow ", name)),
    msg.el, results, error.el,
    h("div", { class: "table-wrap" }, h("table", { class: "runs" }, runHead(all), body)),
    h("div", { class: "table-foot" }, summary, pager));

  function syncSelection() {
    for (const id of [...selected]) if (!shown.some((r) => r.workflow_id === id)) selected.delete(id);
    const n = selected.size;
    retry.disabled = n === 0;
    retry.textContent = n ? `Retry selected (${n})` : "Retry selected";
    picked.textContent = n ? `${n} of ${shown.length} selected` : "";
    all.checked = n > 0 && n === shown.length;
    all.indeterminate = n > 0 && n < shown.length;
    for (const box of body.querySelectorAll("input[type=checkbox]")) box.checked = selected.has(box.dataset.id);
  }

  all.addEventListener("change", () => {
    selected.clear();
    if (all.checked) for (const r of shown) selected.add(r.workflow_id);
    syncSelection();
  });

  let debounce = null;
  name.addEventListener("input", () => {
    clearTimeout(debounce);
    debounce = setTimeout(() => {
      state = { name: name.value.trim(), before: "" };
      ctx.setParams(state);
      ctx.refresh();
    }, 350);
  });

  retry.addEventListener("click", async () => {
    const ids = shown.map((r) => r.workflow_id).filter((id) => selected.has(id));
    retry.disabled = true;
    msg.clear();
    replace(results);
    const refused = [];
    for (const id of ids) {
      try {
        await api.post(api.runPath(id, "/retry"));
        selected.delete(id);
      } catch (err) {
        refused.push([id, err]);
        if (err.status === 401) break;
      }
    }
    const done = ids.length - refused.length;
    if (refused.length) {
      msg.error(`${done} retried, ${refused.length} refused:`);
      replace(results, refused.map(([id, err]) => h("li", {}, h("code", { text: id }), ` ${err.type}: ${err.message}`)));
    } else {
      msg.ok(`Retried ${done} run${done === 1 ? "" : "s"}: workers pick them up again.`);
    }
    seen = "";
    ctx.refresh();
  });

  function row(r) {
    const box = h("input", { type: "checkbox", "aria-label": `Select ${r.workflow_id}`, data: { id: r.workflow_id } });
    box.addEventListener("change", () => {
      if (box.checked) selected.add(r.workflow_id);
      else selected.delete(r.workflow_id);
      syncSelection();
    });
    return runRow(ctx, r, { leading: box });
  }

  async function refresh() {
    let result;
    try {
      result = await api.get("/runs", { status: "failed", name: state.name, before: state.before, limit: PAGE });
    } catch (err) {
      error.error(`Cannot list failed runs: ${err.message}`);
      if (err.status === 0) throw err;
      return;
    }
    error.clear();
    if (result.text === seen) return;
    seen = result.text;
    const { data } = result;
    shown = data.runs;
    replace(body, shown.length ? shown.map(row)
      : h("tr", {}, h("td", { colspan: 8, class: "empty", text: "No failed runs. The dead-letter queue is empty." })));
    syncSelection();
    const total = data.counts.failed || 0;
    summary.textContent = `${shown.length} of ${total.toLocaleString()} failed run${total === 1 ? "" : "s"}`;
    replace(pager,
      state.before ? h("a", { href: ctx.link("failed", { ...state, before: "" }), text: "← Newest" }) : null,
      data.more ? h("a", { href: ctx.link("failed", { ...state, before: data.next_before }), text: "Older →" }) : null);
  }

  return {
    el,
    title: "Failed runs",
    update(p) {
      state = { name: p.name || "", before: p.before || "" };
      name.value = state.name;
      seen = "";
    },
    refresh,
  };
}
