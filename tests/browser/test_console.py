"""The operator console in a real headless Chromium, against a real ``stalwart ui``, real
workers and a real SQLite store: a person finds a waiting run and approves it, retries the
dead-letter queue, resolves an in-doubt irreversible step, sees an unsafe fork refused with its
reason, and a model's hostile output stays text. Every element is found by its role and
accessible name, as a screen reader (or an operator's own script) would find it.

With STALWART_SCREENSHOTS=1 the tests also save the main pages to docs/img/console/.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from console_agent import HOSTILE
from console_harness import TOKEN, Fleet, require_chromium, screenshot

import stalwart

require_chromium()

from playwright.sync_api import expect  # noqa: E402  (after the skip: it may be missing)

pytestmark = pytest.mark.timeout(120)

LIVE_S = 15_000  # ms: a live update arrives within a couple of polls, far inside this
RUN_JS = Path(stalwart.__file__).parent / "_ui" / "console" / "views" / "run.js"
PAGE = int(re.search(r"export const PAGE = (\d+);", RUN_JS.read_text())[1])  # type: ignore[index]

# Records every message shown in the page, however briefly, in <html data-said>: read with
# expect (page.wait_for_function would evaluate a string, which the console's CSP forbids).
RECORD_STATUS = """() => {
  const said = [];
  const note = () => {
    for (const el of document.querySelectorAll("main [role=status]")) {
      if (!el.hidden && el.textContent) said.push(el.textContent);
    }
    document.documentElement.dataset.said = said.join("\\n");
  };
  new MutationObserver(note).observe(document.getElementById("main"), {
    subtree: true, childList: true, characterData: true, attributes: true,
  });
}"""


def sign_in(page: Any, token: str = TOKEN, name: str = "Grace Hopper") -> None:
    """Answer the console's token prompt."""
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    page.get_by_label("Token").fill(token)
    page.get_by_label("Your name").fill(name)
    dialog.get_by_role("button", name="Save").click()


def test_find_a_waiting_run_approve_it_with_a_reason_and_watch_it_complete(
    page: Any, fleet: Fleet
) -> None:
    expect(page.get_by_role("heading", name="Runs")).to_be_visible()
    expect(page.get_by_role("link", name="refund-A-1001")).to_be_visible()
    screenshot(page, "runs")
    suspended = page.get_by_role("navigation", name="Status").get_by_role("link", name="suspended")
    expect(suspended).to_contain_text("3")  # the refund and the two triage runs
    suspended.click()
    expect(page).to_have_url(re.compile(r"#/runs\?status=suspended$"))
    row = page.get_by_role("row").filter(has_text="refund-A-1001")
    expect(row).to_contain_text("approval Refund 129.00 USD on order A-1001")
    row.get_by_role("link", name="refund-A-1001").click()

    expect(page.get_by_test_id("run-status")).to_have_text("suspended")
    page.evaluate("window.__sameDocument = true")
    approval = page.get_by_role("region", name="Approval")
    expect(approval).to_contain_text("Ada Lovelace")
    approval.get_by_label("Reason").fill("regular customer, parcel lost in transit")
    approval.get_by_role("button", name="Approve").click()
    sign_in(page, token="not-the-token")  # refused: the console asks again, then acts
    expect(page.get_by_role("dialog")).to_contain_text("refused that token")
    sign_in(page)

    expect(page.get_by_test_id("run-status")).to_have_text("completed", timeout=LIVE_S)
    assert page.evaluate("window.__sameDocument") is True  # a live update, not a reload
    # The approval's form went with the request; what was done is still said, naming the run.
    control = page.get_by_role("region", name="Run", exact=True)
    expect(control.get_by_role("status")).to_have_text(
        "Approved “Refund 129.00 USD on order A-1001” for run refund-A-1001."
    )
    result = page.get_by_role("region", name="Result")
    expect(result).to_contain_text('"refund": "rf_A-1001"')
    timeline = page.get_by_role("list").filter(has_text="issue_refund")
    expect(timeline).to_contain_text("approval")

    [decided] = [a for a in fleet.app.approvals(pending=False) if a.workflow_id == "refund-A-1001"]
    assert decided.decision is not None and decided.decision.approved
    assert decided.decision.by == "Grace Hopper"
    assert decided.decision.reason == "regular customer, parcel lost in transit"


