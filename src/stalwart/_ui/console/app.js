// The console's shell: the route (in the URL hash, so every view and filter is a link), the
// live refresh (the current view polls every two seconds), the counts in the navigation.

import * as api from "./api.js";
import { h, replace } from "./dom.js";
import { ZONE, shortTime } from "./format.js";
import approvals from "./views/approvals.js";
import attention from "./views/attention.js";
import failed from "./views/failed.js";
import fleet from "./views/fleet.js";
import overview from "./views/overview.js";
import run from "./views/run.js";
import runs from "./views/runs.js";

const VIEWS = { runs, run, overview, approvals, attention, failed, fleet };
const POLL_MS = 2000;

const main = document.getElementById("main");
const liveEl = document.getElementById("live");
const liveToggle = document.getElementById("live-toggle");
const tokenButton = document.getElementById("token-button");

let current = null; // {page, key, view, loaded}
let flashText = "";
let forced = false; // a refresh asked for by an action: done even while paused, and in full

/** The route of a hash: "#/run/ID?x=1" -> {page: "run", arg: "ID", params: {x: "1"}}. */
function parseHash(hash) {
  const raw = hash.replace(/^#\/?/, "");
  const q = raw.indexOf("?");
  const path = q < 0 ? raw : raw.slice(0, q);
  const params = Object.fromEntries(new URLSearchParams(q < 0 ? "" : raw.slice(q + 1)));
  const slash = path.indexOf("/");
  const page = (slash < 0 ? path : path.slice(0, slash)) || "runs";
  let arg = slash < 0 ? "" : path.slice(slash + 1);
  try {
    arg = decodeURIComponent(arg);
  } catch {
    // a malformed escape: keep the text as it is
  }
  return { page: VIEWS[page] ? page : "runs", arg, params };
}

/** The hash of a route: link("run", {}, id), link("runs", {status: "failed"}). */
export function link(page, params = {}, arg = "") {
  const qs = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (value !== null && value !== undefined && value !== "") qs.set(key, String(value));
  }
  const text = qs.toString();
  return `#/${page}${arg ? `/${encodeURIComponent(arg)}` : ""}${text ? `?${text}` : ""}`;
}

const ctx = {
  link,
  /** Go to a route (a new history entry), with an optional message shown there. */
  navigate(hash, flash = "") {
    flashText = flash;
    if (location.hash === hash) route();
    else location.hash = hash;
  },
  /** Record the view's state in the URL without a new history entry or a re-route. */
  setParams(params) {
    const { page, arg } = parseHash(location.hash);
    history.replaceState(null, "", link(page, params, arg));
  },
  /** Refresh the current view and the counts now (the view reads everything again). */
  refresh() {
    forced = true;
    tick();
  },
};

function route() {
  const { page, arg, params } = parseHash(location.hash);
  const key = `${page}/${arg}`;
  for (const a of document.querySelectorAll("nav a[data-page]")) {
    const here = a.dataset.page === page || (page === "run" && a.dataset.page === "runs");
    if (here) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  if (current && current.key === key && current.view.update) {
    current.view.update(params);
  } else {
    const view = VIEWS[page](ctx, arg, params);
    current = { page, key, view };
    const flash = flashText ? h("p", { class: "msg ok flash", role: "status", text: flashText }) : null;
    flashText = "";
    replace(main, flash, view.el);
    document.title = `${view.title || page} · stalwart`;
    window.scrollTo(0, 0);
  }
  tick();
}

// -- live refresh --------------------------------------------------------------------------

let timer = null;
let busy = false;
let again = false;

async function tick() {
  if (busy) {
    again = true;
    return;
  }
  busy = true;
  clearTimeout(timer);
  try {
    const asked = forced;
    const wanted = liveToggle.checked || forced || (current && !current.loaded);
    forced = false;
    if (!wanted) {
      liveEl.textContent = "Paused";
      liveEl.className = "live paused";
    } else if (current) {
      const view = current;
      await Promise.all([view.view.refresh({ forced: asked }), counts()]);
      view.loaded = true;
      liveEl.textContent = `Updated ${shortTime(new Date().toISOString())}`;
      liveEl.className = liveToggle.checked ? "live on" : "live paused";
    }
  } catch (err) {
    liveEl.textContent = err.status === 0 ? "Server unreachable" : `Not updating: ${err.message}`;
    liveEl.className = "live off";
  } finally {
    busy = false;
    const wait = again ? 0 : POLL_MS;
    again = false;
    timer = setTimeout(tick, wait);
  }
}

async function counts() {
  const [page, pending] = await Promise.all([
    api.get("/runs", { limit: 1 }),
    api.get("/approvals/count"),
  ]);
  const numbers = { ...page.data.counts, approvals: pending.data.pending };
  for (const el of document.querySelectorAll("[data-count]")) {
    const n = numbers[el.dataset.count] || 0;
    el.textContent = n ? String(n) : "";
    el.hidden = !n;
  }
}

// -- the session ---------------------------------------------------------------------------

function showToken(has) {
  tokenButton.textContent = has ? "Forget token" : "Set token";
  tokenButton.title = has ? `Acting as ${api.actor() || "ui"}; the token is kept for this tab only` : "";
}

tokenButton.addEventListener("click", () => {
  if (api.token()) api.forgetToken();
  else api.askToken();
});
api.onTokenChange(showToken);
liveToggle.addEventListener("change", () => tick());
document.addEventListener("visibilitychange", () => {
  if (!document.hidden) tick();
});
window.addEventListener("hashchange", route);

async function start() {
  document.getElementById("zone").textContent = ZONE;
  showToken(Boolean(api.token()));
  try {
    const { data } = await api.get("/health");
    document.getElementById("store").textContent = `${data.store} · stalwart ${data.version}`;
    if (data.reads_need_token && !api.token()) {
      await api.askToken("This console is reachable from other machines: reading needs the token too.");
    }
  } catch (err) {
    liveEl.textContent = `Not updating: ${err.message}`;
    liveEl.className = "live off";
  }
  route();
}

start();
