// Needs attention: the runs that wait for an operator, why in words, and what to do about
// it (resolve an in-doubt step with its result or a rerun; retry the others).

import * as api from "../api.js";
import { act, h, message, replace, show } from "../dom.js";
import { errorType, timeEl, valueBlock } from "../format.js";
import { inDoubtSteps, resolveForm, runLink } from "./forms.js";

const LIMIT = 100;

/** Why a run waits for an operator, for a person, from its error's type. */
const WHY = {
  InDoubt: "An irreversible step was interrupted mid-attempt and has no verify: nobody knows whether its effect happened. Look it up downstream with its idempotency key, then record what it did or run it again.",
  BudgetExceeded: "The run reached a limit of its budget before a step attempt, which did not start. Retry it with a larger budget (app.retry(..., budget=...) or the CLI).",
  LoopDetected: "The run called one step with the same arguments more often than its budget allows; the call did not happen. Fix the agent's loop, then retry with a larger budget.",
  NonDeterminismError: "The workflow's code no longer matches its journal: replay asked for a different step than the one recorded. Deploy code that matches (or a fix), then retry.",
  EngineError: "stalwart's own bookkeeping failed while it executed the run (not the workflow's failure). Retry tries again.",
  CompensationFailed: "A compensation exhausted its retries while the run was being rolled back. Fix the cause, then retry to continue the rollback.",
};

/** What a run needs from an operator, in a few words, from its error's type. */
const NEEDS = {
  InDoubt: "an operator to resolve its in-doubt step",
  BudgetExceeded: "an operator to retry it with a larger budget",
  LoopDetected: "a fix of the agent's loop, then a retry with a larger budget",
  NonDeterminismError: "code that matches its journal, then a retry",
  EngineError: "an operator to retry it",
  CompensationFailed: "a fix of the failing compensation, then a retry",
};

function typeOf(error) {
  const type = errorType(error);
  if (type && WHY[type]) return type;
  return /compensat/i.test(error || "") ? "CompensationFailed" : null;
}

/** Why a run in needs_attention waits for an operator, in words. */
export function why(error) {
  const type = typeOf(error);
  return type ? WHY[type] : "The run stopped and waits for an operator. Its error says why; retry when the cause is fixed.";
}

/** What a run in needs_attention waits for, in a few words; doubts are its in-doubt steps. */
export function needs(error, doubts = []) {
  if (doubts.length) {
    const steps = doubts.map((s) => `#${s.seq} ${s.name}`).join(", ");
    return `an operator to resolve the in-doubt step${doubts.length === 1 ? "" : "s"} ${steps}`;
  }
  return NEEDS[typeOf(error)] || "an operator to retry it once the cause is fixed";
}

export default function attention(ctx) {
  const error = message();
  const flash = message(); // what was done: it stays when the card of the run has gone
  const list = h("div", { class: "rows" });
  const empty = h("p", { class: "empty", text: "Nothing needs attention." });
  const summary = h("p", { class: "muted" });
  const cards = new Map();

  const el = h("section", { class: "view" },
    h("h1", { text: "Needs attention" }), summary,
    flash.el, error.el, empty, list);

  function card(run) {
    const reason = h("p", { class: "why" });
    const errorBox = h("div");
    const retry = h("button", { type: "button", text: "Retry" });
    const msg = message();
    const resolver = resolveForm(ctx, run.workflow_id, (parts) => {
      flash.ok(parts);
      ctx.refresh();
    });
    const resolveBox = h("div", { class: "resolve" }, h("h3", { text: "Resolve" }), resolver.el);
    retry.addEventListener("click", () => act(retry, msg, async () => {
      await api.post(api.runPath(run.workflow_id, "/retry"));
      flash.ok("Retried run ", runLink(ctx, run.workflow_id), ".");
      ctx.refresh();
    }));
    const meta = h("p", { class: "muted small" });
    const node = h("article", { class: "card attention", "aria-label": run.workflow_id, data: { id: run.workflow_id } },
      h("div", { class: "about" },
        h("header", {},
          h("a", { class: "id", href: ctx.link("run", {}, run.workflow_id), text: run.workflow_id }),
          h("span", { class: "muted", text: ` ${run.name} · ${run.queue}` })),
        meta, reason, errorBox),
      h("div", { class: "remedy" }, resolveBox, h("div", { class: "buttons" }, retry), msg.el));
    return {
      node,
      update(r, entries) {
        replace(meta, "Waiting since ", timeEl(r.updated_at), " (", timeEl(r.updated_at, { relative: true }), ")");
        reason.textContent = why(r.error);
        replace(errorBox, valueBlock(r.error || "", "error"));
        const doubts = inDoubtSteps(entries);
        resolver.update(doubts);
        show(resolveBox, doubts.length > 0);
        show(retry, doubts.length === 0);
      },
    };
  }

  async function refresh() {
    let runs;
    try {
      ({ data: runs } = await api.get("/runs", { status: "needs_attention", limit: LIMIT }));
    } catch (err) {
      error.error(`Cannot list runs: ${err.message}`);
      if (err.status === 0) throw err;
      return;
    }
    const journals = await Promise.all(runs.runs.map((r) => api.get(api.runPath(r.workflow_id, "/journal"))
      .then((j) => j.data.entries, () => [])));
    error.clear();
    const ids = new Set(runs.runs.map((r) => r.workflow_id));
    for (const [key, c] of cards) {
      if (!ids.has(key)) {
        c.node.remove();
        cards.delete(key);
      }
    }
    runs.runs.forEach((r, i) => {
      let c = cards.get(r.workflow_id);
      if (!c) {
        c = card(r);
        cards.set(r.workflow_id, c);
      }
      c.update(r, journals[i]);
      // In the API's order; a node already in place is not moved (moving it would lose focus).
      if (list.children[i] !== c.node) list.insertBefore(c.node, list.children[i] || null);
    });
    empty.hidden = runs.runs.length > 0;
    const total = runs.counts.needs_attention || 0;
    summary.textContent = total ? `${total} run${total === 1 ? "" : "s"} wait${total === 1 ? "s" : ""} for an operator${runs.more ? `; the newest ${LIMIT} are shown` : ""}.` : "";
  }

  return { el, title: "Needs attention", refresh };
}
