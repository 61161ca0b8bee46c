// A run's timeline: every journal entry in order, each one expandable to its full input,
// output, error, attempt, times, usage, idempotency key and who acted. Entries are kept
// across refreshes (an open one stays open); only entries that are new or changed are built.

import { h, replace } from "../dom.js";
import { badge, between, duration, fullTime, oneLine, timeEl, usageText, valueBlock } from "../format.js";

const KIND = {
  step: "step", compensation: "undo", sleep: "sleep", event: "event", approval: "approval",
  now: "now", uuid: "uuid", random: "random", operator: "operator", run: "run",
  child: "child", shared: "shared", patch: "patch", send: "send",
};

/**
 * What an entry says happened, in words (as `stalwart show` reads it): [status word, badge
 * class, detail]. The rows of the run itself and of operators carry a milestone, not a result.
 */
function words(e, previous) {
  const out = e.output && typeof e.output === "object" && !Array.isArray(e.output) ? e.output : {};
  if (e.kind === "run") {
    if (e.name === "started") return ["started", "idle", e.input ? `with ${oneLine(e.input, 100)}` : ""];
    if (e.name === "resumed") {
      if (out.recovered_from) return ["recovered", "needs_attention", `its holder ${out.recovered_from} stopped or its lease lapsed`];
      const first = previous && previous.kind === "run" && previous.name === "started";
      return ["executing", "idle", first ? "a worker took it" : "a worker took it up again"];
    }
    if (e.name === "suspended") {
      const what = String(out.waiting_for || "timer").replace(":", " ");
      return ["waiting", "suspended", `for ${what}${out.until ? ` until ${out.until}` : ""}`];
    }
    if (e.name === "finished") {
      if (e.status === "completed") return ["completed", "completed", e.output === null ? "" : `→ ${oneLine(e.output, 100)}`];
      const ended = (e.error || "").startsWith("WorkflowCancelled") ? "cancelled" : "failed";
      return [ended, ended, e.error || ""];
    }
    if (e.name === "needs_attention") return ["needs attention", "needs_attention", e.error || ""];
    return [e.name, "idle", e.error || (e.output === null ? "" : oneLine(e.output, 100))];
  }
  if (e.kind === "operator") {
    return ["action", "operator", `by ${e.by || "?"}${e.input === null ? "" : `: ${oneLine(e.input, 90)}`}`];
  }
  if (e.kind === "shared" && (e.status === "completed" || e.status === "reused")) {
    if (e.output === null) return [e.status, e.status, "not written: the version moved since it was read"];
    if (out.version === 0) return [e.status, e.status, "never written (version 0)"];
    if (out.version) return [e.status, e.status, `version ${out.version}: ${oneLine(out.value, 90)}`];
  }
  if (e.kind === "send" && e.status !== "failed" && e.input && typeof e.input === "object") {
    const sent = e.output === true ? "delivered to" : "already delivered to";
    return [e.status, e.status, `${sent} ${e.input.workflow_id} (dedup key ${e.input.dedup_key})`];
  }
  if (e.attempt === 0 && e.status === "failed") {
    return ["reset", "idle", e.error ? `${e.error}: the next attempt starts afresh` : ""];
  }
  const detail = e.error ? e.error : e.output === null || e.output === undefined ? "" : `→ ${oneLine(e.output, 100)}`;
  return [e.status, e.status, detail];
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

function entryNode(e, previous, index, open) {
  const took = e.finished_at && e.started_at ? between(e.started_at, e.finished_at) : null;
  const [word, tone, detail] = words(e, previous);
  const failing = e.error && e.kind !== "operator" && word !== "reset";
  return h("details", { class: ["entry", `k-${e.kind}`, `st-${e.status}`], open, data: { index } },
    h("summary", {},
      h("span", { class: "seq", text: e.seq === null ? "" : `#${e.seq}` }),
      h("span", { class: "kind", text: KIND[e.kind] || e.kind }),
      h("span", { class: "name", text: e.name }),
      h("span", { class: ["badge", `s-${tone}`], text: word.replace("_", " ") }),
      h("span", { class: "try muted", text: e.attempt && e.kind !== "run" ? `try ${e.attempt}` : "" }),
      h("span", { class: "when" }, timeEl(e.started_at || e.finished_at)),
      h("span", { class: "took muted", text: took === null || e.kind === "run" || e.kind === "operator" ? "" : duration(took) }),
      h("span", { class: ["brief", failing ? "error-text" : "muted"], title: detail.length > 100 ? detail : null, text: oneLine(detail, 140) })),
    body(e));
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
  let shown = []; // the entries the nodes show (a poll appends to the same objects)
  let texts = [];

  list.addEventListener("toggle", (event) => {
    const index = Number(event.target.dataset.index);
    if (event.target.open) opened.add(index);
    else opened.delete(index);
  }, true);

  return {
    el: list,
    update(entries, current = null) {
      if (entries.length < shown.length) {
        replace(entriesBox);
        shown = [];
        texts = [];
      }
      entries.forEach((e, i) => {
        if (shown[i] === e) return;
        const text = JSON.stringify(e);
        shown[i] = e;
        if (texts[i] === text) return;
        texts[i] = text;
        const node = entryNode(e, entries[i - 1], i, opened.has(i));
        node.setAttribute("role", "listitem");
        if (entriesBox.children[i]) entriesBox.replaceChild(node, entriesBox.children[i]);
        else entriesBox.append(node);
      });
      replace(liveBox, current ? liveNode(current) : null);
    },
    /** Open entry `index` and scroll the journal to it (a bar of the run timeline clicked). */
    reveal(index) {
      const node = entriesBox.querySelector(`details[data-index="${Number(index)}"]`);
      if (!node) return;
      node.open = true;
      opened.add(Number(index));
      for (const other of entriesBox.querySelectorAll(".picked")) other.classList.remove("picked");
      node.classList.add("picked");
      node.scrollIntoView({ block: "center" });
      node.querySelector("summary").focus({ preventScroll: true });
    },
    expandAll(open) {
      for (const d of list.querySelectorAll("details.entry")) d.open = open;
    },
  };
}
