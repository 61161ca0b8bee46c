// One run: its header (status, times, usage, what it waits on, the step it executes now),
// its whole timeline, and the actions its state allows. The actions show only once the run
// has been read; for an id the store has no run for, the page says so and offers none (it
// keeps polling, so a run started under that id later shows up).
//
// The journal is read a page (PAGE entries) at a time: the first page with the run, the next
// one when the end of the timeline scrolls into view (or "Load more" is pressed), so a run of
// thousands of entries costs what a page does. Once every page is read, each poll asks only for
// the entries after the last one (?after=ID), appending them; until then new entries come with
// the pages. The page reads the pages it holds again when it cannot be sure they are the same:
// after an action taken here, when the run's status changed (a retry, a redrive, a cancel, its
// end), every FULL_EVERY polls, and when the answer's total says an entry was committed late
// below the last id (PostgreSQL).

import * as api from "../api.js";
import { h, message, replace, show } from "../dom.js";
import { TERMINAL, badge, between, duration, errorType, fullTime, timeEl, usageText, valueBlock } from "../format.js";
import { runActions } from "./actions.js";
import { needs, why } from "./attention.js";
import { finished, inDoubtSteps, interruptedAttempts } from "./forms.js";
import streamPanel from "./stream.js";
import { runChart } from "./runchart.js";
import { timeline } from "./timeline.js";

const FULL_EVERY = 10; // polls between reads of the whole journal (every 20 s when live)
export const PAGE = 100; // journal entries a read asks for

function fact(label, value, testid) {
  return h("div", { class: "fact" }, h("dt", { text: label }), h("dd", { "data-testid": testid }, value));
}

