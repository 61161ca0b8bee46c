"""Fixtures of the console's browser tests: one store with runs in every state the console
shows, served by real workers and a real ``stalwart ui``; one headless Chromium; a fresh
browser context (so a fresh session, without a token) per test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from console_harness import Fleet, require_chromium


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """The store, its runs, two workers (one for payments, whose worker is SIGKILLed inside an
    irreversible step and replaced) and the console's server."""
    fleet = Fleet(tmp_path_factory.mktemp("console"))
    try:
        fleet.start("refund_agent", "A-1001", 129.0, workflow_id="refund-A-1001")
        fleet.start("enrich_lead", "ada@example.org", workflow_id="lead-ada")
        fleet.start("enrich_lead", "bob@example.org", workflow_id="lead-bob")
        fleet.start("summarize", "ticket 17", workflow_id="summary-17")
        fleet.start("triage", "ticket 18", workflow_id="triage-18")
        fleet.start("triage", "ticket 19", workflow_id="triage-19")
        fleet.start("charge_card", "A-2002", 300, workflow_id="order-paid")
        fleet.start("research", "durable execution", workflow_id="research-1")
        general = fleet.start_worker("default,llm", "worker-general")
        payments = fleet.start_worker("payments", "worker-payments")
        fleet.start_console()
        fleet.wait_ready(general, payments)
        fleet.wait_status("order-paid", "completed")

        # An irreversible step without verify, its worker killed mid-step: in doubt.
        hang = fleet.workdir / "hang-charge"
        hang.touch()
        fleet.start("charge_card", "A-3003", 450, workflow_id="order-in-doubt")
        fleet.wait_for((fleet.workdir / "charging-order-in-doubt").exists, "charge running")
        fleet.kill(payments)
        hang.unlink()
        fleet.start_worker("payments", "worker-payments-2")
        fleet.wait_status("order-in-doubt", "needs_attention")

        for wid, status in [
            ("lead-ada", "failed"),
            ("lead-bob", "failed"),
            ("refund-A-1001", "suspended"),
            ("summary-17", "completed"),
            ("triage-18", "suspended"),
            ("triage-19", "suspended"),
            ("research-1", "running"),
        ]:
            fleet.wait_status(wid, status)
        yield fleet
    finally:
        fleet.close()


@pytest.fixture(scope="module")
def chromium() -> str:
    """The system's Chromium (the test modules skip at import without it)."""
    return require_chromium()


@pytest.fixture(scope="module")
def browser(chromium: str) -> Iterator[Any]:
    """One headless Chromium (the system's) for the module. An assertion waits up to 15 s,
    as the page's actions wait 10 s: Playwright's 5 s default is short for a shared 2-core
    machine whose other test processes start worker fleets beside it."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=15_000)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser: Any, fleet: Fleet) -> Iterator[Any]:
    """A page in a fresh context (no token yet) in Tokyo's zone; it fails the test on any
    script error or Content-Security-Policy violation."""
    context = browser.new_context(
        viewport={"width": 1360, "height": 860}, timezone_id="Asia/Tokyo", locale="en-GB"
    )
    from playwright.sync_api import expect

    page = context.new_page()
    page.set_default_timeout(10_000)
    problems: list[str] = []

    def on_console(msg: Any) -> None:
        # An error answer (401, 404, 409) is logged by Chromium as "Failed to load resource".
        if msg.type == "error" and not msg.text.startswith("Failed to load resource"):
            problems.append(f"console: {msg.text}")

    page.on("pageerror", lambda exc: problems.append(f"script error: {exc}"))
    page.on("console", on_console)
    page.goto(fleet.console_url)
    # The console's first answer (the footer names the store): the module's first page load
    # comes while the suite's heaviest tests (the soak, the HTTP API's scene) start beside it,
    # and on two loaded cores it has taken over 15 s. Each test's own assertions come after.
    expect(page.get_by_role("contentinfo")).to_contain_text("stalwart", timeout=90_000)
    try:
        yield page
    finally:
        context.close()
    assert not problems, problems