def test_retry_the_dead_letter_queue_from_the_failed_list(page: Any, fleet: Fleet) -> None:
    page.get_by_role("link", name=re.compile("^Failed")).click()
    expect(page.get_by_role("heading", name="Failed runs")).to_be_visible()
    expect(page.get_by_role("row").filter(has_text="crm.internal:443 refused")).to_have_count(2)
    screenshot(page, "failed")

    # Retried from its page while the CRM is still down, lead-ada fails again: "Retried" was
    # said, and went once the run moved on (it is not left standing beside a failed run).
    page.get_by_role("link", name="lead-ada").click()
    expect(page.get_by_test_id("run-status")).to_have_text("failed")
    page.evaluate(RECORD_STATUS)
    control = page.get_by_role("region", name="Run", exact=True)
    control.get_by_role("button", name="Retry").click()
    sign_in(page)
    expect(page.locator("html")).to_have_attribute("data-said", re.compile("^Retried", re.M))
    expect(control.get_by_role("status")).to_have_count(0, timeout=LIVE_S)
    expect(page.get_by_test_id("run-status")).to_have_text("failed")
    finished = [
        e for e in fleet.app.journal("lead-ada") if e.kind == "run" and e.name == "finished"
    ]
    assert len(finished) == 2  # it really ran again

    (fleet.workdir / "crm-up").touch()  # the cause is fixed
    page.get_by_role("link", name=re.compile("^Failed")).click()
    page.get_by_label("Select lead-ada").check()
    page.get_by_label("Select lead-bob").check()
    retry = page.get_by_role("button", name="Retry selected")
    expect(retry).to_have_text("Retry selected (2)")
    retry.click()  # signed in already (the tab keeps the token)
    expect(page.get_by_role("status").filter(has_text="Retried 2 runs")).to_be_visible()
    expect(page.get_by_text("The dead-letter queue is empty")).to_be_visible(timeout=LIVE_S)

    for wid in ("lead-ada", "lead-bob"):
        assert fleet.app.handle(wid).result(timeout=30)["company"] == "Analytical Engines Ltd"
        assert any(e.kind == "operator" and e.by == "Grace Hopper" for e in fleet.app.journal(wid))


def test_resolve_an_in_doubt_irreversible_step(page: Any, fleet: Fleet) -> None:
    # The run's page says what it needs, and counts the interrupted attempt of charge.
    page.goto(f"{fleet.console_url}#/run/order-in-doubt")
    expect(page.get_by_test_id("waiting-for")).to_have_text(
        "an operator to resolve the in-doubt step #2 charge"
    )
    expect(page.get_by_test_id("usage")).to_have_text("2 step attempts (1 interrupted)")
    expect(page.get_by_role("region", name="Error")).to_contain_text(
        "nobody knows whether its effect happened"
    )

    page.get_by_role("link", name=re.compile("^Needs attention")).click()
    card = page.get_by_role("article", name="order-in-doubt")
    expect(card).to_contain_text("nobody knows whether its effect happened")
    expect(card).to_contain_text("order-in-doubt/1")  # the idempotency key to look it up with
    screenshot(page, "attention")

    card.get_by_label("Result (JSON)").fill("ch_manual_7")  # not JSON: refused before asking
    card.get_by_role("button", name="Resolve").click()
    expect(card.get_by_role("alert")).to_contain_text("must be JSON")
    card.get_by_label("Result (JSON)").fill('"ch_manual_7"')
    card.get_by_role("button", name="Resolve").click()
    sign_in(page)
    expect(card).to_have_count(0, timeout=LIVE_S)  # it left needs_attention
    expect(page.get_by_text("Nothing needs attention.")).to_be_visible()
    done = page.get_by_role("main").get_by_role("status")  # what was done outlives the card
    expect(done).to_have_text(
        'Resolved step #2 charge with result "ch_manual_7" in run order-in-doubt.'
    )
    expect(done.get_by_role("link", name="order-in-doubt")).to_be_visible()

    result = fleet.app.handle("order-in-doubt").result(timeout=30)
    assert result == {"charge": "ch_manual_7", "receipt": "receipt for ch_manual_7"}


