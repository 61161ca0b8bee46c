// The actions of one run: cancel, retry, approve or reject, resolve, send an event, fork.
// The panels are built once; each refresh only shows the ones the run's state allows, so what
// a person typed survives the live updates.

import * as api from "../api.js";
import { act, field, h, message, replace, show } from "../dom.js";
import { TERMINAL, parse } from "../format.js";
import { approvalForm, inDoubtSteps, parseJson, resolveForm } from "./forms.js";

const ALLOW = "Allow re-execution of irreversible steps"; // the fork's checkbox

function panel(title, ...children) {
  return h("section", { class: "panel", "aria-label": title }, h("h3", { text: title }), children);
}

export function runActions(ctx, id) {
  const after = () => ctx.refresh();

  // -- cancel (asked first, in the page) and retry
  const cancel = h("button", { type: "button", class: "danger", text: "Cancel" });
  const retry = h("button", { type: "button", class: "primary", text: "Retry" });
  const controlMsg = message();
  const controlNote = h("p", { class: "small muted" });
  const cancelYes = h("button", { type: "button", class: "danger", text: "Cancel" });
  const cancelNo = h("button", { type: "button", text: "Keep the run" });
  const asking = h("div", { class: "confirm", role: "group", "aria-label": "Confirm cancel", hidden: true },
    h("p", { class: "small", text: `Cancel run ${id}? It stops at its next step boundary (at once if it waits), and its compensations run.` }),
    h("div", { class: "buttons" }, cancelYes, cancelNo));
  let ended = false; // the run is terminal: nothing to cancel
  let askingCancel = false;
  const ask = (yes) => {
    askingCancel = yes;
    show(cancel, !ended && !yes);
    show(asking, !ended && yes);
  };
  // What the control message says about the run's state (Retried, Cancelled) holds until the
  // run changes after the answer: since is the answer's updated_at; null for a plain fact.
  let since = null;
  const confirm = (parts, when = null) => {
    controlMsg.ok(parts);
    since = when;
  };
  cancel.addEventListener("click", () => {
    controlMsg.clear();
    ask(true);
    cancelNo.focus(); // not the final button: a double click does not cancel
  });
  cancelNo.addEventListener("click", () => {
    ask(false);
    cancel.focus();
  });
  asking.addEventListener("keydown", (e) => {
    if (e.key === "Escape") cancelNo.click();
  });
  cancelYes.addEventListener("click", () => act(cancelYes, controlMsg, async () => {
    const answer = await api.post(api.runPath(id, "/cancel"));
    ask(false);
    after();
    confirm("Cancelled: the run stops at its next step boundary, and its compensations run.", answer.updated_at);
  }));
  retry.addEventListener("click", () => act(retry, controlMsg, async () => {
    const answer = await api.post(api.runPath(id, "/retry"));
    after();
    confirm("Retried: a worker picks the run up again.", answer.updated_at);
  }));
  const control = panel("Run", controlNote, h("div", { class: "buttons" }, retry, cancel), asking, controlMsg.el);
  const decided = (parts) => { // an approval's or a resolution's form goes: say it here
    confirm(parts);
    after();
  };

  // -- approvals (one form per pending request of this run)
  const approvalsBox = h("div");
  const approvalPanel = panel("Approval", approvalsBox);
  const approvalForms = new Map();

  // -- resolve
  const resolver = resolveForm(ctx, id, decided);
  const resolvePanel = panel("Resolve an in-doubt step",
    h("p", { class: "small" }, "An irreversible step was interrupted mid-attempt: nobody knows whether its effect happened."),
    resolver.el);

  // -- send an event
  const eventName = h("input", { type: "text", autocomplete: "off", spellcheck: "false", required: true });
  const payload = h("textarea", { rows: 2, spellcheck: "false", placeholder: "null" });
  const dedup = h("input", { type: "text", autocomplete: "off", spellcheck: "false" });
  const sendButton = h("button", { type: "submit", text: "Send event" });
  const eventMsg = message();
  const eventForm = h("form", { on: { submit: (e) => {
    e.preventDefault();
    act(sendButton, eventMsg, async () => {
      const body = { name: eventName.value.trim() };
      if (!body.name) throw new Error("Name the event.");
      if (payload.value.trim()) body.payload = parseJson(payload.value.trim(), "The payload");
      if (dedup.value.trim()) body.dedup_key = dedup.value.trim();
      const answer = await api.post(api.runPath(id, "/events"), body);
      after();
      return answer.delivered ? `Event ${body.name} delivered.` : `Duplicate: the run already got an event with dedup key ${body.dedup_key}; ignored.`;
    });
  } } },
  field("Event name", eventName), field("Payload (JSON)", payload), field("Dedup key", dedup, "Optional: a repeat with the same key is ignored."),
  h("div", { class: "buttons" }, sendButton), eventMsg.el);
  const eventPanel = panel("Send event", eventForm);

  // -- fork
  const fromSeq = h("select");
  const newId = h("input", { type: "text", autocomplete: "off", spellcheck: "false", placeholder: "generated" });
  const allow = h("input", { type: "checkbox" });
  const forkButton = h("button", { type: "button", text: "Fork" });
  const forkMsg = message();
  forkButton.addEventListener("click", () => act(forkButton, forkMsg, async () => {
    const body = { from_seq: Number(fromSeq.value), allow_reexecute: allow.checked };
    if (newId.value.trim()) body.new_id = newId.value.trim();
    let run;
    try {
      run = await api.post(api.runPath(id, "/fork"), body);
    } catch (err) {
      if (err.type === "UnsafeFork" && !allow.checked) err.message += `\n\nIn the console: tick “${ALLOW}” and click Fork again.`;
      throw err;
    }
    ctx.navigate(ctx.link("run", {}, run.workflow_id), `Forked from ${id} at #${body.from_seq}.`);
  }));
  const forkPanel = panel("Fork",
    h("p", { class: "small muted" }, "A new run that reuses this run's journal before the chosen step and executes from there."),
    field("From step", fromSeq), field("New run id", newId),
    h("label", { class: "inline" }, allow, ` ${ALLOW}`),
    h("div", { class: "buttons" }, forkButton), forkMsg.el);

  const el = h("aside", { class: "actions", "aria-label": "Actions" },
    control, approvalPanel, resolvePanel, eventPanel, forkPanel);

  let lastSeqs = "";
  return {
    el,
    /** Show what the run's state allows, from its detail, journal and pending approvals. */
    update(run, entries, approvals) {
      const terminal = TERMINAL.has(run.status);
      const doubts = run.status === "needs_attention" ? inDoubtSteps(entries) : [];
      ended = terminal;
      ask(askingCancel);
      if (since && parse(run.updated_at) > parse(since)) { // what it said no longer holds
        controlMsg.clear();
        since = null;
      }
      show(retry, run.status === "failed" || (run.status === "needs_attention" && !doubts.length));
      controlNote.textContent = terminal && run.status !== "failed"
        ? `This run is ${run.status}; fork it to run it again.`
        : run.status === "failed" ? "Retry resumes it from its failed step with a fresh attempt budget." : "";

      const mine = approvals.filter((a) => a.workflow_id === id && !a.decision);
      for (const [key, form] of approvalForms) {
        if (!mine.some((a) => a.approval_id === key)) {
          form.el.remove();
          approvalForms.delete(key);
        }
      }
      for (const a of mine) {
        if (!approvalForms.has(a.approval_id)) {
          const form = approvalForm(ctx, a, decided);
          approvalForms.set(a.approval_id, form);
          approvalsBox.append(form.el);
        }
      }
      show(approvalPanel, mine.length > 0);

      resolver.update(doubts);
      show(resolvePanel, doubts.length > 0);

      show(eventPanel, !terminal);
      const wanted = /^event (.+)$/.exec(run.waiting_for || "");
      if (wanted && !eventName.value) eventName.value = wanted[1];

      const seqs = new Map();
      for (const e of entries) if (e.seq !== null && !seqs.has(e.seq)) seqs.set(e.seq, e);
      const key = JSON.stringify([...seqs.keys()]);
      if (key !== lastSeqs) {
        lastSeqs = key;
        const keep = fromSeq.value;
        replace(fromSeq, [...seqs.values()].map((e) => h("option", { value: e.seq, text: `#${e.seq} ${e.name} (${e.kind})` })));
        if (keep && seqs.has(Number(keep))) fromSeq.value = keep;
      }
      show(forkPanel, seqs.size > 0);
    },
  };
}
