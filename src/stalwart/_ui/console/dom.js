// Building the page. Every value from the API is untrusted text (a model may have written it),
// so the DOM is made with createElement and text nodes only: no innerHTML, no attribute named
// on*, no style attribute, no javascript: link.

const SAFE_URL = /^(#|\/(?!\/)|https?:\/\/)/i;

/**
 * An element: h("a", {href: "#/runs", class: "x", text: "Runs"}, child, ...).
 * Props: class, text, on (event -> handler), data (dataset), anything else an attribute
 * (false/null/undefined leave it out, true sets it empty). Children: nodes, strings (as
 * text), numbers, arrays of those; null and false are skipped.
 */
export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = Array.isArray(value) ? value.filter(Boolean).join(" ") : value;
    else if (key === "text") el.textContent = String(value);
    else if (key === "on") for (const [name, fn] of Object.entries(value)) el.addEventListener(name, fn);
    else if (key === "data") for (const [name, v] of Object.entries(value)) el.dataset[name] = String(v);
    else if (key === "value") el.value = String(value);
    else if (key === "checked" || key === "disabled" || key === "hidden" || key === "open") el[key] = Boolean(value);
    else setAttr(el, key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

/** Set an attribute, refusing the ones that could run code or restyle the page. */
export function setAttr(el, name, value) {
  const lower = name.toLowerCase();
  if (lower.startsWith("on") || lower === "style" || lower === "srcdoc") {
    throw new Error(`refused attribute ${name}`);
  }
  if ((lower === "href" || lower === "src" || lower === "action") && !SAFE_URL.test(value)) {
    throw new Error(`refused URL ${value}`);
  }
  el.setAttribute(name, value);
}

/** Append children (see h) to el. */
export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Replace every child of el. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** Show or hide el (the hidden attribute, which the stylesheet honours). */
export function show(el, visible) {
  el.hidden = !visible;
}

let ids = 0;

/** A fresh id for label/for pairs. */
export function uid(prefix = "f") {
  ids += 1;
  return `${prefix}-${ids}`;
}

/** A labelled field: [label, control] with the label bound to the control. */
export function field(labelText, control, hint) {
  if (!control.id) control.id = uid();
  const parts = [h("label", { for: control.id, text: labelText }), control];
  if (hint) {
    const hintEl = h("small", { class: "hint", id: uid("hint"), text: hint });
    control.setAttribute("aria-describedby", hintEl.id);
    parts.push(hintEl);
  }
  return h("div", { class: "field" }, parts);
}

/**
 * A message line: kind "ok" is a polite status, "error" an alert; clear() hides it. The text
 * may be several parts (strings as text, nodes such as a link to a run), as h's children.
 */
export function message() {
  const el = h("p", { class: "msg", hidden: true });
  return {
    el,
    ok(...parts) {
      el.setAttribute("role", "status");
      el.className = "msg ok";
      replace(el, parts);
      el.hidden = false;
    },
    error(...parts) {
      el.setAttribute("role", "alert");
      el.className = "msg error";
      replace(el, parts);
      el.hidden = false;
    },
    clear() {
      el.hidden = true;
      el.textContent = "";
    },
  };
}

/**
 * Run an action from a button: the button is disabled meanwhile, the message says how it went.
 * action() returns the success text (or nothing); its errors are shown as "Type: message".
 */
export async function act(button, msg, action) {
  button.disabled = true;
  button.setAttribute("aria-busy", "true");
  msg.clear();
  try {
    const done = await action();
    if (done) msg.ok(done);
    return true;
  } catch (err) {
    msg.error(describeError(err));
    return false;
  } finally {
    button.disabled = false;
    button.removeAttribute("aria-busy");
  }
}

/** An error in words, for a person. */
export function describeError(err) {
  if (err && err.type && err.message) return `${err.type}: ${err.message}`;
  return String((err && err.message) || err);
}