def test_an_unsafe_fork_is_refused_with_its_reason(page: Any, fleet: Fleet) -> None:
    page.goto(f"{fleet.console_url}#/run/order-paid")
    expect(page.get_by_test_id("run-status")).to_have_text("completed")
    fork = page.get_by_role("region", name="Fork")
    fork.get_by_label("From step").select_option(label="#1 quote (step)")
    fork.get_by_role("button", name="Fork").click()
    sign_in(page)
    refusal = fork.get_by_role("alert")
    expect(refusal).to_contain_text("UnsafeFork")
    expect(refusal).to_contain_text("charge")  # the irreversible step that would run again
    allow = "Allow re-execution of irreversible steps"  # the way out, in the console's words
    expect(refusal).to_contain_text(f"In the console: tick “{allow}” and click Fork again.")
    page.locator("details.entry.k-step.st-completed").filter(has_text="charge").locator(
        "summary"
    ).click()
    screenshot(page, "run")

    fork.get_by_label("New run id").fill("order-paid-again")
    fork.get_by_label(allow).check()
    fork.get_by_role("button", name="Fork").click()
    expect(page).to_have_url(re.compile(r"#/run/order-paid-again$"))
    expect(page.get_by_role("status").filter(has_text="Forked from order-paid")).to_be_visible()
    expect(page.get_by_test_id("run-status")).to_have_text("completed", timeout=LIVE_S)
    assert fleet.app.handle("order-paid-again").result(timeout=30)["charge"] == "ch_A-2002"


def test_a_hostile_step_output_is_shown_as_text(page: Any, fleet: Fleet) -> None:
    page.goto(f"{fleet.console_url}#/run/summary-17")
    expect(page.get_by_test_id("run-status")).to_have_text("completed")
    entry = page.locator("details.entry").filter(has_text="call_llm")
    entry.locator("summary").click()
    output = entry.locator("pre.output")
    expect(output).to_have_text(HOSTILE)
    expect(entry).to_contain_text("812 in / 164 out tokens")
    expect(entry).to_contain_text("summary-17/0")  # its idempotency key
    assert page.locator("main img, main script").count() == 0
    assert page.evaluate("window.__pwned") is None

    # An id with markup and URL characters is a link, a heading and a path like any other.
    odd = fleet.start("summarize", "ticket 21", workflow_id="mail/<b>21</b>?#%")
    page.goto(f"{fleet.console_url}#/runs?name=summarize")
    page.get_by_role("link", name=odd).click()
    expect(page.get_by_role("heading", name=odd)).to_be_visible()
    expect(page.get_by_test_id("run-status")).to_have_text("completed", timeout=LIVE_S)
    assert page.locator("main b").count() == 0


def test_the_run_page_shows_the_stream_live(page: Any, fleet: Fleet) -> None:
    words = ["Hello, ", "<b>durable</b> ", "world", "."]
    fleet.start("writer", words, workflow_id="writer-1")
    page.goto(f"{fleet.console_url}#/run/writer-1")
    text = page.get_by_test_id("stream-text")
    expect(text).to_have_text("Hello, <b>durable</b> ", timeout=LIVE_S)  # while it runs
    expect(page.get_by_test_id("run-status")).to_have_text("running")
    (fleet.workdir / "go-writer-1").touch()
    expect(text).to_have_text("Hello, <b>durable</b> world.", timeout=LIVE_S)
    expect(page.get_by_test_id("stream-state")).to_have_text("ended", timeout=LIVE_S)
    expect(page.get_by_test_id("run-status")).to_have_text("completed", timeout=LIVE_S)
    assert page.locator("main b").count() == 0  # markup a model wrote shows as text


def test_a_parent_links_its_children_and_a_child_its_parent(page: Any, fleet: Fleet) -> None:
    fleet.start("digest", ["ticket 1", "ticket 2"], workflow_id="digest-1")
    page.goto(f"{fleet.console_url}#/run/digest-1")
    expect(page.get_by_test_id("run-status")).to_have_text("completed", timeout=LIVE_S)
    children = page.get_by_test_id("children")
    expect(children.get_by_role("link")).to_have_text(["digest-1/0", "digest-1/1"])
    children.get_by_role("link", name="digest-1/1").click()
    expect(page.get_by_role("heading", name="digest-1/1")).to_be_visible()
    page.get_by_test_id("parent").get_by_role("link", name="digest-1").click()
    expect(page.get_by_role("heading", name="digest-1")).to_be_visible()


