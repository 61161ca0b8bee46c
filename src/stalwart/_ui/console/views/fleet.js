// The fleet: queues (depth, running, limits), live workers and their leases, circuit breakers.

import * as api from "../api.js";
import { h, message, replace } from "../dom.js";
import { badge, between, timeEl } from "../format.js";

const STALE_SECONDS = 30; // three missed renewals at the default lease: it has probably stopped

function table(label, columns, rows, emptyText) {
  return h("div", { class: "table-wrap" }, h("table", { "aria-label": label },
    h("thead", {}, h("tr", {}, columns.map((c) => h("th", { scope: "col", class: c.num ? "num" : null, text: c.title })))),
    h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: columns.length, class: "empty", text: emptyText })))));
}

function limit(n) {
  return n === null || n === undefined ? h("span", { class: "muted", text: "no limit" }) : String(n);
}

function meter(used, of) {
  if (!of) return null;
  const cells = [];
  for (let i = 0; i < Math.min(of, 20); i += 1) cells.push(h("span", { class: i < used ? "on" : "" }));
  return h("span", { class: "meter", role: "img", "aria-label": `${used} of ${of} slots in use` }, cells);
}

export default function fleet(ctx) {
  const error = message();
  const queues = h("section", { "aria-label": "Queues" });
  const workers = h("section", { "aria-label": "Workers" });
  const breakers = h("section", { "aria-label": "Breakers" });
  const el = h("section", { class: "view" }, h("h1", { text: "Queues & workers" }), error.el, queues, workers, breakers);
  let seen = "";

  function render(q, w, b) {
    replace(queues, h("h2", { text: "Queues" }), table("Queues", [
      { title: "Queue" }, { title: "Pending", num: true }, { title: "Running", num: true },
      { title: "Concurrency" }, { title: "Rate" },
    ], q.map((x) => h("tr", {},
      h("td", {}, h("a", { href: ctx.link("runs", { queue: x.name }), text: x.name })),
      h("td", { class: "num" }, x.pending ? h("a", { href: ctx.link("runs", { queue: x.name, status: "pending" }), text: String(x.pending) }) : "0"),
      h("td", { class: "num", text: String(x.running) }),
      h("td", {}, x.concurrency ? [meter(x.running, x.concurrency), ` ${x.running} / ${x.concurrency}`] : limit(null)),
      h("td", {}, x.rate ? `${x.rate} per ${x.period === 1 ? "second" : `${x.period} s`}` : limit(null)))),
    "No queue yet."));

    replace(workers, h("h2", { text: "Workers" }), table("Workers", [
      { title: "Worker" }, { title: "Host" }, { title: "PID", num: true }, { title: "Queues" },
      { title: "Running", num: true }, { title: "Started" }, { title: "Last seen" },
    ], w.map((x) => {
      const stale = between(x.seen_at) > STALE_SECONDS;
      return h("tr", { class: stale ? "stale" : null },
        h("td", { class: "id" }, h("code", { text: x.id })),
        h("td", { text: x.host }),
        h("td", { class: "num", text: String(x.pid) }),
        h("td", { text: x.queues.join(", ") }),
        h("td", { class: "num", text: String(x.running) }),
        h("td", { class: "time" }, timeEl(x.started_at)),
        h("td", { class: "time" }, timeEl(x.seen_at, { relative: true }), stale ? h("span", { class: "badge s-failed", text: "silent" }) : null));
    }), "No worker is serving this store. Start one: stalwart worker MODULE:APP"));

    replace(breakers, h("h2", { text: "Circuit breakers" }), table("Breakers", [
      { title: "Breaker" }, { title: "State" }, { title: "Failures", num: true }, { title: "Opened" }, { title: "Probe at" },
    ], b.map((x) => h("tr", {},
      h("td", { text: x.name }),
      h("td", {}, badge(x.state === "closed" ? "completed" : x.state === "open" ? "failed" : "suspended", { text: x.state.replace("_", " ") })),
      h("td", { class: "num", text: String(x.failures) }),
      h("td", { class: "time" }, timeEl(x.opened_at)),
      h("td", { class: "time" }, timeEl(x.retry_at)))),
    "No breaker has counted a failure."));
  }

  async function refresh() {
    let answers;
    try {
      answers = await Promise.all(["/queues", "/workers", "/breakers"].map((p) => api.get(p)));
    } catch (err) {
      error.error(`Cannot read the fleet: ${err.message}`);
      if (err.status === 0) throw err;
      return;
    }
    error.clear();
    const key = answers.map((a) => a.text).join("");
    if (key === seen) return;
    seen = key;
    const [q, w, b] = answers.map((a) => a.data);
    render(q.queues, w.workers, b.breakers);
  }

  return { el, title: "Queues & workers", refresh };
}
