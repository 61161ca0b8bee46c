"""Usage a crash lost: an attempt killed (SIGKILL) inside a step that records usage leaves no
usage in the journal, so the run's totals are a lower bound: ``Usage.partial`` is true, and
``stalwart show``, its ``--json`` and the HTTP API say so. A kill inside a step that records
no usage loses nothing."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from fault_harness import Harness, cli

import stalwart

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "ui_api"))
from ui_harness import ui_server


def test_a_kill_inside_a_model_call_makes_the_totals_a_lower_bound(agent: Harness) -> None:
    agent.crash("usage", "spent", at=["chat"])
    done = agent.run("usage", "spent")
    assert (done.outcome["status"], done.outcome["result"]) == ("completed", "ANSWER TO QUESTION 7")
    assert [e["attempt"] for e in agent.executions("spent") if e["step"] == "chat"] == [1, 2]

    with agent.app() as app:
        # The killed attempt recorded 120 + 30 tokens before it died: they are not in the journal.
        assert app.usage("spent") == stalwart.Usage(120, 30, 0.0, 3, partial=True)
        assert app.describe("spent").usage.partial

    shown = cli(agent.url, "show", "spent", cwd=agent.workdir)
    assert shown.returncode == 0, shown.stderr
    assert "usage      ≥ 120 tokens in, ≥ 30 out, cost ≥ 0.000000, 3 step attempt(s)" in (
        shown.stdout
    )
    as_json = cli(agent.url, "show", "spent", "--json", cwd=agent.workdir)
    assert json.loads(as_json.stdout)["usage"]["partial"] is True

    with ui_server(agent.url) as server, server.client(server.token) as http:
        run = http.get("/api/v1/runs/spent")
        assert run.status_code == 200, run.text
        assert run.json()["usage"] == {
            "input_tokens": 120,
            "output_tokens": 30,
            "cost": 0.0,
            "attempts": 3,
            "partial": True,
        }


def test_a_kill_inside_a_step_that_records_no_usage_loses_none(agent: Harness) -> None:
    agent.crash("usage", "tooled", at=["lookup"])
    assert agent.run("usage", "tooled").outcome["status"] == "completed"
    with agent.app() as app:
        assert app.usage("tooled") == stalwart.Usage(120, 30, 0.0, 3, partial=False)
    shown = cli(agent.url, "show", "tooled", cwd=agent.workdir)
    assert "usage      120 tokens in, 30 out, cost 0.000000, 3 step attempt(s)" in shown.stdout


def test_the_console_shows_such_totals_as_a_lower_bound(agent: Harness) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true: no chromium on this machine (apt-get install chromium)")
        pytest.skip("no chromium on this machine (apt-get install chromium)")
    from playwright.sync_api import expect, sync_playwright

    agent.crash("usage", "spent", at=["chat"])
    assert agent.run("usage", "spent").outcome["status"] == "completed"
    with ui_server(agent.url) as server, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True)
        try:
            page = browser.new_page(locale="en-GB")
            page.goto(f"{server.base}#/run/spent")
            expect(page.get_by_test_id("usage")).to_have_text(
                "≥ 120 in / ≥ 30 out tokens · 3 step attempts", timeout=10_000
            )
        finally:
            browser.close()
