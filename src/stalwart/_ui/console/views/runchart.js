// A run's timeline as a picture: a time axis from the run's start to its end (or now, while
// it runs), one lane per step name (and per wait, approval and compensation), one bar per
// attempt coloured by its outcome; backoffs between attempts, the time a dead worker left an
// attempt before a recovery, the run's suspensions and a saga's rollback drawn as labelled gaps,
// recoveries and a cancel marked. Clicking a bar shows its journal entry.
// Its table twin lists the same bars. Every draw is timed for bench/console_pictures.py:
// performance.measure "run-timeline-draw" (building and inserting the SVG) and
// "run-timeline-shown" (until the frame after it, styled, laid out and painted).

import { clip, dataTable, figure, s, title } from "../charts.js";
import { h } from "../dom.js";
import { TERMINAL, duration, parse } from "../format.js";

const WAITS = new Set(["sleep", "event", "approval", "child"]);
// Journal rows of a step or compensation that are not attempts: a compensation scheduled, a
// step marked undone by its compensation (the rollback band on the run lane shows that).
const NOT_ATTEMPTS = new Set(["scheduled", "compensated"]);
const MAX_LANES = 24;
const WIDTH = 960;
const GUTTER = 170;
const LANE = 20;
const TOP = 26;

const at = (iso) => {
  const when = parse(iso);
  return when ? when.getTime() / 1000 : null;
};

/** Whether a journal row is an attempt a worker's death interrupted. */
const interrupted = (e) => /was interrupted/.test(String(e.error || ""));

/** What the timeline draws from the journal held: {bars, gaps, marks, t0, t1}. */
export function layout(entries, run, current, nowS) {
  const bars = [];
  const gaps = [];
  const marks = [];
  const openWaits = new Map(); // seq -> bar of a wait still scheduled
  const lastFail = new Map(); // seq -> [end time, lane, interrupted] of its last failed attempt
  let suspended = null; // [time, what] of the run's open suspension
  let rollback = null; // [first, last] time of the compensations run
  let ended = null; // when the run's journal says it ended
  const t0 = at(run.created_at) ?? (entries.length ? at(entries[0].started_at || entries[0].finished_at) : nowS);
  const terminal = TERMINAL.has(run.status);
  let t1 = terminal ? at(run.updated_at) ?? nowS : nowS;
  entries.forEach((e, index) => {
    const start = at(e.started_at);
    const end = at(e.finished_at);
    if (e.kind === "step" || e.kind === "compensation") {
      if (start === null || !e.attempt || NOT_ATTEMPTS.has(e.status)) return;
      const lane = e.kind === "compensation" ? `undo ${e.name}` : e.name;
      const failed = lastFail.get(e.seq);
      if (failed && failed[1] === lane && start > failed[0]) {
        const label = failed[2] ? `worker down, then recovery ${duration(start - failed[0])}` : `backoff ${duration(start - failed[0])}`;
        gaps.push({ lane, from: failed[0], to: start, label, kind: failed[2] ? "down" : "backoff" });
      }
      lastFail.delete(e.seq);
      const cut = interrupted(e);
      if ((e.status === "failed" || e.status === "in_doubt") && end !== null) lastFail.set(e.seq, [end, lane, cut]);
      if (e.kind === "compensation") rollback = [Math.min(rollback ? rollback[0] : start, start), Math.max(rollback ? rollback[1] : 0, end ?? start)];
      // interrupted before its holder was seen alive: where it ran and for how long is unknown
      const unknown = cut && (end === null || end <= start);
      bars.push({ index, lane, from: start, to: end ?? start, outcome: e.status, unknown, e });
    } else if (WAITS.has(e.kind)) {
      const lane = e.kind === "sleep" ? "sleep" : `${e.kind} ${e.name}`;
      if (e.status === "scheduled" && start !== null) {
        const bar = { index, lane, from: start, to: null, outcome: "waiting", e };
        openWaits.set(e.seq, bar);
        bars.push(bar);
      } else if (openWaits.has(e.seq)) {
        const bar = openWaits.get(e.seq);
        bar.to = end ?? start ?? bar.from;
        bar.outcome = e.status === "completed" ? (e.kind === "approval" && e.output && e.output.approved === false ? "rejected" : "completed") : e.status;
        openWaits.delete(e.seq);
      }
    } else if (e.kind === "run") {
      const when = start ?? end;
      if (e.name === "suspended") {
        const out = e.output || {};
        suspended = [when, String(out.waiting_for || "timer").replace(":", " ")];
      } else if (e.name === "needs_attention") {
        suspended = [when, "an operator"];
      } else if (e.name === "resumed" || e.name === "finished") {
        if (suspended && when > suspended[0]) gaps.push({ lane: "run", from: suspended[0], to: when, label: `waiting for ${suspended[1]}`, kind: "waiting" });
        suspended = null;
        if (e.output && e.output.recovered_from) marks.push({ index, at: when, kind: "recovery", label: `recovered (from ${e.output.recovered_from})` });
        if (e.name === "finished") {
          ended = when;
          if (String(e.error || "").startsWith("WorkflowCancelled")) marks.push({ index, at: when, kind: "cancel", label: `cancelled${e.by ? ` by ${e.by}` : ""}` });
        }
      }
    }
  });
  if (terminal && ended !== null) t1 = Math.max(ended, t0);
  for (const bar of openWaits.values()) {
    bar.to = terminal ? Math.max(bar.from, ended ?? t1) : t1; // a wait ends when its run does
    if (terminal) bar.outcome = run.status === "cancelled" ? "cancelled" : "ended";
  }
  if (rollback) gaps.push({ lane: "run", from: rollback[0], to: Math.max(rollback[1], rollback[0]), label: "rollback (compensations)", kind: "rollback" });
  if (suspended) gaps.push({ lane: "run", from: suspended[0], to: t1, label: `waiting for ${suspended[1]}`, kind: "waiting" });
  if (current && current.started_at) {
    bars.push({ index: null, lane: current.name, from: at(current.started_at), to: nowS, outcome: "running", e: { seq: current.seq, name: current.name, attempt: current.attempt, kind: "step" } });
  }
  for (const b of bars) t1 = Math.max(t1, b.to ?? b.from);
  return { bars, gaps, marks, t0: Math.min(t0, ...bars.map((b) => b.from)), t1 };
}

