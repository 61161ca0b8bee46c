"""The console's pictures: how long a 1,000-entry run timeline takes to draw in the browser, and
how long GET /api/v1/stats takes the store on 100,000 runs.

Timeline: a run of exactly 1,000 journal entries (998 step attempts, three of them retried after
a backoff) on a SQLite store, its page opened in the system's headless Chromium (Playwright)
against ``stalwart ui`` ``--loads`` times; each load reads the journal to its end, and the
draw of all 1,000 entries is read from the page's own performance timings: ``run-timeline-draw``
(building and inserting the SVG) and ``run-timeline-shown`` (until the frame after it was
painted). Goal: < 200 ms. Floor, in the same page: inserting 1,000 bare titled SVG rects.

Stats: ``app._stats_json(window)`` (what the route answers) for 1h, 24h and 7d on the store
bench/console_seed.py seeds (100,000 runs, 1,000,000 entries; ``--runs``/``--entries`` for a
smaller one), ``--calls`` times after three warm-up calls: median and p95 against the 200 ms
goal and the ratio to the store's primary-key read of one run row, measured in the same run.

    python bench/console_pictures.py [--parts timeline,stats] [--stores sqlite,postgres]
                                     [--loads 5] [--calls 20] [--runs N --entries N]
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from console_reads import DEFAULT_POSTGRES_URL, timed, ui_server
from console_seed import Rows, Shape, drop_schema, seed_postgres, seed_sqlite

import stalwart
from stalwart import testing

GOAL_MS = 200.0
ENTRIES = 1000
RETRIED = 3  # attempts that fail once and are retried (an entry each)

# The drawn timeline inserted again (a copy, in its place), until the frame after it painted.
PAINT_JS = """() => new Promise((done) => {
  const svg = document.querySelector("svg.timeline-chart");
  const parent = svg.parentNode;
  svg.remove();
  document.body.getBoundingClientRect();
  const began = performance.now();
  parent.append(svg.cloneNode(true));
  requestAnimationFrame(() => setTimeout(() => done(performance.now() - began), 0));
})"""

FLOOR_JS = """() => {
  const ns = "http://www.w3.org/2000/svg";
  const began = performance.now();
  const svg = document.createElementNS(ns, "svg");
  for (let i = 0; i < 1000; i += 1) {
    const rect = document.createElementNS(ns, "rect");
    rect.setAttribute("x", String(i)); rect.setAttribute("y", "1");
    rect.setAttribute("width", "2"); rect.setAttribute("height", "10");
    const title = document.createElementNS(ns, "title");
    title.textContent = `#${i} step, attempt 1, 12 ms: completed`;
    rect.append(title);
    svg.append(rect);
  }
  document.body.append(svg);
  const took = performance.now() - began;
  svg.remove();
  return took;
}"""


def long_run(url: str) -> str:
    """A completed run of exactly ENTRIES journal entries on ``url``; its id."""
    app = stalwart.Stalwart(url)
    failed: set[int] = set()
    every = (ENTRIES - 2 - RETRIED) // (RETRIED + 1)

    @app.step(name="reply", retry=stalwart.Retry(initial_delay=0.05, jitter=False))
    def reply(turn: int) -> str:
        if turn % every == every - 1 and turn not in failed and len(failed) < RETRIED:
            failed.add(turn)
            raise TimeoutError("the model did not answer in time")
        return f"turn {turn}"

    @app.workflow(name="long_chat")
    def long_chat(turns: int) -> int:
        for turn in range(turns):
            reply(turn)
        return turns

    with app:
        app.run(long_chat, ENTRIES - 2 - RETRIED, workflow_id="chat-1000")  # + started, finished
        size = app.journal_size("chat-1000")
        assert size == ENTRIES, size
    return "chat-1000"


def timeline(loads: int) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("timeline: no chromium on this machine (apt-get install chromium): skipped")
        return
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import expect, sync_playwright

    logging.getLogger("stalwart").setLevel(logging.CRITICAL)  # the retried attempts
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'chat.db'}"
        wid = long_run(url)
        draws, painted, shown, floors = [], [], [], []
        with ui_server(url) as base, sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, headless=True)
            page = browser.new_page(viewport={"width": 1360, "height": 860})
            page.set_default_timeout(60_000)
            for _ in range(loads):
                page.goto(f"{base}/#/run/{wid}")
                page.reload()
                expect(page.get_by_test_id("run-status")).to_have_text("completed")
                more = page.get_by_role("button", name="Load more entries")
                whole = page.get_by_text(f"{ENTRIES} entries", exact=True)
                while not whole.is_visible():
                    with contextlib.suppress(PlaywrightError):  # hidden meanwhile: all read
                        more.click(timeout=1000)
                    page.wait_for_timeout(50)
                page.wait_for_timeout(300)  # the frame after the last draw
                measures = page.evaluate(
                    """() => ["run-timeline-draw", "run-timeline-shown"].map((name) =>
                         performance.getEntriesByName(name)
                           .filter((m) => m.detail.entries === 1000).map((m) => m.duration))"""
                )
                draws.append(measures[0][-1])
                shown.append(measures[1][-1])
                painted.append(measures[0][-1] + page.evaluate(PAINT_JS))
                floors.append(page.evaluate(FLOOR_JS))
            bars = page.get_by_role("img", name="Run timeline").locator("rect.bar").count()
            browser.close()
    floor = statistics.median(floors)
    print(f"\ntimeline: a run of {ENTRIES} entries ({bars} bars), {loads} page loads, headless "
          "Chromium; goal < 200 ms")  # fmt: skip
    for label, samples in (
        ("draw (build + insert)", draws),
        ("draw + its paint", painted),
        ("page frame (context)", shown),
    ):
        worst = max(samples)
        middle = statistics.median(samples)
        goal = "" if "context" in label else "MET" if middle < GOAL_MS else "NOT MET"
        print(f"  {label:<24} median {statistics.median(samples):7.1f} ms  max {worst:7.1f} ms  "
              f"x floor {statistics.median(samples) / floor:5.1f}  {goal}")  # fmt: skip
    print(
        f"  floor: 1,000 bare titled SVG rects inserted, median {floor:.1f} ms; judged on the "
        f"median (the max is the shared machine's; load average {os.getloadavg()[0]:.1f})"
    )


def cpu_ms(call: Any, calls: int) -> float:
    """The median CPU time of this process a call of ``call``, in ms."""
    samples = []
    for _ in range(calls):
        began = time.process_time()
        call()
        samples.append((time.process_time() - began) * 1000)
    return statistics.median(samples)


def stats(kind: str, url: str, calls: int) -> None:
    with stalwart.Stalwart(url) as app:
        store = testing.store_of(app)
        (first,) = testing.execute_sql(store, "SELECT workflow_id FROM runs LIMIT 1")
        base = timed("baseline: pk read of one run row", lambda: store.get_run(first[0]), calls)
        rows = [base]
        for window in ("1h", "24h", "7d"):
            rows.append(timed(f"stats window={window}", lambda w=window: app._stats_json(w), calls))
        sizes = {w: app._stats_json(w) for w in ("1h", "24h", "7d")}
        since = time.time() - 7 * 86_400
        window = {"since": since, "width": 21_600.0, "every": 13, "name": None}
        parts = [
            timed(f"7d query {name}", lambda n=name: store._rows(n, window), max(5, calls // 4))
            for name in ("stats_started", "stats_finished", "stats_steps",
                         "stats_steps_in_doubt", "stats_step_times", "stats_workflows")
        ]  # fmt: skip
        parts.append(timed("queues (queue_counts, ...)", app.queues, max(5, calls // 4)))
        cpu = {w: cpu_ms(lambda w=w: app._stats_json(w), calls) for w in ("1h", "24h", "7d")}
    print(f"\n{kind}: GET /api/v1/stats's read ({calls} calls each after 3 warm-up calls)")
    print(f"{'store':<9} {'read':<36} {'median ms':>10} {'p95 ms':>9} {'x base':>8}  goal")
    for t in rows:
        verdict = "MET" if t.p95 <= GOAL_MS else "NOT MET"
        ratio = t.median / base.median if base.median else math.nan
        print(f"{kind:<9} {t.query:<36} {t.median:>10.2f} {t.p95:>9.2f} {ratio:>8.0f}  {verdict}")
    if kind == "sqlite":  # in this process: its CPU time is the work, whatever the load
        print(f"  CPU time of this process a call (median; load average {os.getloadavg()[0]:.1f}): "
              + ", ".join(f"{w} {ms:.1f} ms" for w, ms in cpu.items()))  # fmt: skip
    print("  7d, each query alone (step times: the sample of 1 in 13 it reads at 130,000):")
    for t in parts:
        print(f"    {t.query:<38} median {t.median:8.2f} ms  p95 {t.p95:8.2f} ms")
    for window, answer in sizes.items():
        started = sum(b["started"] for b in answer["buckets"])
        attempts = sum(s["attempts"] for s in answer["steps"])
        print(f"  {window}: {started:,} runs started, {attempts:,} step attempts counted")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="timeline,stats")
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--loads", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--runs", type=int, default=Shape.runs)
    parser.add_argument("--entries", type=int, default=Shape.entries)
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("STALWART_TEST_POSTGRES_URL") or DEFAULT_POSTGRES_URL,
    )
    args = parser.parse_args()
    parts = args.parts.split(",")
    if "timeline" in parts:
        timeline(args.loads)
    if "stats" not in parts:
        return 0
    shape = Shape(runs=args.runs, entries=args.entries)
    made: list[Rows] = []

    def make(codec: Any) -> Rows:
        if not made:
            made.append(Rows(shape, codec, time.time()))
            made[0].seeded = made[0].generate()
        return made[0]

    stores = args.stores.split(",")
    if "sqlite" in stores:
        url, _ = seed_sqlite(shape, make, reseed=False)
        stats("sqlite", url, args.calls)
    if "postgres" in stores:
        try:
            import psycopg

            psycopg.connect(args.postgres_url, connect_timeout=3).close()
        except Exception as exc:
            print(f"note: PostgreSQL at {args.postgres_url} is not usable ({exc}): skipped")
            return 0
        url, schema, _ = seed_postgres(args.postgres_url, make)
        try:
            stats("postgres", url, args.calls)
        finally:
            with contextlib.suppress(Exception):
                drop_schema(args.postgres_url, schema)
    return 0


if __name__ == "__main__":
    sys.exit(main())
