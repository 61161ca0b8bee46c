// The approvals inbox: every pending request, approve or reject it with a reason; with
// ?all=1 the decided ones too, with who decided, when and why.

import * as api from "../api.js";
import { h, message, replace } from "../dom.js";
import { ZONE, timeEl } from "../format.js";
import { approvalForm } from "./forms.js";

export default function approvals(ctx, _arg, params) {
  let all = params.all === "1";
  const flash = message();
  const error = message();
  const inbox = h("div", { class: "cards" });
  const empty = h("p", { class: "empty", text: "No approval is waiting. Runs that ask for one appear here." });
  const decidedBody = h("tbody");
  const decided = h("section", { class: "decided", "aria-label": "Decided" },
    h("h2", { text: "Decided" }),
    h("div", { class: "table-wrap" }, h("table", {},
      h("thead", {}, h("tr", {}, ["Request", "Run", "Decision", "By", "Reason", `Decided (${ZONE})`].map((t) => h("th", { scope: "col", text: t })))),
      decidedBody)));
  const toggle = h("a", { class: "chip" });
  const cards = new Map();

  const el = h("section", { class: "view" },
    h("div", { class: "view-head" }, h("h1", { text: "Approvals" }), toggle),
    flash.el, error.el, h("h2", { class: "sub", text: "Waiting for a decision" }), empty, inbox, decided);

  function sync() {
    toggle.textContent = all ? "Hide decided" : "Show decided";
    toggle.setAttribute("href", ctx.link("approvals", all ? {} : { all: "1" }));
    decided.hidden = !all;
  }

  function card(a) {
    const form = approvalForm(ctx, a, (text) => {
      flash.ok(text);
      ctx.refresh();
    });
    return h("article", { class: "card", "aria-label": `Approval for ${a.workflow_id}`, data: { id: a.workflow_id } },
      h("header", {}, h("a", { class: "id", href: ctx.link("run", {}, a.workflow_id), text: a.workflow_id })),
      form.el);
  }

  async function refresh() {
    let data;
    try {
      ({ data } = await api.get("/approvals", all ? { all: "true" } : {}));
    } catch (err) {
      error.error(`Cannot list approvals: ${err.message}`);
      if (err.status === 0) throw err;
      return;
    }
    error.clear();
    const open = data.approvals.filter((a) => !a.decision);
    const keys = new Set(open.map((a) => `${a.workflow_id}\u0000${a.approval_id}`));
    for (const [key, node] of cards) {
      if (!keys.has(key)) {
        node.remove();
        cards.delete(key);
      }
    }
    for (const a of open) {
      const key = `${a.workflow_id}\u0000${a.approval_id}`;
      if (!cards.has(key)) {
        const node = card(a);
        cards.set(key, node);
        inbox.append(node);
      }
    }
    empty.hidden = open.length > 0;
    if (all) {
      const done = data.approvals.filter((a) => a.decision).reverse();
      replace(decidedBody, done.length ? done.map((a) => h("tr", {},
        h("td", { text: a.subject }),
        h("td", { class: "id" }, h("a", { href: ctx.link("run", {}, a.workflow_id), text: a.workflow_id })),
        h("td", {}, h("span", { class: ["badge", a.decision.approved ? "s-completed" : "s-failed"], text: a.decision.approved ? "approved" : "rejected" })),
        h("td", { text: a.decision.by }),
        h("td", { class: "note", text: a.decision.reason || "" }),
        h("td", { class: "time" }, timeEl(a.decision.decided_at)))) : h("tr", {}, h("td", { colspan: 6, class: "empty", text: "Nothing decided yet." })));
    }
  }

  sync();
  return {
    el,
    title: "Approvals",
    update(p) {
      all = p.all === "1";
      sync();
    },
    refresh,
  };
}