function current(step) {
  if (!step) return null;
  const worker = (step.holder || "").replace(/#\d+$/, "");
  return h("section", { class: "current", "aria-label": "Current step" },
    h("h2", {}, h("span", { class: "pulse", "aria-hidden": "true" }), "Running now: ", h("span", { class: "name", text: `#${step.seq} ${step.name}` })),
    h("dl", { class: "facts compact" },
      fact("Attempt", String(step.attempt)),
      fact("Started", timeEl(step.started_at)),
      fact("Elapsed", duration(between(step.started_at)), "elapsed"),
      fact("Held by", h("code", { title: step.holder || "", text: worker || "—" })),
      step.heartbeat === null || step.heartbeat === undefined
        ? fact("Heartbeat", h("span", { class: "muted", text: "none yet" }))
        : fact("Heartbeat", valueBlock(step.heartbeat, "heartbeat"), "heartbeat")));
}

/** What the run waits for: its wait, what it needs from an operator, or nothing. */
function waitingFor(detail, entries, terminal) {
  if (detail.waiting_for) return detail.waiting_for;
  if (detail.status === "needs_attention") return needs(detail.error, inDoubtSteps(entries));
  return h("span", { class: "muted", text: terminal ? "nothing (finished)" : "nothing" });
}

/** Links to a run's parent and to its child runs (with their status), when it has any. */
function family(ctx, detail, children) {
  const link = (wid) => h("a", { class: "id", href: ctx.link("run", {}, wid), text: wid });
  const facts = [];
  if (detail.parent_id) facts.push(fact("Parent", link(detail.parent_id), "parent"));
  const kids = children.runs || [];
  if (kids.length) {
    const total = Object.values(children.counts || {}).reduce((a, b) => a + b, 0);
    const more = total > kids.length ? h("span", { class: "muted", text: ` and ${total - kids.length} more` }) : null;
    facts.push(fact(`Children (${total})`, h("span", { class: "children" },
      kids.slice().reverse().map((c) => h("span", { class: "child" }, link(c.workflow_id), " ", badge(c.status))), more), "children"));
  }
  return facts;
}

export default function run(ctx, id) {
  const head = h("div", { class: "run-head" });
  const error = message();
  const outcome = h("div");
  const now = h("div");
  const line = timeline();
  const picture = runChart({ onPick: (index) => line.reveal(index) });
  const stream = streamPanel(id); // what the run emits, live
  const actions = runActions(ctx, id);
  const count = h("span", { class: "muted" });
  const moreButton = h("button", { type: "button", class: "quiet", text: "Load more entries" });
  const moreBox = h("div", { class: "more-entries", hidden: true }, moreButton);
  const expand = h("button", { type: "button", class: "quiet", text: "Expand all" });
  let expanded = false;
  expand.addEventListener("click", () => {
    expanded = !expanded;
    line.expandAll(expanded);
    expand.textContent = expanded ? "Collapse all" : "Expand all";
  });

  show(actions.el, false); // until the run is read: nothing to act on yet
  const grid = h("div", { class: "run-grid" },
    h("div", { class: "run-main" }, head, outcome, now,
      stream.el,
      picture.el,
      h("div", { class: "section-head" }, h("h2", { text: "Timeline" }), count, expand),
      line.el, moreBox),
    actions.el);
  const missing = h("section", { class: "not-found", role: "status", "aria-label": "Run not found", hidden: true });
  const el = h("section", { class: "view run" },
    h("p", { class: "crumbs" }, h("a", { href: ctx.link("runs"), text: "Runs" }), " / "),
    h("h1", { class: "run-id", text: id }),
    error.el,
    missing,
    grid);

  /** The page of an id the store has no run for: says so, links back, offers no action. */
  function notFound() {
    replace(missing,
      h("h2", { text: "No such run" }),
      h("p", { text: `This store has no run with id ${id}: the id may be mistyped, or the run was deleted (retention or prune).` }),
      h("p", {}, h("a", { href: ctx.link("runs"), text: "Back to all runs" })));
    show(missing, true);
    show(grid, false);
    error.clear();
    entries = [];
    more = false;
    status = null;
    seen = "";
    document.title = `${id} (not found) · stalwart`;
  }

  let seen = "";
  let entries = []; // the journal's first pages as last read, in order
  let more = false; // whether entries follow the ones held
  let total = 0; // how many entries the whole journal has
  let status = null; // the run's status at that read
  let polls = 0;
  let shown = null; // what was last rendered: [detail, approvals, children]
  let loading = null; // the read of the next page under way

  const path = api.runPath(id, "/journal");
  const lastId = (held) => (held.length ? held[held.length - 1].id : 0);
  const page = async (after) => (await api.get(path, { after: after || null, limit: PAGE })).data;

  /** The journal now: {entries, more, total}. Once every page is held, the entries held plus
   * the new ones; before, null (the pages held, as they are when the answer comes: a page
   * read meanwhile stays); else those pages read again. */
  async function readJournal(full) {
    if (!full && entries.length) {
      if (more) return null;
      const data = await page(lastId(entries));
      if (data.more || entries.length + data.entries.length === data.total) {
        return { entries: entries.concat(data.entries), more: data.more, total: data.total };
      }
    }
    let held = [];
    let data;
    do {
      data = await page(lastId(held));
      held = held.concat(data.entries);
    } while (data.more && held.length < entries.length);
    return { entries: held, more: data.more, total: data.total };
  }

  // The end of the timeline in view: the next page, as a person scrolls down the journal.
  const nearEnd = new IntersectionObserver((changes) => {
    if (changes.some((c) => c.isIntersecting)) loadMore();
  }, { rootMargin: "400px 0px" });

  /** Read the next page and show it below the ones held (unless the pages held were read
   * again meanwhile: the next scroll asks again). */
  function loadMore() {
    if (loading || !more || !shown) return loading;
    const from = entries;
    loading = page(lastId(from)).then((data) => {
      if (entries !== from) return;
      entries = from.concat(data.entries);
      more = data.more;
      total = data.total;
      render(...shown);
      nearEnd.unobserve(moreBox); // observed again: still in view, it reads the next page
      nearEnd.observe(moreBox);
    }, (err) => error.error(`Cannot read the journal: ${err.message}`)).finally(() => {
      loading = null;
    });
    return loading;
  }
  moreButton.addEventListener("click", loadMore);
  nearEnd.observe(moreBox);

  function render(detail, approvals, children) {
    shown = [detail, approvals, children];
    const terminal = TERMINAL.has(detail.status);
    replace(head, h("dl", { class: "facts" },
      fact("Workflow", detail.name),
      fact("Status", badge(detail.status), "run-status"),
      fact("Queue", detail.queue),
      fact("Created", timeEl(detail.created_at)),
      fact("Updated", timeEl(detail.updated_at)),
      fact("Duration", `${duration(between(detail.created_at, terminal ? detail.updated_at : null))}${terminal ? "" : " so far"}`),
      fact("Usage", usageText(detail.usage, { interrupted: interruptedAttempts(entries), terminal }), "usage"),
      fact("Waiting for", waitingFor(detail, entries, terminal), "waiting-for"),
      family(ctx, detail, children)));

    const end = finished(entries);
    const parts = [];
    if (detail.error) {
      const type = errorType(detail.error);
      parts.push(h("section", { class: ["outcome", "bad"], "aria-label": "Error" },
        h("h2", { text: detail.status === "needs_attention" ? `Needs attention${type ? `: ${type}` : ""}` : `Error${type ? `: ${type}` : ""}` }),
        detail.status === "needs_attention" ? h("p", { class: "why", text: why(detail.error) }) : null,
        valueBlock(detail.error, "error")));
    } else if (detail.status === "completed" && end) {
      parts.push(h("section", { class: ["outcome", "good"], "aria-label": "Result" },
        h("h2", { text: "Result" }), valueBlock(end.output, "output")));
    } else if (detail.status === "completed" && more) {
      parts.push(h("section", { class: ["outcome", "good"], "aria-label": "Result" },
        h("h2", { text: "Result" }),
        h("p", { class: "muted", text: "The result is the journal's last entry: it shows once the timeline is read to its end." })));
    }
    replace(outcome, parts);
    replace(now, current(detail.current));

    const of = more ? ` of ${total}` : "";
    count.textContent = `${entries.length}${of} entr${(more ? total : entries.length) === 1 ? "y" : "ies"}`;
    line.update(entries, more ? null : detail.current);
    picture.update(entries, detail, terminal ? null : detail.current, { more, total });
    show(moreBox, more);
    actions.update(detail, entries, approvals);
    show(actions.el, true);
    document.title = `${id} (${detail.status}) · stalwart`;
  }

  async function refresh({ forced = false } = {}) {
    let detail;
    let journal;
    let approvals = { data: { approvals: [] }, text: "" };
    let children;
    try {
      [detail, children] = await Promise.all([
        api.get(api.runPath(id)), api.get("/runs", { parent_id: id, limit: 200 })]);
      const full = forced || detail.data.status !== status || polls % FULL_EVERY === 0;
      // Only a suspended run has a request to decide (every pending one of the store is read).
      const asks = detail.data.status === "suspended" ? api.get("/approvals") : approvals;
      [journal, approvals] = await Promise.all([readJournal(full), asks]);
      journal = journal || { entries, more, total };
      if (detail.data.status === "needs_attention") { // its in-doubt steps: every page
        while (journal.more) {
          const data = await page(lastId(journal.entries));
          journal = { entries: journal.entries.concat(data.entries), more: data.more, total: data.total };
        }
      }
    } catch (err) {
      if (err.status === 404 && err.type === "WorkflowNotFound") {
        notFound();
        return;
      }
      error.error(`Cannot read the run: ${err.message}`);
      if (err.status === 0) throw err;
      return;
    }
    show(missing, false);
    show(grid, true);
    stream.start(); // once the run is known to exist
    polls += 1;
    ({ entries, more, total } = journal);
    status = detail.data.status;
    error.clear();
    const key = `${detail.text}${entries.length}/${lastId(entries)}/${total}${approvals.text}${children.text}`;
    if (key === seen && TERMINAL.has(detail.data.status)) return;
    seen = key;
    render(detail.data, approvals.data.approvals, children.data);
  }

  return { el, title: id, refresh };
}
