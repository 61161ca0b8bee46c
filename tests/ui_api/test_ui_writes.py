"""Every operator action through the HTTP API of a live ``stalwart ui``, on runs a real worker
executes: each answers the run as ``GET /runs/{id}`` shows it and is journaled with who."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ui_harness import FROZEN, Scene, scene

from store_urls import postgres_schema_url


def _operator(ui: Scene, workflow_id: str, action: str) -> dict[str, Any]:
    entries = ui.reader().get(f"/api/v1/runs/{workflow_id}/journal").json()["entries"]
    return next(e for e in entries if e["kind"] == "operator" and e["name"] == action)


def test_approve_with_a_reason_records_who_and_the_run_completes(ui: Scene) -> None:
    wid = ui.start("ask", "deploy to prod", workflow_id="w-approve")
    ui.until(wid, "suspended")
    answer = ui.writer(by="alice").post(
        f"/api/v1/runs/{wid}/approve", json={"reason": "tests are green"}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["workflow_id"] == wid and "usage" in answer.json()
    ui.until(wid, "completed")
    assert ui.app.handle(wid).result(timeout=10) == "approved"
    decided = ui.reader().get("/api/v1/approvals", params={"all": "true"}).json()["approvals"]
    decision = next(a for a in decided if a["workflow_id"] == wid)["decision"]
    assert decision["approved"] is True and decision["by"] == "alice"
    assert decision["reason"] == "tests are green" and decision["decided_at"].endswith("+00:00")
    assert wid not in [
        a["workflow_id"] for a in ui.reader().get("/api/v1/approvals").json()["approvals"]
    ]
    assert _operator(ui, wid, "approve")["by"] == "alice"


def test_reject_without_a_by_header_is_by_ui(ui: Scene) -> None:
    wid = ui.start("ask", "delete the backups", workflow_id="w-reject")
    ui.until(wid, "suspended")
    answer = ui.writer().post(f"/api/v1/runs/{wid}/reject", json={"reason": "no"})
    assert answer.status_code == 200, answer.text
    ui.until(wid, "completed")
    assert ui.app.handle(wid).result(timeout=10) == "rejected"
    assert _operator(ui, wid, "reject")["by"] == "ui"


def test_events_are_delivered_once_per_dedup_key(ui: Scene) -> None:
    wid = ui.start("inbox", workflow_id="w-event")
    ui.until(wid, "suspended")
    body = {"name": "ping", "payload": {"n": 1}, "dedup_key": "k1"}
    first = ui.writer(by="webhook").post(f"/api/v1/runs/{wid}/events", json=body)
    assert first.status_code == 200, first.text
    assert first.json()["delivered"] is True and first.json()["workflow_id"] == wid
    again = ui.writer().post(f"/api/v1/runs/{wid}/events", json=body)
    assert again.status_code == 200 and again.json()["delivered"] is False
    ui.until(wid, "completed")
    assert ui.app.handle(wid).result(timeout=10) == {"n": 1}
    assert _operator(ui, wid, "send-event")["by"] == "webhook"


def test_cancel_a_waiting_run(ui: Scene) -> None:
    wid = ui.start("inbox", workflow_id="w-cancel")
    ui.until(wid, "suspended")
    answer = ui.writer(by="bob").post(f"/api/v1/runs/{wid}/cancel")
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "cancelled"
    assert _operator(ui, wid, "cancel")["by"] == "bob"


def test_retry_a_dead_lettered_run_after_the_fix(ui: Scene) -> None:
    wid = ui.start("dead", 41, workflow_id="w-dead")
    ui.until(wid, "failed")
    failed = ui.reader().get(f"/api/v1/runs/{wid}").json()
    assert "broken until fixed: 41" in failed["error"]
    (ui.workdir / "fixed").touch()
    answer = ui.writer(by="carol").post(f"/api/v1/runs/{wid}/retry", json={})
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] in ("pending", "running", "completed")
    ui.until(wid, "completed")
    assert ui.app.handle(wid).result(timeout=10) == 42
    assert _operator(ui, wid, "retry")["by"] == "carol"


def test_resolve_an_in_doubt_step_with_its_result(ui: Scene) -> None:
    run = ui.reader().get("/api/v1/runs/doubt").json()
    assert run["status"] == "needs_attention" and "charge" in run["error"]
    answer = ui.writer(by="finance").post(
        "/api/v1/runs/doubt/resolve", json={"seq": 1, "result": "ch_manual"}
    )
    assert answer.status_code == 200, answer.text
    ui.until("doubt", "completed")
    assert ui.app.handle("doubt").result(timeout=10) == "ch_manual"
    assert _operator(ui, "doubt", "resolve")["by"] == "finance"


def test_fork_answers_the_new_run_and_an_unsafe_fork_is_refused(ui: Scene) -> None:
    writer = ui.writer(by="dave")
    unsafe = writer.post("/api/v1/runs/paid/fork", json={"from_seq": 1})
    assert unsafe.status_code == 409
    error = unsafe.json()["error"]
    assert error["type"] == "UnsafeFork" and "irreversible" in error["message"]
    assert "'charge'" in error["message"]
    forked = writer.post("/api/v1/runs/paid/fork", json={"from_seq": 2, "new_id": "paid-fork"})
    assert forked.status_code == 201, forked.text
    assert forked.json()["workflow_id"] == "paid-fork" and forked.json()["name"] == "pay"
    ui.until("paid-fork", "completed")
    assert ui.app.handle("paid-fork").result(timeout=10) == "ch_o2"  # reused, not charged again
    taken = writer.post("/api/v1/runs/paid/fork", json={"from_seq": 2, "new_id": "paid-fork"})
    assert taken.status_code == 409 and taken.json()["error"]["type"] == "WorkflowAlreadyExists"
    reexecute = writer.post("/api/v1/runs/paid/fork", json={"from_seq": 1, "allow_reexecute": True})
    assert reexecute.status_code == 201
    assert _operator(ui, "paid", "fork")["by"] == "dave"


@pytest.fixture(params=["postgres"])  # the param: deselected without a server
def pg_ui(tmp_path: Path) -> Iterator[Scene]:
    for url in postgres_schema_url():
        with scene(url, tmp_path) as served:
            yield served


def test_on_postgres_the_same_reads_and_writes(pg_ui: Scene) -> None:
    page = pg_ui.reader().get("/api/v1/runs", params={"name": "frozen", "limit": 3}).json()
    rest = pg_ui.reader().get(
        "/api/v1/runs", params={"name": "frozen", "before": page["next_before"]}
    )
    ids = [r["workflow_id"] for r in page["runs"] + rest.json()["runs"]]
    assert ids == [f"frozen-{i}" for i in reversed(range(FROZEN))]
    assert page["counts"]["pending"] == FROZEN
    wid = pg_ui.start("ask", "deploy to prod", workflow_id="pg/approve")
    pg_ui.until(wid, "suspended")
    answer = pg_ui.writer(by="alice").post(f"/api/v1/runs/{wid}/approve", json={"reason": "ok"})
    assert answer.status_code == 200, answer.text
    pg_ui.until(wid, "completed")
    assert _operator(pg_ui, wid, "approve")["by"] == "alice"
    resolved = pg_ui.writer().post("/api/v1/runs/doubt/resolve", json={"seq": 1, "rerun": True})
    assert resolved.status_code == 200, resolved.text
    pg_ui.until("doubt", "completed")
    unsafe = pg_ui.writer().post("/api/v1/runs/paid/fork", json={"from_seq": 1})
    assert unsafe.status_code == 409 and unsafe.json()["error"]["type"] == "UnsafeFork"
    odd = pg_ui.reader().get("/api/v1/runs/a%00b/journal")
    assert odd.status_code == 404
