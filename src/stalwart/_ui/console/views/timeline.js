// A run's timeline: every journal entry in order, each one expandable to its full input,
// output, error, attempt, times, usage, idempotency key and who acted. Entries are kept
// across refreshes (an open one stays open); only entries that changed are rebuilt.

import { h, replace } from "../dom.js";
import { badge, between, duration, fullTime, oneLine, timeEl, usageText, valueBlock } from "../format.js";

const KIND = {
  step: "step", compensation: "undo", sleep: "sleep", event: "event", approval: "approval",
  now: "now", uuid: "uuid", random: "random", operator: "operator", run: "run",
};

function brief(e) {
  if (e.error) return h("span", { class: "error-text", text: oneLine(e.error, 110) });
  if (e.kind === "operator") return h("span", { text: e.by ? `by ${e.by}` : "" });
  if (e.output !== null && e.output !== undefined) return h("span", { class: "muted", text: `→ ${oneLine(e.output, 100)}` });
  if (e.kind === "run" && e.name === "started" && e.input) return h("span", { class: "muted", text: `with ${oneLine(e.input, 100)}` });
  return null;
}

function fact(label, value) {
  if (value === null || value === undefined || value === "") return null;
  return [h("dt", { text: label }), h("dd", {}, value)];
}

function body(e) {
  const took = e.finished_at ? between(e.started_at, e.finished_at) : null;
  return h("div", { class: "entry-body" },
    h("dl", { class: "facts compact" },
      fact("Kind", e.kind),
      fact("Status", e.status),
      fact("Position", e.seq === null ? null : `#${e.seq}`),
      fact("Attempt", e.attempt === null ? null : String(e.attempt)),
      fact("Started", e.started_at ? fullTime(e.started_at) : null),
      fact("Finished", e.finished_at ? fullTime(e.finished_at) : e.started_at && e.kind === "step" ? "not recorded" : null),
      fact("Duration", took === null ? null : duration(took)),
      fact("Idempotency key", e.idempotency_key ? h("code", { class: "key", text: e.idempotency_key }) : null),
      fact("By", e.by),
      fact("Usage", e.usage ? usageText(e.usage) : null)),
    e.input !== null && e.input !== undefined ? [h("h4", { text: "Input" }), valueBlock(e.input)] : null,
    e.output !== null && e.output !== undefined ? [h("h4", { text: "Output" }), valueBlock(e.output, "output")] : null,
    e.error ? [h("h4", { text: "Error" }), valueBlock(e.error, "error")] : null,
  );
}

function entryNode(e, index, open) {
  const took = e.finished_at && e.started_at ? between(e.started_at, e.finished_at) : null;
  const details = h("details", { class: ["entry", `k-${e.kind}`, `st-${e.status}`], open, data: { index } },
    h("summary", {},
      h("span", { class: "seq", text: e.seq === null ? "" : `#${e.seq}` }),
      h("span", { class: "kind", text: KIND[e.kind] || e.kind }),
      h("span", { class: "name", text: e.name }),
      e.kind === "run" && e.status === "completed" ? h("span") : badge(e.status),
      h("span", { class: "try muted", text: e.attempt && e.kind !== "run" ? `try ${e.attempt}` : "" }),
      h("span", { class: "when" }, timeEl(e.started_at || e.finished_at)),
      h("span", { class: "took muted", text: took === null || e.kind === "run" ? "" : duration(took) }),
      h("span", { class: "brief" }, brief(e))),
    body(e));
  return details;
}

/** The step a run executes now, as the last line of its timeline (not yet in the journal). */
function liveNode(step) {
  return h("div", { class: "entry live-entry", role: "listitem" },
    h("div", { class: "row" },
      h("span", { class: "seq", text: `#${step.seq}` }),
      h("span", { class: "kind", text: "step" }),
      h("span", { class: "name", text: step.name }),
      badge("running"),
      h("span", { class: "try muted", text: `try ${step.attempt}` }),
      h("span", { class: "when" }, timeEl(step.started_at)),
      h("span", { class: "took live-num", text: duration(between(step.started_at)) }),
      h("span", { class: "brief muted", text: step.heartbeat === null || step.heartbeat === undefined ? "" : `heartbeat ${oneLine(step.heartbeat, 90)}` })));
}

/** The timeline; update(entries, current) brings it up to date. */
export function timeline() {
  const list = h("div", { class: "timeline", role: "list" });
  const entriesBox = h("div", { class: "entries" });
  const liveBox = h("div");
  list.append(entriesBox, liveBox);
  const opened = new Set();
  let texts = [];

  list.addEventListener("toggle", (event) => {
    const index = Number(event.target.dataset.index);
    if (event.target.open) opened.add(index);
    else opened.delete(index);
  }, true);

  return {
    el: list,
    update(entries, current = null) {
      const next = entries.map((e) => JSON.stringify(e));
      if (next.length < texts.length) {
        replace(entriesBox);
        texts = [];
      }
      next.forEach((text, i) => {
        if (texts[i] === text) return;
        const node = entryNode(entries[i], i, opened.has(i));
        node.setAttribute("role", "listitem");
        if (entriesBox.children[i]) entriesBox.replaceChild(node, entriesBox.children[i]);
        else entriesBox.append(node);
      });
      texts = next;
      replace(liveBox, current ? liveNode(current) : null);
    },
    expandAll(open) {
      for (const d of list.querySelectorAll("details.entry")) d.open = open;
    },
  };
}