def test_an_unknown_run_says_so_and_offers_no_action_until_it_exists(
    page: Any, fleet: Fleet
) -> None:
    page.goto(f"{fleet.console_url}#/run/not-yet-a-run")
    missing = page.get_by_role("status", name="Run not found")
    expect(missing).to_contain_text("No such run")
    expect(missing).to_contain_text("no run with id not-yet-a-run")
    expect(page).to_have_title("not-yet-a-run (not found) · stalwart")
    for name in ("Retry", "Cancel", "Resolve", "Send event", "Fork", "Approve", "Reject"):
        expect(page.get_by_role("button", name=name)).to_have_count(0)
    expect(page.get_by_role("complementary", name="Actions")).to_be_hidden()
    expect(page.get_by_role("heading", name="Timeline")).to_be_hidden()
    back = missing.get_by_role("link", name="Back to all runs")
    expect(back).to_have_attribute("href", "#/runs")
    page.reload()  # the same on a fresh load
    expect(missing).to_be_visible()
    expect(page.get_by_role("button", name="Fork")).to_have_count(0)

    fleet.start("summarize", "ticket 20", workflow_id="not-yet-a-run")  # now it exists
    expect(page.get_by_test_id("run-status")).to_have_text("completed", timeout=LIVE_S)
    expect(missing).to_be_hidden()
    expect(page.get_by_role("complementary", name="Actions")).to_be_visible()
    expect(page.get_by_role("button", name="Fork")).to_be_visible()


def test_runs_filter_page_and_refresh_live_in_the_browsers_zone(page: Any, fleet: Fleet) -> None:
    page.goto(f"{fleet.console_url}#/runs?name=triage&limit=1")
    rows = page.locator("table.runs tbody tr")
    expect(rows).to_have_count(1)
    expect(page.get_by_label("Workflow")).to_have_value("triage")
    expect(rows).to_contain_text("triage-19")  # newest first
    page.get_by_role("link", name="Older →").click()
    expect(rows).to_contain_text("triage-18")
    expect(page).to_have_url(re.compile(r"before="))
    page.get_by_role("link", name="← Newest").click()
    expect(rows).to_contain_text("triage-19")

    # Times are the browser's (Tokyo, here), and the zone is named.
    created = fleet.app.describe("triage-19").info.created_at
    local = created.astimezone(ZoneInfo("Asia/Tokyo"))
    expect(page.get_by_role("columnheader", name="Created (Asia/Tokyo)")).to_be_visible()
    expect(rows.first).to_contain_text(local.strftime("%H:%M:%S"))

    # A new run appears without a reload, and the filters survive the refresh.
    page.get_by_label("Workflow").fill("summarize")
    expect(page).to_have_url(re.compile(r"name=summarize"))
    fleet.start("summarize", "ticket 20", workflow_id="summary-20")
    expect(page.get_by_role("link", name="summary-20")).to_be_visible(timeout=LIVE_S)
    expect(page.get_by_label("Workflow")).to_have_value("summarize")

    page.get_by_label("Run id").fill("no-such-run")
    page.get_by_role("button", name="Open").click()
    expect(page.get_by_role("alert")).to_contain_text("no-such-run")


def test_send_an_event_and_cancel(page: Any, fleet: Fleet) -> None:
    page.goto(f"{fleet.console_url}#/run/triage-18")
    expect(page.get_by_test_id("waiting-for")).to_have_text("event customer_reply")
    events = page.get_by_role("region", name="Send event")
    expect(events.get_by_label("Event name")).to_have_value("customer_reply")
    events.get_by_label("Payload (JSON)").fill('{"text": "thanks, it arrived"}')
    events.get_by_role("button", name="Send event").click()
    sign_in(page)
    expect(page.get_by_test_id("run-status")).to_have_text("completed", timeout=LIVE_S)
    assert fleet.app.handle("triage-18").result(timeout=30) == {"text": "thanks, it arrived"}

    page.goto(f"{fleet.console_url}#/run/triage-19")
    control = page.get_by_role("region", name="Run", exact=True)
    control.get_by_role("button", name="Cancel").click()  # asks first, in the page
    asking = control.get_by_role("group", name="Confirm cancel")
    expect(asking).to_contain_text("Cancel run triage-19?")
    asking.get_by_role("button", name="Keep the run").click()
    expect(asking).to_be_hidden()
    assert fleet.status("triage-19") == "suspended"
    control.get_by_role("button", name="Cancel").click()
    asking.get_by_role("button", name="Cancel").click()
    expect(page.get_by_test_id("run-status")).to_have_text("cancelled", timeout=LIVE_S)
    expect(control.get_by_role("button", name="Cancel")).to_have_count(0)


