// The overview: the fleet at a glance for the last hour, day or week (GET /api/v1/stats), in
// five charts, each with its table twin holding the numbers the API answered.

import * as api from "../api.js";
import { dataTable, figure, hbars, msText, s, ticks, title } from "../charts.js";
import { h, message } from "../dom.js";
import { shortTime, timeEl } from "../format.js";

export const WINDOWS = { "1h": "Last hour", "24h": "Last 24 hours", "7d": "Last 7 days" };
const ENDED = ["completed", "failed", "cancelled"];
// How often a window is read again while the page is open: a week's numbers move slowly, and
// counting them costs the store more than an hour's.
const EVERY_MS = { "1h": 2000, "24h": 10_000, "7d": 30_000 };

const num = (n) => String(n);
const runs = (n) => `${n} run${n === 1 ? "" : "s"}`;
const LEGEND = [["started", "swatch started"], ...ENDED.map((k) => [k, `swatch o-${k}`])];
const ms = (v) => (v === null || v === undefined ? "—" : String(v));
const money = (v) => `$${v < 1 ? v.toFixed(4) : v.toFixed(2)}`;

/** Runs over time: per interval, runs started (a bar) and runs ended, stacked by status. */
function runsChart(fig, stats) {
  const buckets = stats.buckets;
  const width = 640;
  const left = 40;
  const top = 10;
  const plotH = 160;
  const height = top + plotH + 44;
  const max = Math.max(0, ...buckets.map((b) => Math.max(b.started, ENDED.reduce((a, k) => a + (b.finished[k] || 0), 0))));
  const scale = ticks(max, 4, true);
  const end = scale[scale.length - 1] || 1;
  const slot = (width - left - 10) / Math.max(1, buckets.length);
  const bar = Math.max(1, slot / 2 - 2);
  const y = (v) => top + plotH - (v / end) * plotH;
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, class: "columns" });
  for (const v of scale) {
    svg.append(s("line", { x1: left, x2: width - 10, y1: y(v), y2: y(v), class: "grid" }),
      s("text", { x: left - 6, y: y(v) + 4, class: "tick", "text-anchor": "end", text: String(v) }));
  }
  const every = Math.ceil(buckets.length / 6);
  buckets.forEach((b, i) => {
    const x = left + i * slot + 1;
    const when = shortTime(b.start);
    if (b.started) {
      svg.append(s("rect", { x, y: y(b.started), width: bar, height: y(0) - y(b.started), class: "bar started" },
        title(`${when}: ${b.started} started`)));
    }
    let at = 0;
    for (const k of ENDED) {
      const n = b.finished[k] || 0;
      if (!n) continue;
      svg.append(s("rect", { x: x + bar + 1, y: y(at + n), width: bar, height: y(at) - y(at + n), class: `bar o-${k}` },
        title(`${when}: ${n} ${k}`)));
      at += n;
    }
    if (i % every === 0) svg.append(s("text", { x: x + bar, y: top + plotH + 18, class: "tick", "text-anchor": "middle", text: when }));
  });
  const legend = s("g", { class: "legend", "aria-hidden": "true" });
  LEGEND.forEach(([word, cls], i) => {
    const lx = left + i * 110;
    legend.append(s("rect", { x: lx, y: height - 14, width: 10, height: 10, class: cls }),
      s("text", { x: lx + 14, y: height - 5, class: "tick", text: word }));
  });
  svg.append(legend);
  const started = buckets.reduce((a, b) => a + b.started, 0);
  const ended = Object.fromEntries(ENDED.map((k) => [k, buckets.reduce((a, b) => a + (b.finished[k] || 0), 0)]));
  fig.draw(svg, () => dataTable("Runs over time table", [
    { title: "Interval from" }, { title: "Started", num: true },
    ...ENDED.map((k) => ({ title: k[0].toUpperCase() + k.slice(1), num: true })),
  ], buckets.map((b) => [timeEl(b.start), num(b.started), ...ENDED.map((k) => num(b.finished[k] || 0))])),
  `${runs(started)} started; ${ENDED.map((k) => `${ended[k]} ${k}`).join(", ")}. Left bar of each interval: started; right: ended, by status.`);
}

function latencyChart(fig, steps) {
  const timed = steps.filter((st) => st.p95_ms !== null).sort((a, b) => b.p95_ms - a.p95_ms);
  const svg = hbars(timed.map((st) => ({
    label: st.name,
    parts: [
      { value: st.p50_ms, cls: "p50", title: `${st.name}: p50 ${msText(st.p50_ms)}` },
      { value: st.p95_ms - st.p50_ms, cls: "p95", title: `${st.name}: p95 ${msText(st.p95_ms)}` },
    ],
    text: `p50 ${msText(st.p50_ms)} · p95 ${msText(st.p95_ms)}`,
  })), { unit: msText });
  fig.draw(svg, () => dataTable("Step latency table", [
    { title: "Step" }, { title: "Attempts", num: true }, { title: "p50 (ms)", num: true }, { title: "p95 (ms)", num: true },
  ], steps.map((st) => [st.name, num(st.attempts), ms(st.p50_ms), ms(st.p95_ms)])),
  "Dark: the median attempt (p50); light: up to the 95th percentile (p95).");
}

