// The HTTP API under /api/v1. Writes carry "Authorization: Bearer T" (never a cookie, so a
// page of another site cannot act with it). The token is asked for once, kept in
// sessionStorage (gone with the tab), and asked for again when the server answers 401.

const BASE = "/api/v1";
const TOKEN_KEY = "stalwart.token";
const BY_KEY = "stalwart.by";
const HEADER_SAFE = /^[\x20-\x7e]*$/;

/** An error answer of the API: HTTP status, error type and message. */
export class ApiError extends Error {
  constructor(status, type, message) {
    super(message);
    this.status = status;
    this.type = type;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

/** Who acts, recorded in the journal with each write ("ui" when empty). */
export function actor() {
  return sessionStorage.getItem(BY_KEY) || "";
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  changed();
}

const listeners = new Set();
/** Call fn whenever the token is set or forgotten. */
export function onTokenChange(fn) {
  listeners.add(fn);
}
function changed() {
  for (const fn of listeners) fn(Boolean(token()));
}

// -- the token dialog ------------------------------------------------------------------------

let pending = null; // the promise of the open dialog, shared by concurrent writes

/** Open the token dialog (once, however many callers wait); resolves true when a token was
 * saved, false when the person closed the dialog. */
export function askToken(why = "") {
  if (pending) return pending;
  const dialog = document.getElementById("token-dialog");
  const form = dialog.querySelector("form");
  const input = document.getElementById("token-input");
  const by = document.getElementById("by-input");
  const note = document.getElementById("token-why");
  const error = document.getElementById("token-error");
  note.textContent = why;
  note.hidden = !why;
  error.hidden = true;
  input.value = "";
  by.value = actor();
  pending = new Promise((resolve) => {
    const finish = (saved) => {
      form.removeEventListener("submit", onSubmit);
      dialog.removeEventListener("close", onClose);
      if (dialog.open) dialog.close();
      pending = null;
      resolve(saved);
    };
    const onSubmit = (event) => {
      event.preventDefault();
      const given = input.value.trim();
      const name = by.value.trim();
      if (!given || !HEADER_SAFE.test(given) || !HEADER_SAFE.test(name)) {
        error.textContent = given
          ? "Use plain ASCII letters, digits and punctuation."
          : "Paste the token that stalwart ui printed.";
        error.hidden = false;
        return;
      }
      sessionStorage.setItem(TOKEN_KEY, given);
      if (name) sessionStorage.setItem(BY_KEY, name);
      else sessionStorage.removeItem(BY_KEY);
      changed();
      finish(true);
    };
    const onClose = () => finish(false);
    form.addEventListener("submit", onSubmit);
    dialog.addEventListener("close", onClose);
    dialog.querySelector("[data-close]").onclick = () => finish(false);
    dialog.showModal();
    input.focus();
  });
  return pending;
}

// -- requests --------------------------------------------------------------------------------

function query(params) {
  const qs = new URLSearchParams();
  for (const [key, value] of Object.entries(params || {})) {
    if (value !== null && value !== undefined && value !== "") qs.set(key, String(value));
  }
  const text = qs.toString();
  return text ? `?${text}` : "";
}

/** The address and headers of a read the page makes itself (a stream, read as it arrives). */
export function reading(path, extra = {}) {
  const headers = { ...extra };
  if (token()) headers.Authorization = `Bearer ${token()}`;
  return { url: BASE + path, init: { headers, cache: "no-store", credentials: "omit" } };
}

async function send(method, path, body) {
  const headers = { Accept: "application/json" };
  if (token()) headers.Authorization = `Bearer ${token()}`;
  if (actor()) headers["X-Stalwart-By"] = actor();
  const init = { method, headers, cache: "no-store", credentials: "omit" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(BASE + path, init);
  } catch (err) {
    throw new ApiError(0, "Unreachable", `the console's server does not answer (${err.message})`);
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const e = (data && data.error) || {};
    throw new ApiError(response.status, e.type || `HTTP ${response.status}`, e.message || text.slice(0, 200));
  }
  return { data, text };
}

/** Send, asking for the token when there is none (writes) or when it is refused (401). */
async function authorised(method, path, body, needsToken) {
  if (needsToken && !token()) {
    if (!(await askToken("This action needs the token that stalwart ui printed."))) {
      throw new ApiError(401, "Unauthorized", "no token given");
    }
  }
  for (;;) {
    try {
      return await send(method, path, body);
    } catch (err) {
      if (err.status !== 401) throw err;
      const why = token() ? "The server refused that token. Paste the current one." : "The server needs the token.";
      sessionStorage.removeItem(TOKEN_KEY);
      changed();
      if (!(await askToken(why))) throw err;
    }
  }
}

/** GET a read: the parsed JSON and its text (to tell whether anything changed). */
export function get(path, params) {
  return authorised("GET", path + query(params), undefined, false);
}

/** POST a write (needs the token); the parsed JSON answer. */
export async function post(path, body = {}) {
  const { data } = await authorised("POST", path, body, true);
  return data;
}

/** The path of a run (its id may hold any character). */
export function runPath(id, tail = "") {
  return `/runs/${encodeURIComponent(id)}${tail}`;
}