def test_the_fleet_queues_workers_and_breakers(page: Any, fleet: Fleet) -> None:
    page.get_by_role("link", name="Queues & workers").click()
    queues = page.get_by_role("table", name="Queues")
    expect(queues.get_by_role("row").filter(has_text="llm")).to_contain_text("30 per 60 s")
    expect(queues.get_by_role("row").filter(has_text="payments")).to_contain_text("/ 2")
    workers = page.get_by_role("table", name="Workers")
    expect(workers.get_by_role("row").filter(has_text="default, llm")).to_have_count(1)
    breakers = page.get_by_role("table", name="Breakers")
    expect(breakers.get_by_role("row").filter(has_text="crm")).to_contain_text("closed")
    screenshot(page, "fleet")


def test_reject_from_the_approvals_inbox_and_see_the_decisions(page: Any, fleet: Fleet) -> None:
    fleet.start("refund_agent", "A-5005", 42.5, workflow_id="refund-A-5005")
    fleet.start("refund_agent", "A-6006", 18.0, workflow_id="refund-A-6006")
    fleet.wait_status("refund-A-5005", "suspended")
    fleet.wait_status("refund-A-6006", "suspended")
    inbox = page.get_by_role("link", name=re.compile("^Approvals"))
    # the navigation counts the pending requests (GET /approvals/count, not the whole list)
    pending = str(len(fleet.app.approvals()))
    expect(inbox.locator("[data-count]")).to_have_text(pending, timeout=LIVE_S)
    inbox.click()
    page.get_by_role("link", name="Show decided").click()
    card = page.get_by_role("article", name="Approval for refund-A-5005")
    expect(card).to_contain_text("Refund 42.50 USD on order A-5005")
    decided = page.get_by_role("region", name="Decided")
    expect(decided.get_by_role("row").filter(has_text="refund-A-1001")).to_contain_text(
        "Grace Hopper"
    )
    screenshot(page, "approvals")

    card.get_by_label("Reason").fill("duplicate of A-1001")
    card.get_by_role("button", name="Reject").click()
    sign_in(page, name="Ada")
    said = page.get_by_role("status").filter(has_text="Rejected")
    expect(said).to_have_text("Rejected “Refund 42.50 USD on order A-5005” for run refund-A-5005.")
    expect(said.get_by_role("link", name="refund-A-5005")).to_have_attribute(
        "href", "#/run/refund-A-5005"
    )
    expect(card).to_have_count(0, timeout=LIVE_S)
    rejected = decided.get_by_role("row").filter(has_text="refund-A-5005")
    expect(rejected).to_contain_text("rejected")
    expect(rejected).to_contain_text("duplicate of A-1001")
    assert fleet.app.handle("refund-A-5005").result(timeout=30) == {
        "refunded": False,
        "reason": "duplicate of A-1001",
    }


def test_a_running_step_shows_its_attempt_heartbeat_and_holder(page: Any, fleet: Fleet) -> None:
    page.goto(f"{fleet.console_url}#/run/research-1")
    current = page.get_by_role("region", name="Current step")
    expect(current).to_contain_text("#1 browse")
    expect(current).to_contain_text('"page"')  # its last heartbeat
    screenshot(page, "running")


