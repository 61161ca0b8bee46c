// Runs: every run, newest first, filtered by status (with the count of each), workflow name,
// queue and creation time, paged with next_before. The filters live in the URL.

import * as api from "../api.js";
import { act, field, h, message, replace, show } from "../dom.js";
import {
  STATUSES, TERMINAL, ZONE, badge, between, duration, isoToLocalInput, localInputToIso, oneLine, timeEl,
} from "../format.js";

const PAGE = 50;
const WITHIN = { "": "Any time", "15m": "Last 15 minutes", "1h": "Last hour", "24h": "Last 24 hours", "7d": "Last 7 days", custom: "Between…" };
const SECONDS = { "15m": 900, "1h": 3600, "24h": 86_400, "7d": 604_800 };
const KEYS = ["status", "name", "queue", "within", "since", "until", "before", "limit"];

function clean(params) {
  const state = {};
  for (const key of KEYS) if (params[key]) state[key] = params[key];
  if (state.status && !STATUSES.includes(state.status)) delete state.status;
  if (state.within !== "custom") {
    delete state.since;
    delete state.until;
  }
  if (state.limit && !(Number(state.limit) >= 1 && Number(state.limit) <= 1000)) delete state.limit;
  return state;
}

/** The API's query for a state: a preset window becomes `since`, a custom end `before`. */
function query(state) {
  let since = null;
  if (state.within && SECONDS[state.within]) since = new Date(Date.now() - SECONDS[state.within] * 1000).toISOString();
  else if (state.within === "custom") since = state.since || null;
  const until = state.within === "custom" ? state.until : null;
  return {
    status: state.status, name: state.name, queue: state.queue, since,
    before: state.before || until, limit: state.limit || PAGE,
  };
}

/** One row of a run table (also used by the failed list). */
export function runRow(ctx, run, { leading = null } = {}) {
  const terminal = TERMINAL.has(run.status);
  const took = between(run.created_at, terminal ? run.updated_at : null);
  const note = run.error
    ? h("span", { class: "error-text", title: run.error, text: oneLine(run.error, 140) })
    : run.waiting_for
      ? h("span", { class: "waiting", title: run.waiting_for, text: oneLine(run.waiting_for, 80) })
      : null;
  return h("tr", { data: { id: run.workflow_id } },
    leading ? h("td", { class: "pick" }, leading) : null,
    h("td", { class: "id" }, h("a", { href: ctx.link("run", {}, run.workflow_id), text: run.workflow_id })),
    h("td", { text: run.name }),
    h("td", {}, badge(run.status)),
    h("td", { class: "muted", text: run.queue }),
    h("td", { class: "note" }, note),
    h("td", { class: "time" }, timeEl(run.created_at)),
    h("td", { class: ["num", terminal ? "" : "live-num"], title: terminal ? "" : "so far", text: duration(took) }),
  );
}

export function runHead(leading = null) {
  return h("thead", {}, h("tr", {},
    leading ? h("th", { class: "pick", scope: "col" }, leading) : null,
    ["Run", "Workflow", "Status", "Queue", "Waiting for / error", `Created (${ZONE})`, "Duration"].map(
      (t) => h("th", { scope: "col", text: t })),
  ));
}