function failuresChart(fig, steps) {
  const failing = steps.filter((st) => st.failures).sort((a, b) => b.failures - a.failures);
  const svg = hbars(failing.map((st) => ({
    label: st.name,
    parts: [{ value: st.failures, cls: "o-failed", title: `${st.name}: ${st.failures} of ${st.attempts} attempts failed` }],
    text: `${st.failures} of ${st.attempts} (${Math.round((100 * st.failures) / st.attempts)}%)`,
  })), { integer: true });
  fig.draw(svg, () => dataTable("Failures by step table", [
    { title: "Step" }, { title: "Failures", num: true }, { title: "Attempts", num: true },
  ], steps.map((st) => [st.name, num(st.failures), num(st.attempts)])),
  failing.length ? "Failed attempts by step, most first (a retried attempt that failed counts)." : "No attempt failed in this window.");
}

function costChart(fig, workflows) {
  const spent = workflows.slice().sort((a, b) => b.cost - a.cost || b.input_tokens - a.input_tokens);
  const svg = hbars(spent.map((w) => ({
    label: w.name,
    parts: [{ value: w.cost, cls: "cost", title: `${w.name}: ${money(w.cost)}, ${w.input_tokens} in / ${w.output_tokens} out tokens, ${runs(w.runs)}` }],
    text: `${money(w.cost)} · ${(w.input_tokens + w.output_tokens).toLocaleString()} tokens`,
  })), { unit: (v) => `$${v}` });
  fig.draw(svg, () => dataTable("Cost by workflow table", [
    { title: "Workflow" }, { title: "Runs", num: true }, { title: "Input tokens", num: true },
    { title: "Output tokens", num: true }, { title: "Cost (USD)", num: true },
  ], workflows.map((w) => [w.name, num(w.runs), num(w.input_tokens), num(w.output_tokens), String(w.cost)])),
  "What the runs created in this window have spent so far, by workflow.");
}

function queueChart(fig, queues) {
  const svg = hbars(queues.map((q) => ({
    label: q.name,
    parts: [
      { value: q.running, cls: "o-running", title: `${q.name}: ${q.running} running` },
      { value: q.pending, cls: "o-pending", title: `${q.name}: ${q.pending} pending` },
    ],
    text: `${q.running} running · ${q.pending} pending`,
  })), { integer: true });
  fig.draw(svg, () => dataTable("Queue depth table", [
    { title: "Queue" }, { title: "Pending", num: true }, { title: "Running", num: true },
  ], queues.map((q) => [q.name, num(q.pending), num(q.running)]), "No queue yet."),
  "Now, whatever the window: runs running (dark) and waiting to start (light) by queue.");
}

export default function overview(ctx, _arg, params) {
  let window = "24h";
  const error = message();
  const notice = message(); // an address naming no window: said, and the address corrected
  const picker = h("div", { class: "segmented", role: "group", "aria-label": "Window" });
  const figs = {
    runs: figure("Runs over time"),
    latency: figure("Step latency"),
    failures: figure("Failures by step"),
    cost: figure("Cost by workflow"),
    queues: figure("Queue depth"),
  };
  const el = h("section", { class: "view overview" },
    h("div", { class: "section-head" }, h("h1", { text: "Overview" }), picker),
    notice.el,
    error.el,
    h("div", { class: "charts" }, Object.values(figs).map((f) => f.el)));
  let seen = "";
  let readAt = -Infinity; // when the window was last read (performance.now())

  function buttons() {
    picker.replaceChildren(...Object.entries(WINDOWS).map(([key, label]) => h("button", {
      type: "button", class: key === window ? "on" : "quiet", "aria-pressed": String(key === window),
      title: label, text: key, on: { click: () => choose(key) },
    })));
  }

  /** The window an address names: a known one, or (said, and the address corrected) 24h. */
  function known(given) {
    if (given === undefined || given === null || WINDOWS[given]) return given ? given : "24h";
    notice.error(`window=${given} is not a window the overview draws: showing the last 24 hours. Choose 1h, 24h or 7d.`);
    ctx.setParams({ window: "24h" });
    return "24h";
  }

  function choose(key) {
    notice.clear();
    window = key;
    ctx.setParams({ window: key });
    buttons();
    seen = "";
    readAt = -Infinity;
    ctx.refresh();
  }

  async function refresh({ forced = false } = {}) {
    if (!forced && performance.now() - readAt < EVERY_MS[window] - 100) return;
    readAt = performance.now();
    let answer;
    try {
      answer = await api.get("/stats", { window });
    } catch (err) {
      readAt = -Infinity; // read again at the next poll
      error.error(`Cannot read the overview: ${err.message}`);
      if (err.status === 0) throw err;
      return;
    }
    error.clear();
    if (answer.text === seen) return;
    seen = answer.text;
    const stats = answer.data;
    runsChart(figs.runs, stats);
    latencyChart(figs.latency, stats.steps);
    failuresChart(figs.failures, stats.steps);
    costChart(figs.cost, stats.workflows);
    queueChart(figs.queues, stats.queues);
    el.dataset.window = stats.window;
  }

  window = known(params.window);
  buttons();
  return {
    el,
    title: "Overview",
    refresh,
    update(next) {
      const key = known(next.window);
      if (key !== window) choose(key);
    },
  };
}