def test_a_live_run_page_appends_new_entries_and_ends_as_a_fresh_load_shows_it(
    page: Any, fleet: Fleet
) -> None:
    wid = fleet.start("checklist", 3, workflow_id="checklist-1")
    fleet.wait_status(wid, "suspended")
    reads: list[str] = []  # the journal reads the page made, in order
    answers: list[dict[str, Any]] = []  # the answers to the ones with after=

    def on_response(response: Any) -> None:
        if "/journal" in response.url and response.ok:
            reads.append(response.url)
            if "after=" in response.url:
                answers.append(response.json())

    page.on("response", on_response)
    page.goto(f"{fleet.console_url}#/run/{wid}")
    expect(page.get_by_test_id("run-status")).to_have_text("suspended")
    page.evaluate("window.__sameDocument = true")
    entries = page.locator("details.entry")
    for item in (1, HOSTILE, 3):  # a model's markup in an appended entry stays text
        shown = entries.count()
        fleet.app.send_event(wid, "next", item)
        said = f"item {item}"[:30]
        expect(entries.filter(has_text=said)).to_have_count(1, timeout=LIVE_S)
        assert entries.count() > shown
    expect(page.get_by_test_id("run-status")).to_have_text("completed", timeout=LIVE_S)
    whole = len(fleet.app.journal(wid))
    expect(page.get_by_text(f"{whole} entries", exact=True)).to_be_visible(timeout=LIVE_S)
    assert page.evaluate("window.__sameDocument") is True  # live updates, never a reload
    assert page.locator("main img, main script").count() == 0
    assert page.evaluate("window.__pwned") is None
    # The polls asked only for what was new: their answers held no more than the new entries.
    grew = [a for a in answers if a["entries"]]
    assert grew and all(len(a["entries"]) < a["total"] for a in answers), answers
    live = entries.all_text_contents()

    fresh = page.context.new_page()
    try:
        fresh.goto(f"{fleet.console_url}#/run/{wid}")
        expect(fresh.get_by_text(f"{whole} entries", exact=True)).to_be_visible()
        assert fresh.locator("details.entry").all_text_contents() == live
    finally:
        fresh.close()

    # When an answer's total says an entry it lacks was committed below the last id (a late
    # commit on PostgreSQL), the page reads the whole journal again, and shows no entry twice.
    def late(route: Any) -> None:
        response = route.fetch()
        body = response.json()
        route.fulfill(response=response, json={**body, "total": body["total"] + 1})

    page.route(re.compile(r"/journal\?after="), late)
    start = len(reads)
    deadline = time.monotonic() + LIVE_S / 1000
    while sum("after=" in url for url in reads[start:]) < 3 and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    page.unroute(re.compile(r"/journal\?after="))
    since = reads[start:]
    incremental = [url for url in since if "after=" in url]
    assert len(incremental) >= 3, since
    assert len(since) - len(incremental) >= len(incremental) - 1, since  # each: all again
    expect(page.get_by_text(f"{whole} entries", exact=True)).to_be_visible()
    assert entries.all_text_contents() == live


def test_a_long_journal_is_read_a_page_at_a_time_and_the_rest_on_scroll(
    page: Any, fleet: Fleet
) -> None:
    wid = fleet.start("long_chat", 150, workflow_id="long-chat-1")
    fleet.wait_status(wid, "completed")
    whole = len(fleet.app.journal(wid))
    assert PAGE < whole < 2 * PAGE  # two pages
    reads: list[str] = []
    page.on("request", lambda request: "/journal" in request.url and reads.append(request.url))
    page.goto(f"{fleet.console_url}#/run/{wid}")
    expect(page.get_by_test_id("run-status")).to_have_text("completed")
    entries = page.locator("details.entry")
    expect(page.get_by_text(f"{PAGE} of {whole} entries", exact=True)).to_be_visible()
    expect(entries).to_have_count(PAGE)
    result = page.get_by_role("region", name="Result")
    expect(result).to_contain_text("once the timeline is read to its end")
    assert reads and all(f"limit={PAGE}" in url for url in reads), reads
    first = entries.all_text_contents()

    # Scrolled to the end of the timeline, the page reads the next page (after the last id).
    page.get_by_role("button", name="Load more entries").scroll_into_view_if_needed()
    expect(page.get_by_text(f"{whole} entries", exact=True)).to_be_visible(timeout=LIVE_S)
    expect(entries).to_have_count(whole)
    expect(page.get_by_role("button", name="Load more entries")).to_be_hidden()
    expect(result).to_contain_text("150")
    more = [url for url in reads if "after=" in url]
    assert more and all(f"limit={PAGE}" in url for url in more), reads
    shown = entries.all_text_contents()
    assert shown[:PAGE] == first and len(set(shown)) == whole  # in order, none twice