export default function runs(ctx, _arg, params) {
  let state = clean(params);
  let seen = "";
  let asked = 0;

  const chips = h("nav", { class: "chips", "aria-label": "Status" });
  const name = h("input", { type: "search", list: "names", autocomplete: "off", placeholder: "any" });
  const queue = h("input", { type: "search", list: "queues", autocomplete: "off", placeholder: "any" });
  const names = h("datalist", { id: "names" });
  const queues = h("datalist", { id: "queues" });
  const within = h("select", {}, Object.entries(WITHIN).map(([v, t]) => h("option", { value: v, text: t })));
  const since = h("input", { type: "datetime-local" });
  const until = h("input", { type: "datetime-local" });
  const range = h("div", { class: "range" }, field("After", since), field("Before", until));
  const goId = h("input", { type: "search", autocomplete: "off", spellcheck: "false", placeholder: "workflow id" });
  const goButton = h("button", { type: "submit", text: "Open" });
  const goMsg = message();
  const body = h("tbody");
  const summary = h("p", { class: "summary muted" });
  const pager = h("nav", { class: "pager", "aria-label": "Pages" });
  const error = message();

  const filters = h("form", { class: "filters", role: "search", on: { submit: (e) => e.preventDefault() } },
    field("Workflow", name), field("Queue", queue), field("Time", within), range, names, queues);
  const go = h("form", { class: "go", on: { submit: open } }, field("Run id", goId), goButton, goMsg.el);

  const el = h("section", { class: "view" },
    h("h1", { text: "Runs" }),
    chips, h("div", { class: "filter-row" }, filters, go), error.el,
    h("div", { class: "table-wrap" }, h("table", { class: "runs" }, runHead(), body)),
    h("div", { class: "table-foot" }, summary, pager),
  );

  function syncInputs() {
    name.value = state.name || "";
    queue.value = state.queue || "";
    within.value = state.within || "";
    since.value = isoToLocalInput(state.since);
    until.value = isoToLocalInput(state.until);
    show(range, state.within === "custom");
  }

  let debounce = null;
  function changed(now = false) {
    clearTimeout(debounce);
    const apply = () => {
      state = clean({
        status: state.status, limit: state.limit, name: name.value.trim(), queue: queue.value.trim(), within: within.value,
        since: localInputToIso(since.value), until: localInputToIso(until.value),
      });
      show(range, state.within === "custom");
      ctx.setParams(state);
      ctx.refresh();
    };
    if (now) apply();
    else debounce = setTimeout(apply, 350);
  }
  name.addEventListener("input", () => changed());
  queue.addEventListener("input", () => changed());
  for (const input of [within, since, until]) input.addEventListener("change", () => changed(true));

  async function open(event) {
    event.preventDefault();
    const id = goId.value.trim();
    if (!id) return;
    await act(goButton, goMsg, async () => {
      await api.get(api.runPath(id));
      ctx.navigate(ctx.link("run", {}, id));
    });
  }

  function renderChips(counts) {
    const total = Object.values(counts).reduce((a, b) => a + b, 0);
    const chip = (status, label, n) => h("a", {
      class: ["chip", status ? `s-${status}` : "", n ? "" : "zero"],
      href: ctx.link("runs", { ...state, status, before: null }),
      "aria-current": (state.status || null) === status ? "true" : null,
    }, h("span", { text: label }), " ", h("span", { class: "n", text: n.toLocaleString() }));
    replace(chips, chip(null, "All", total), STATUSES.map((s) => chip(s, s.replace("_", " "), counts[s] || 0)));
  }

  function renderPager(data) {
    const parts = [];
    if (state.before) parts.push(h("a", { href: ctx.link("runs", { ...state, before: null }), text: "← Newest" }));
    if (data.more) parts.push(h("a", { href: ctx.link("runs", { ...state, before: data.next_before }), text: "Older →" }));
    replace(pager, parts);
  }

  async function refresh() {
    const n = ++asked;
    let result;
    try {
      result = await api.get("/runs", query(state));
    } catch (err) {
      if (n === asked) error.error(`Cannot list runs: ${err.message}`);
      if (err.status === 0) throw err;
      return;
    }
    if (n !== asked) return; // the filters changed while it was on its way
    error.clear();
    const key = JSON.stringify([state, result.text]);
    const { data } = result;
    renderChips(data.counts);
    // Durations of live runs tick, so rows are rebuilt on every poll; nothing in them keeps state.
    replace(body, data.runs.length
      ? data.runs.map((r) => runRow(ctx, r))
      : h("tr", {}, h("td", { colspan: 7, class: "empty", text: "No runs match these filters." })));
    const shown = data.runs.length;
    const total = state.status ? data.counts[state.status] || 0 : Object.values(data.counts).reduce((a, b) => a + b, 0);
    summary.textContent = state.before
      ? `${shown} older runs shown`
      : `${shown} of ${total.toLocaleString()} ${state.status ? state.status.replace("_", " ") : ""} run${total === 1 ? "" : "s"}${state.within || state.name || state.queue ? " matching" : ""}`.replace("  ", " ");
    renderPager(data);
    if (key !== seen) {
      seen = key;
      const nameSet = new Set(data.runs.map((r) => r.name));
      const queueSet = new Set(data.runs.map((r) => r.queue));
      for (const o of names.children) nameSet.add(o.value);
      for (const o of queues.children) queueSet.add(o.value);
      replace(names, [...nameSet].sort().map((v) => h("option", { value: v })));
      replace(queues, [...queueSet].sort().map((v) => h("option", { value: v })));
    }
  }

  syncInputs();
  return {
    el,
    title: "Runs",
    update(params2) {
      state = clean(params2);
      syncInputs();
    },
    refresh,
  };
}
