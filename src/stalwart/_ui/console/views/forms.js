// The operator's forms shared by several views: decide an approval, resolve an in-doubt step,
// and reading a journal for what they need.

import * as api from "../api.js";
import { act, field, h, message, replace, show, uid } from "../dom.js";
import { fullTime, oneLine, timeEl, valueBlock } from "../format.js";

/** JSON text as a value; a clear error (for a person) when it is not JSON. */
export function parseJson(text, what) {
  try {
    return JSON.parse(text);
  } catch {
    throw new Error(`${what} must be JSON: a string needs its quotes ("ch_123"), an object its braces ({"id": 1}).`);
  }
}

/** The irreversible steps of a journal whose latest attempt is in doubt, oldest first. */
export function inDoubtSteps(entries) {
  const last = new Map();
  for (const e of entries) if (e.kind === "step" && e.seq !== null) last.set(e.seq, e);
  return [...last.values()].filter((e) => e.status === "in_doubt").sort((a, b) => a.seq - b.seq);
}

/**
 * How many step attempts of a journal were interrupted with no outcome recorded since (in
 * doubt): the run's usage totals count only attempts that completed or failed.
 */
export function interruptedAttempts(entries) {
  const settled = new Set();
  const doubted = new Set();
  for (const e of entries) {
    if (e.kind !== "step" || e.seq === null) continue;
    const key = `${e.seq}/${e.attempt}`;
    if (e.status === "in_doubt") doubted.add(key);
    else if (e.status === "completed" || e.status === "failed") settled.add(key);
  }
  return [...doubted].filter((key) => !settled.has(key)).length;
}

/** What the journal says a run finished with (its result, or its last error). */
export function finished(entries) {
  for (let i = entries.length - 1; i >= 0; i -= 1) {
    const e = entries[i];
    if (e.kind === "run" && e.name === "finished") return e;
  }
  return null;
}

/** A link to a run, for a confirmation that names it. */
export function runLink(ctx, workflowId) {
  return h("a", { class: "id", href: ctx.link("run", {}, workflowId), text: workflowId });
}

/**
 * Approve or reject one approval request with a reason. onDone(parts) after a decision, with
 * the confirmation (it names the run); without onDone the form shows it itself. Returns {el};
 * the form keeps what the person typed across refreshes of the page around it.
 */
export function approvalForm(ctx, approval, onDone) {
  const reason = h("textarea", { rows: 2, maxlength: 10000, placeholder: "Why (recorded with the decision)" });
  const approve = h("button", { type: "button", class: "primary", text: "Approve" });
  const reject = h("button", { type: "button", class: "danger", text: "Reject" });
  const msg = message();
  const decide = (verb, button) => act(button, msg, async () => {
    const body = { approval_id: approval.approval_id };
    if (reason.value.trim()) body.reason = reason.value.trim();
    await api.post(api.runPath(approval.workflow_id, `/${verb}`), body);
    const done = [`${verb === "approve" ? "Approved" : "Rejected"} “${approval.subject}” for run `,
      runLink(ctx, approval.workflow_id), "."];
    reason.value = "";
    if (!onDone) return done;
    onDone(done); // the form goes once the request is decided: the caller keeps the message
    return null;
  });
  approve.addEventListener("click", () => decide("approve", approve));
  reject.addEventListener("click", () => decide("reject", reject));
  const details = approval.details === null || approval.details === undefined ? null : valueBlock(approval.details);
  const el = h("div", { class: "approval-form" },
    h("p", { class: "subject", text: approval.subject }),
    h("p", { class: "muted small" }, "Requested ", timeEl(approval.requested_at, { relative: true }),
      approval.expires_at ? [" · expires ", h("time", { datetime: approval.expires_at, text: fullTime(approval.expires_at) })] : null),
    details,
    field("Reason", reason),
    h("div", { class: "buttons" }, approve, reject),
    msg.el);
  return { el };
}

/**
 * Settle an in-doubt irreversible step: record what happened (a JSON result) or run it again.
 * onDone(parts) after it, with the confirmation (it names the run and the step); without
 * onDone the form shows it itself. update(steps) refreshes the choice of steps, keeping what
 * the person typed.
 */
export function resolveForm(ctx, workflowId, onDone) {
  const group = uid("how");
  const step = h("select");
  const stepField = field("Step", step);
  const info = h("div", { class: "doubt-info" });
  const record = h("input", { type: "radio", name: group, value: "result", checked: true });
  const rerun = h("input", { type: "radio", name: group, value: "rerun" });
  const result = h("textarea", { rows: 2, spellcheck: "false", placeholder: '"ch_123"  or  {"id": "ch_123"}  or  null' });
  const resultField = field("Result (JSON)", result, "What the step did, as it would have returned it.");
  const button = h("button", { type: "button", class: "primary", text: "Resolve" });
  const msg = message();
  let steps = [];

  const sync = () => show(resultField, record.checked);
  record.addEventListener("change", sync);
  rerun.addEventListener("change", sync);

  const describe = () => {
    const chosen = steps.find((s) => String(s.seq) === step.value) || steps[0];
    if (!chosen) return replace(info);
    return replace(info,
      h("p", { class: "small" }, "Step ", h("strong", { text: `#${chosen.seq} ${chosen.name}` }),
        `, attempt ${chosen.attempt}, called with `, h("code", { text: JSON.stringify(chosen.input) })),
      h("p", { class: "small" }, "Idempotency key ", h("code", { class: "key", text: chosen.idempotency_key || "—" }),
        " — look the effect up downstream with it."));
  };
  step.addEventListener("change", describe);

  button.addEventListener("click", () => act(button, msg, async () => {
    const seq = Number(step.value);
    const chosen = steps.find((s) => s.seq === seq);
    const what = `#${seq}${chosen ? ` ${chosen.name}` : ""}`;
    const body = { seq };
    if (rerun.checked) body.rerun = true;
    else body.result = parseJson(result.value.trim(), "The result");
    await api.post(api.runPath(workflowId, "/resolve"), body);
    const done = [
      rerun.checked ? `Rerun of step ${what} requested` : `Resolved step ${what} with result ${oneLine(JSON.stringify(body.result), 200)}`,
      " in run ", runLink(ctx, workflowId), "."];
    if (!onDone) return done;
    onDone(done); // the form goes once nothing is in doubt: the caller keeps the message
    return null;
  }));

  const el = h("div", { class: "resolve-form" },
    stepField, info,
    h("fieldset", { class: "how" }, h("legend", { text: "What happened?" }),
      h("label", { class: "inline" }, record, " It took effect: record its result"),
      h("label", { class: "inline" }, rerun, " It did not: run it again")),
    resultField,
    h("div", { class: "buttons" }, button),
    msg.el);

  return {
    el,
    update(next) {
      steps = next;
      const keep = step.value;
      replace(step, steps.map((s) => h("option", { value: s.seq, text: `#${s.seq} ${s.name}` })));
      if (steps.some((s) => String(s.seq) === keep)) step.value = keep;
      show(stepField, steps.length > 1);
      describe();
      sync();
    },
  };
}
