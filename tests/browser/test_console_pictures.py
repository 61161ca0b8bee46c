"""The console's pictures in a real headless Chromium, against a real ``stalwart ui`` and real
workers: the overview's five charts found by their accessible names, each table twin holding
the numbers ``GET /api/v1/stats`` answers; a run's timeline with a titled bar per attempt, a
recovery marked where a worker was killed, a click on a bar scrolling the journal to its entry,
and a live run's timeline growing as the run goes on.

With STALWART_SCREENSHOTS=1 the tests save each picture to docs/img/console/ (docs/console.md
shows them).
"""

from __future__ import annotations

import os
import time
from typing import Any

import httpx
import pytest
from console_harness import SHOTS, Fleet, require_chromium, screenshot

require_chromium()

from playwright.sync_api import expect  # noqa: E402  (after the skip: it may be missing)

pytestmark = pytest.mark.timeout(120)

LIVE_S = 15_000  # ms: a live update arrives within a couple of polls, far inside this
CHARTS = ("Runs over time", "Step latency", "Failures by step", "Cost by workflow", "Queue depth")
ENDED = ("completed", "failed", "cancelled")


def shot(locator: Any, name: str) -> None:
    """With STALWART_SCREENSHOTS=1, save the element as docs/img/console/NAME.png."""
    if os.environ.get("STALWART_SCREENSHOTS") != "1":
        return
    SHOTS.mkdir(parents=True, exist_ok=True)
    locator.page.wait_for_timeout(300)  # let the last refresh paint
    locator.screenshot(path=str(SHOTS / f"{name}.png"))


