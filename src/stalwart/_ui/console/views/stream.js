// The run's stream ("default"), live: what the run emits (stalwart.emit), read from
// GET /runs/{id}/stream as Server-Sent Events with fetch (so a token goes along where reads
// need one). Text is shown as stalwart.stream_text shows it: once a later attempt of a step
// (a seq) streams, its earlier attempts' text is dropped. A dropped connection is read again
// after the last chunk shown (Last-Event-ID); the read stops at the stream's end (the run
// ended) or when the page leaves the run.

import * as api from "../api.js";
import { h, show } from "../dom.js";

const RETRY_MS = 1000;

/** The text of the chunks held, as stream_text reads them. */
function textOf(chunks) {
  const latest = new Map();
  for (const c of chunks) {
    if (c.seq !== null && c.attempt > (latest.get(c.seq) ?? -1)) latest.set(c.seq, c.attempt);
  }
  return chunks
    .filter((c) => c.seq === null || c.attempt === latest.get(c.seq))
    .map((c) => (typeof c.data === "string" ? c.data : ""))
    .join("");
}

export default function streamPanel(id) {
  const text = h("pre", { class: "stream-text", "data-testid": "stream-text" });
  const state = h("span", { class: "muted", "data-testid": "stream-state" });
  const el = h("section", { class: "stream", "aria-label": "Stream", hidden: true },
    h("div", { class: "section-head" }, h("h2", { text: "Stream" }), state), text);
  const chunks = [];
  let last = -1;
  let stopped = false;
  let started = false;
  const controller = new AbortController();

  function render() {
    text.textContent = textOf(chunks);
    show(el, chunks.length > 0);
  }

  /** One event of the answer: a chunk to show, or the end. */
  function dispatch(event) {
    if (event.event === "end") {
      state.textContent = "ended";
      stopped = true;
      return;
    }
    if (event.event !== "chunk" || event.data === undefined) return;
    const chunk = JSON.parse(event.data);
    if (chunk.offset <= last) return; // a chunk shown already
    last = chunk.offset;
    chunks.push(chunk);
    render();
  }

  async function readOnce() {
    const headers = last >= 0 ? { "Last-Event-ID": String(last) } : {};
    const { url, init } = api.reading(api.runPath(id, "/stream"), headers);
    const response = await fetch(url, { ...init, signal: controller.signal });
    if (response.status === 404) {
      stopped = true; // no such run (the run page says so)
      return;
    }
    if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
    state.textContent = "live";
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let event = {};
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, cut).replace(/\r$/, "");
        buffer = buffer.slice(cut + 1);
        if (line === "") {
          dispatch(event);
          event = {};
          if (stopped) return;
        } else if (!line.startsWith(":")) {
          const at = line.indexOf(":");
          const name = at < 0 ? line : line.slice(0, at);
          const field = at < 0 ? "" : line.slice(at + 1).replace(/^ /, "");
          event[name] = name === "data" && event.data !== undefined ? `${event.data}\n${field}` : field;
        }
      }
    }
  }

  async function follow() {
    while (!stopped && el.isConnected !== false) {
      try {
        await readOnce();
      } catch (err) {
        if (controller.signal.aborted) return;
        state.textContent = "reconnecting";
      }
      if (!stopped) await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
    }
  }

  // The page left this run: stop reading.
  const watch = setInterval(() => {
    if (!el.isConnected && started) {
      stopped = true;
      controller.abort();
      clearInterval(watch);
    } else if (stopped) {
      clearInterval(watch);
    }
  }, RETRY_MS);

  function start() {
    if (started) return;
    started = true;
    follow();
  }

  return { el, start };
}