/** The lanes, in order of first use ("run" first), the ones past MAX_LANES folded together. */
function lanesOf(bars, gaps) {
  const order = ["run"];
  for (const item of [...bars, ...gaps]) if (!order.includes(item.lane)) order.push(item.lane);
  const index = new Map(order.slice(0, MAX_LANES).map((name, i) => [name, i]));
  const folded = order.length > MAX_LANES;
  const laneOf = (name) => index.get(name) ?? MAX_LANES;
  const names = order.slice(0, MAX_LANES).concat(folded ? [`${order.length - MAX_LANES} more…`] : []);
  return { names, laneOf };
}

// What the table's Outcome column says of a gap (the bars' rows say the attempt's outcome).
const GAP_WORDS = { backoff: "gap: backoff", down: "gap: worker down", waiting: "gap: waiting", rollback: "gap: rollback" };

/** A bar's words: its entry (kind and name), attempt, duration and outcome. */
/** What a bar stands for: the entry, its attempt and how long it took. */
function barLabel(b) {
  const e = b.e;
  const kind = e.kind === "compensation" ? "undo " : WAITS.has(e.kind) && e.kind !== "sleep" ? `${e.kind} ` : "";
  const what = `${e.seq === null || e.seq === undefined ? "" : `#${e.seq} `}${kind}${e.name}`;
  const attempt = e.attempt ? `, attempt ${e.attempt}` : "";
  const took = b.unknown ? ", duration unknown (its worker died)" : b.to === null ? "" : `, ${duration(b.to - b.from)}`;
  return `${what}${attempt}${took}`;
}

export function barTitle(b) {
  return `${barLabel(b)}: ${b.outcome}`;
}