def _cell(text: str) -> str | float:
    """A cell as the number it shows, if it is one ("—": no value)."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return text


def _rows(table: Any) -> list[list[str | float]]:
    return [
        [_cell(cell) for cell in row]
        for row in table.locator("tbody tr").evaluate_all(
            "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
        )
    ]


def _expected(stats: dict[str, Any]) -> dict[str, list[list[str | float]]]:
    """What each table twin must hold for ``stats`` (times aside: shown in the page's zone)."""
    ms = lambda v: "—" if v is None else float(v)  # noqa: E731
    return {
        "Runs over time": [
            [b["started"], *(b["finished"][k] for k in ENDED)] for b in stats["buckets"]
        ],
        "Step latency": [
            [s["name"], s["attempts"], ms(s["p50_ms"]), ms(s["p95_ms"])] for s in stats["steps"]
        ],
        "Failures by step": [[s["name"], s["failures"], s["attempts"]] for s in stats["steps"]],
        "Cost by workflow": [
            [w["name"], w["runs"], w["input_tokens"], w["output_tokens"], w["cost"]]
            for w in stats["workflows"]
        ],
        "Queue depth": [[q["name"], q["pending"], q["running"]] for q in stats["queues"]],
    }


def _shown(page: Any) -> dict[str, list[list[str | float]]]:
    shown = {}
    for name in CHARTS:
        rows = _rows(page.get_by_role("table", name=f"{name} table"))
        if name == "Runs over time":
            rows = [r[1:] for r in rows]  # the interval's start, in local time
        shown[name] = rows
    return shown


def test_the_overview_draws_five_charts_whose_tables_hold_the_apis_numbers(
    page: Any, fleet: Fleet
) -> None:
    page.get_by_role("navigation", name="Pages").get_by_role("link", name="Overview").click()
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    for name in CHARTS:
        expect(page.get_by_role("img", name=name)).to_be_visible()
    expect(page.get_by_role("button", name="24h")).to_have_attribute("aria-pressed", "true")
    expect(page.get_by_role("img", name="Runs over time").locator("rect.bar")).not_to_have_count(0)
    expect(page.get_by_role("img", name="Cost by workflow")).to_contain_text("summarize")
    screenshot(page, "overview")
    for name in CHARTS:
        figure = page.get_by_role("figure", name=name)
        shot(figure, f"chart-{name.lower().replace(' ', '-')}")
        figure.get_by_role("button", name="Show as table").click()
        expect(page.get_by_role("table", name=f"{name} table")).to_be_visible()

    for window in ("24h", "1h", "7d"):
        page.get_by_role("button", name=window, exact=True).click()
        expect(page.locator("section.overview")).to_have_attribute("data-window", window)
        # The runs go on meanwhile (and an interval may begin): compare what the page shows
        # with an answer read after it, choosing the window again (a fresh read) until they
        # are equal.
        deadline = time.monotonic() + LIVE_S / 1000
        while True:
            stats = httpx.get(f"{fleet.console_url}api/v1/stats", params={"window": window}).json()
            shown, expected = _shown(page), _expected(stats)
            if shown == expected or time.monotonic() > deadline:
                break
            page.get_by_role("button", name=window, exact=True).click()
            page.wait_for_timeout(500)
        assert shown == expected
        assert len(shown["Runs over time"]) == {"1h": 12, "24h": 24, "7d": 28}[window]
    assert {w["name"] for w in stats["workflows"]} >= {"summarize", "enrich_lead"}
    assert any(s["failures"] for s in stats["steps"])  # fetch_profile failed while the CRM was down
    expect(page).to_have_url(f"{fleet.console_url}#/overview?window=7d")


def test_a_run_timeline_titles_each_attempt_and_marks_the_recovery(page: Any, fleet: Fleet) -> None:
    page.goto(f"{fleet.console_url}#/run/order-in-doubt")
    chart = page.get_by_role("img", name="Run timeline")
    expect(chart).to_be_visible()
    expect(chart.locator("rect.bar")).not_to_have_count(0)
    titles = chart.locator("rect.bar > title").all_text_contents()
    assert any(t.startswith("#1 quote, attempt 1, ") and t.endswith(": completed") for t in titles)
    expect(chart.locator("g.mark > title")).to_contain_text(["recovered (from "])
    expect(chart.locator("g.gap > title")).to_contain_text(["waiting for an operator"])
    figure = page.get_by_role("figure", name="Run timeline")
    shot(figure, "run-timeline-recovery")
    figure.get_by_role("button", name="Show as table").click()
    table = page.get_by_role("table", name="Run timeline table")
    expect(table).to_contain_text("#1 quote, attempt 1")
    expect(table).to_contain_text("recovery")


def test_clicking_a_bar_scrolls_the_journal_to_its_entry(page: Any, fleet: Fleet) -> None:
    wid = fleet.start("long_chat", 60, workflow_id="chat-60")
    fleet.wait_status(wid, "completed")
    page.goto(f"{fleet.console_url}#/run/{wid}")
    chart = page.get_by_role("img", name="Run timeline")
    last = chart.locator("rect.bar").last
    expect(last.locator("title")).to_contain_text("#60 reply, attempt 1")
    entry = page.locator(f"details.entry[data-index='{last.get_attribute('data-index')}']")
    expect(entry).not_to_be_in_viewport()
    last.click()
    expect(entry).to_be_in_viewport()
    expect(entry).to_have_attribute("open", "")
    expect(entry).to_contain_text("#60")
    expect(entry.locator("summary")).to_be_focused()


def test_a_live_runs_timeline_grows_as_the_run_goes_on(page: Any, fleet: Fleet) -> None:
    wid = fleet.start("checklist", 2, workflow_id="checklist-pictures")
    fleet.wait_status(wid, "suspended")
    page.goto(f"{fleet.console_url}#/run/{wid}")
    chart = page.get_by_role("img", name="Run timeline")
    expect(chart.locator("g.gap > title")).to_contain_text(["waiting for event next"])
    expect(chart.locator("rect.o-waiting")).to_have_count(1)
    bars = chart.locator("rect.bar")
    before = bars.count()
    fleet.app.send_event(wid, "next", "first")
    expect(chart.locator("rect.bar > title").filter(has_text="tick_off")).to_have_count(
        1, timeout=LIVE_S
    )
    assert bars.count() > before
    fleet.app.send_event(wid, "next", "second")
    expect(page.get_by_test_id("run-status")).to_have_text("completed", timeout=LIVE_S)
    expect(chart.locator("rect.bar > title").filter(has_text="tick_off")).to_have_count(2)
    expect(chart.locator("rect.o-waiting")).to_have_count(0)
    shot(page.get_by_role("figure", name="Run timeline"), "run-timeline")


LAYOUT = """async ([entries, run]) => {
  const { barTitle, layout } = await import("/console/views/runchart.js");
  const drawn = layout(entries, run, null, Date.parse("2026-01-01T00:10:00Z") / 1000);
  const t = (s) => (s === null ? null : Math.round(s - drawn.t0));
  return {
    titles: drawn.bars.map(barTitle),
    bars: drawn.bars.map((b) => [b.lane, b.outcome, t(b.from), t(b.to), b.unknown]),
    gaps: drawn.gaps.map((g) => [g.lane, g.kind, g.label.split(" ").slice(0, 2).join(" ")]),
    marks: drawn.marks.map((m) => [m.kind, t(m.at)]),
  };
}"""


def _entry(kind: str, name: str, status: str, at: int, took: int | None, **more: Any) -> Any:
    iso = lambda s: None if s is None else f"2026-01-01T00:{s // 60:02d}:{s % 60:02d}Z"  # noqa: E731
    return {
        "kind": kind, "name": name, "status": status, "seq": more.get("seq"),
        "attempt": more.get("attempt"), "started_at": iso(at),
        "finished_at": iso(None if took is None else at + took), "error": more.get("error"),
        "output": more.get("output"), "input": None, "by": more.get("by"),
    }  # fmt: skip


def test_the_timeline_draws_attempts_only_names_a_dead_workers_gap_and_ends_a_cancels_waits(
    page: Any, fleet: Fleet
) -> None:
    page.goto(f"{fleet.console_url}#/overview")
    cut = "AttemptInterrupted: attempt 1 was interrupted after ~0.00s: its process stopped"
    entries = [
        _entry("run", "started", "completed", 0, 0),
        # a worker died in attempt 1 of fetch (journaled at the recovery, no duration)
        _entry("step", "fetch", "failed", 30, 0, seq=1, attempt=1, error=cut),
        _entry("run", "resumed", "completed", 30, 0, output={"recovered_from": "w1"}),
        _entry("step", "fetch", "completed", 35, 2, seq=1, attempt=2),
        # a saga rolls back: its markers are no bars, its compensation is one
        _entry("compensation", "book", "scheduled", 40, None, seq=2, attempt=1),
        _entry("compensation", "book", "completed", 40, 3, seq=2, attempt=1),
        _entry("step", "book", "compensated", 43, 0, seq=3, attempt=1),
        _entry("approval", "ok", "scheduled", 50, None, seq=4),
        _entry("run", "suspended", "completed", 50, 0, output={"waiting_for": "approval:ok"}),
        _entry("run", "finished", "failed", 90, 0, error="WorkflowCancelled: by ops", by="ops"),
    ]
    run = {"status": "cancelled", "created_at": "2026-01-01T00:00:00Z"}
    run["updated_at"] = "2026-01-01T00:05:00Z"  # the row changed again later
    drawn = page.evaluate(LAYOUT, [entries, run])
    assert drawn["bars"] == [
        ["fetch", "failed", 30, 30, True],  # no 0 s bar claims to know how long it ran
        ["fetch", "completed", 35, 37, False],
        ["undo book", "completed", 40, 43, False],
        ["approval ok", "cancelled", 50, 90, None],  # ends with the run, not the axis
    ]
    assert ["fetch", "down", "worker down,"] in drawn["gaps"]
    assert not any(kind == "backoff" for _, kind, _ in drawn["gaps"])
    assert ["run", "rollback", "rollback (compensations)"] in drawn["gaps"]
    assert drawn["marks"] == [["recovery", 30], ["cancel", 90]]
    assert drawn["titles"] == [
        "#1 fetch, attempt 1, duration unknown (its worker died): failed",
        "#1 fetch, attempt 2, 2.0 s: completed",
        "#2 undo book, attempt 1, 3.0 s: completed",
        "#4 approval ok, 40 s: cancelled",
    ]


def test_the_overview_says_when_its_address_names_no_window_and_keys_its_colours(
    page: Any, fleet: Fleet
) -> None:
    page.goto(f"{fleet.console_url}#/overview?window=2d")
    expect(page.get_by_role("alert")).to_contain_text("window=2d is not a window")
    expect(page).to_have_url(f"{fleet.console_url}#/overview?window=24h")
    expect(page.get_by_role("button", name="24h")).to_have_attribute("aria-pressed", "true")
    legend = page.get_by_role("img", name="Runs over time").locator("g.legend")
    expect(legend).to_contain_text("started")
    for status in ENDED:
        expect(legend).to_contain_text(status)
    assert " 1 runs " not in page.get_by_role("figure", name="Runs over time").inner_text()
