// Times, durations, values and statuses as a person reads them. Times come from the API as
// ISO 8601 UTC and are shown in the browser's zone.

import { h } from "./dom.js";

export const ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";

const FULL = new Intl.DateTimeFormat(undefined, {
  year: "numeric", month: "short", day: "2-digit",
  hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short",
});
const SAME_DAY = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });
const OTHER_DAY = new Intl.DateTimeFormat(undefined, {
  month: "short", day: "2-digit", hour: "2-digit", minute: "2-digit",
});
const OTHER_YEAR = new Intl.DateTimeFormat(undefined, { year: "numeric", month: "short", day: "2-digit" });

export const STATUSES = [
  "pending", "running", "suspended", "needs_attention", "failed", "completed", "cancelled",
];
export const TERMINAL = new Set(["completed", "failed", "cancelled"]);

/** A Date from an ISO string (null stays null). */
export function parse(iso) {
  if (!iso) return null;
  const when = new Date(iso);
  return Number.isNaN(when.getTime()) ? null : when;
}

/** The whole local date and time, with the zone. */
export function fullTime(iso) {
  const when = parse(iso);
  return when ? FULL.format(when) : "—";
}

/** A short local time: the clock today, the day and clock this year, else the date. */
export function shortTime(iso) {
  const when = parse(iso);
  if (!when) return "—";
  const now = new Date();
  if (when.toDateString() === now.toDateString()) return SAME_DAY.format(when);
  if (when.getFullYear() === now.getFullYear()) return OTHER_DAY.format(when);
  return OTHER_YEAR.format(when);
}

/** A <time> element: the short form, the full one (and UTC) on hover. */
export function timeEl(iso, { relative = false } = {}) {
  if (!iso) return h("span", { class: "muted", text: "—" });
  const text = relative ? ago(iso) : shortTime(iso);
  return h("time", { datetime: iso, title: `${fullTime(iso)}\n${iso}`, text });
}

/** Seconds as "850 ms", "4.2 s", "3 min 5 s", "2 h 10 min", "3 d 4 h". */
export function duration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "—";
  const s = Math.max(0, seconds);
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 60) return `${s < 10 ? s.toFixed(1) : Math.round(s)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.floor(s % 60)} s`;
  const hrs = Math.floor(m / 60);
  if (hrs < 24) return `${hrs} h ${m % 60} min`;
  return `${Math.floor(hrs / 24)} d ${hrs % 24} h`;
}

/** Seconds between two ISO times (the second defaults to now). */
export function between(fromIso, toIso) {
  const from = parse(fromIso);
  if (!from) return null;
  const to = toIso ? parse(toIso) : new Date();
  return to ? (to - from) / 1000 : null;
}

/** "12 s ago", "3 min ago", or the short time when it is older than a day. */
export function ago(iso) {
  const s = between(iso);
  if (s === null) return "—";
  if (s < 86_400) return s < 2 ? "just now" : `${duration(s).replace(/ \d+ (s|min)$/, "")} ago`;
  return shortTime(iso);
}

/** A recorded value as text: a string as itself, anything else as indented JSON. */
export function valueText(value) {
  if (value === undefined) return "";
  if (typeof value === "string") return value;
  return JSON.stringify(value, null, 2);
}

/** A recorded value in one line, cut at n characters. */
export function oneLine(value, n = 120) {
  if (value === null || value === undefined) return "";
  const text = typeof value === "string" ? value : JSON.stringify(value);
  const flat = text.replace(/\s+/g, " ");
  return flat.length > n ? `${flat.slice(0, n - 1)}…` : flat;
}

/** A block showing a recorded value whole (as text, never as markup). */
export function valueBlock(value, cls = "") {
  return h("pre", { class: ["value", cls], text: valueText(value) });
}

/** The status badge of a run or an entry. */
export function badge(status, extra = {}) {
  return h("span", { class: ["badge", `s-${status}`], text: status.replace("_", " "), ...extra });
}

/**
 * Token counts, cost and step attempts in words. For a run's totals, interrupted counts the
 * attempts the totals leave out (interrupted mid-attempt, so in doubt), and terminal says
 * whether the run has ended: a run without any attempt says so instead of "0 step attempts".
 * Totals that miss an interrupted attempt's usage (usage.partial) read as a lower bound (≥).
 */
export function usageText(usage, { interrupted = 0, terminal = false } = {}) {
  if (!usage) return "—";
  const parts = [];
  const least = usage.partial ? "≥ " : "";
  if (usage.input_tokens || usage.output_tokens) {
    parts.push(`${least}${usage.input_tokens.toLocaleString()} in / ${least}${usage.output_tokens.toLocaleString()} out tokens`);
  }
  if (usage.cost) parts.push(`${least}$${usage.cost.toFixed(4)}`);
  const attempts = usage.attempts + interrupted;
  if (attempts || parts.length) {
    parts.push(`${attempts} step attempt${attempts === 1 ? "" : "s"}${interrupted ? ` (${interrupted} interrupted)` : ""}`);
  } else {
    parts.push(terminal ? "no step attempts" : "no step attempts yet");
  }
  return parts.join(" · ");
}

/** The error's type (the text before the first colon), when it has one. */
export function errorType(error) {
  const m = /^([A-Za-z_][\w.]*):/.exec(error || "");
  return m ? m[1] : null;
}

/** An ISO UTC string from a datetime-local input's value (which is local time). */
export function localInputToIso(value) {
  if (!value) return null;
  const when = new Date(value);
  return Number.isNaN(when.getTime()) ? null : when.toISOString();
}

/** A datetime-local input's value (local time) from an ISO string. */
export function isoToLocalInput(iso) {
  const when = parse(iso);
  if (!when) return "";
  const pad = (n) => String(n).padStart(2, "0");
  return `${when.getFullYear()}-${pad(when.getMonth() + 1)}-${pad(when.getDate())}T${pad(when.getHours())}:${pad(when.getMinutes())}`;
}