/** The timeline's figure; update(entries, run, current, {more, total}) redraws it. */
export function runChart({ onPick }) {
  const fig = figure("Run timeline");
  const status = h("p", { class: "muted small", hidden: true });
  fig.el.append(status);
  fig.el.classList.add("wide");
  let last = null;

  function draw(entries, run, current, { more = false, total = entries.length } = {}) {
    const began = performance.now();
    const nowS = Date.now() / 1000;
    const { bars, gaps, marks, t0, t1 } = layout(entries, run, current, nowS);
    const { names, laneOf } = lanesOf(bars, gaps);
    const span = Math.max(t1 - t0, 0.001);
    const plotW = WIDTH - GUTTER - 12;
    const x = (t) => GUTTER + ((t - t0) / span) * plotW;
    const height = TOP + names.length * LANE + 8;
    const frag = document.createDocumentFragment();
    for (let i = 0; i <= 5; i += 1) {
      const tx = GUTTER + (i / 5) * plotW;
      frag.append(s("line", { x1: tx, x2: tx, y1: TOP - 4, y2: height - 6, class: "grid" }),
        s("text", { x: tx, y: TOP - 10, class: "tick", "text-anchor": i === 0 ? "start" : i === 5 ? "end" : "middle", text: i === 0 ? "start" : `+${duration((span * i) / 5)}` }));
    }
    names.forEach((name, i) => {
      frag.append(s("text", { x: GUTTER - 8, y: TOP + i * LANE + 14, class: "label", "text-anchor": "end", text: clip(name, 24) }, title(name)));
    });
    for (const g of gaps) {
      const y = TOP + laneOf(g.lane) * LANE;
      const gx = x(g.from);
      const gw = Math.max(1, x(g.to) - gx);
      frag.append(s("g", { class: `gap g-${g.kind}` },
        s("rect", { x: gx, y: y + 3, width: gw, height: LANE - 6, class: "gap-band" }),
        gw > 60 ? s("text", { x: gx + 4, y: y + 14, class: "gap-label", text: clip(g.label, Math.floor(gw / 6.5)) }) : null,
        title(`${g.label} (${duration(g.to - g.from)})`)));
    }
    for (const b of bars) {
      const y = TOP + laneOf(b.lane) * LANE;
      const bx = x(b.from);
      frag.append(s("rect", {
        x: bx, y: y + 3, width: Math.max(2, x(b.to ?? b.from) - bx), height: LANE - 6,
        class: `bar o-${b.outcome}${b.index === null ? " live" : ""}${b.unknown ? " unknown" : ""}`,
        data: b.index === null ? {} : { index: b.index },
      }, title(barTitle(b))));
    }
    for (const m of marks) {
      const mx = x(m.at);
      frag.append(s("g", { class: `mark m-${m.kind}`, data: { index: m.index } },
        s("line", { x1: mx, x2: mx, y1: TOP - 4, y2: height - 6 }),
        s("path", { d: `M${mx - 5} ${TOP - 4} L${mx + 5} ${TOP - 4} L${mx} ${TOP + 4} Z` }),
        title(m.label)));
    }
    const svg = s("svg", { viewBox: `0 0 ${WIDTH} ${height}`, class: "timeline-chart", on: { click: pick } });
    svg.append(frag);
    const recoveries = marks.filter((m) => m.kind === "recovery").length;
    const summary = `${bars.length} bar${bars.length === 1 ? "" : "s"} over ${duration(span)}${current ? " so far (live)" : ""}; ${gaps.length} gap${gaps.length === 1 ? "" : "s"}${recoveries ? `; ${recoveries} recover${recoveries === 1 ? "y" : "ies"}` : ""}${marks.length > recoveries ? "; cancelled" : ""}.`;
    fig.draw(svg, () => twin(bars, gaps, marks, t0), summary);
    status.textContent = more ? `Drawn from the first ${entries.length} of ${total} entries; the rest are drawn as the journal below loads them.` : "";
    status.hidden = !more;
    const detail = { entries: entries.length, bars: bars.length };
    performance.measure("run-timeline-draw", { start: began, detail });
    requestAnimationFrame(() => setTimeout(() => performance.measure("run-timeline-shown", { start: began, detail }), 0));
  }

  function pick(event) {
    const target = event.target.closest("[data-index]");
    if (target) onPick(Number(target.dataset.index));
  }

  function twin(bars, gaps, marks, t0) {
    const rows = [
      ...bars.map((b) => ({ t: b.from, cells: [
        b.index === null ? barLabel(b) : h("button", { type: "button", class: "link", text: barLabel(b), on: { click: () => onPick(b.index) } }),
        b.outcome, `+${duration(b.from - t0)}`, b.to === null || b.unknown ? "—" : duration(b.to - b.from)] })),
      ...gaps.map((g) => ({ t: g.from, cells: [g.label, GAP_WORDS[g.kind] || "gap", `+${duration(g.from - t0)}`, duration(g.to - g.from)] })),
      ...marks.map((m) => ({ t: m.at, cells: [m.label, m.kind, `+${duration(m.at - t0)}`, "—"] })),
    ].sort((a, b) => a.t - b.t);
    return dataTable("Run timeline table", [
      { title: "Entry" }, { title: "Outcome" }, { title: "Starts at" }, { title: "Duration", num: true },
    ], rows.map((r) => r.cells), "Nothing to draw yet.");
  }

  return {
    el: fig.el,
    update(entries, run, current, extra) {
      last = [entries, run, current, extra];
      draw(...last);
    },
    /** Draw again with the same journal (the live end of the axis moves on). */
    redraw() {
      if (last) draw(...last);
    },
  };
}
