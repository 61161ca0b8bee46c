"""The read side of the HTTP API against a live ``stalwart ui``: runs with filters, counts
and exact paging, a run, its journal, approvals, queues, workers, breakers."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ui_harness import FROZEN, Scene, ui_server

import stalwart


def test_runs_page_exactly_through_runs_created_at_one_instant(ui: Scene) -> None:
    client = ui.reader()
    seen: list[str] = []
    params: dict[str, str | int] = {"name": "frozen", "limit": 2}
    pages = 0
    while True:
        answer = client.get("/api/v1/runs", params=params)
        assert answer.status_code == 200, answer.text
        page = answer.json()
        pages += 1
        seen += [r["workflow_id"] for r in page["runs"]]
        assert page["counts"]["pending"] == FROZEN
        if not page["more"]:
            assert page["next_before"] is None
            break
        params["before"] = page["next_before"]
    assert seen == [f"frozen-{i}" for i in reversed(range(FROZEN))]
    assert pages == 3


def test_runs_filter_by_status_and_time_and_count_every_status(ui: Scene) -> None:
    client = ui.reader()
    every = client.get("/api/v1/runs", params={"limit": 1000}).json()
    attention = client.get("/api/v1/runs", params={"status": "needs_attention"}).json()
    assert "doubt" in [r["workflow_id"] for r in attention["runs"]]
    assert {r["status"] for r in attention["runs"]} == {"needs_attention"}
    assert set(every["counts"]) == {
        "pending",
        "running",
        "suspended",
        "completed",
        "failed",
        "cancelled",
        "needs_attention",
    }
    assert attention["counts"] == every["counts"]  # counts ignore the status filter
    assert every["counts"]["pending"] >= FROZEN and every["counts"]["completed"] >= 1
    old = client.get("/api/v1/runs", params={"before": "2026-01-01T00:00:01Z"}).json()
    assert {r["workflow_id"] for r in old["runs"]} == {f"frozen-{i}" for i in range(FROZEN)}
    new = client.get("/api/v1/runs", params={"since": "2026-01-01T00:00:01+00:00"}).json()
    assert not {r["workflow_id"] for r in new["runs"]} & {f"frozen-{i}" for i in range(FROZEN)}
    assert new["counts"]["pending"] == every["counts"]["pending"] - FROZEN
    pasted = client.get("/api/v1/runs?since=2026-01-01T00:00:01+00:00").json()  # "+" unencoded
    assert pasted["counts"] == new["counts"]
    created = every["runs"][0]["created_at"]
    assert created.endswith("+00:00")  # ISO 8601, UTC


def test_a_run_and_its_journal_by_an_id_with_a_slash(ui: Scene) -> None:
    wid = ui.start("ask", "ship the release?", workflow_id="parent/1")
    ui.until(wid, "suspended")
    client = ui.reader()
    run = client.get(f"/api/v1/runs/{wid}").json()
    assert run["workflow_id"] == wid and run["name"] == "ask" and run["status"] == "suspended"
    assert run["waiting_for"] == "approval ship the release?"
    assert run["current"] is None and run["usage"]["attempts"] == 0
    listed = client.get("/api/v1/runs", params={"name": "ask", "status": "suspended"}).json()
    assert {"workflow_id": wid, "waiting_for": "approval ship the release?"}.items() <= next(
        r for r in listed["runs"] if r["workflow_id"] == wid
    ).items()
    journal = client.get(f"/api/v1/runs/{wid}/journal").json()
    assert journal["workflow_id"] == wid
    assert [e["kind"] for e in journal["entries"]][-2:] == ["approval", "run"]
    paid = client.get("/api/v1/runs/paid/journal").json()["entries"]
    assert [(e["kind"], e["status"]) for e in paid if e["name"] == "charge"] == [
        ("step", "scheduled"),  # an irreversible step is recorded before it runs
        ("step", "completed"),
    ]
    step = paid[[e["name"] for e in paid].index("charge") + 1]
    assert step["output"] == "ch_o2" and step["input"] is not None and step["idempotency_key"]


def test_approvals_queues_workers_breakers_and_health(ui: Scene) -> None:
    wid = ui.start("ask", "refund 40 EUR", workflow_id="reads-approval")
    ui.until(wid, "suspended")
    client = ui.reader()
    pending = client.get("/api/v1/approvals").json()["approvals"]
    mine = next(a for a in pending if a["workflow_id"] == wid)
    assert mine["subject"] == "refund 40 EUR" and mine["decision"] is None
    assert mine["details"] == {"subject": "refund 40 EUR"}
    assert client.get("/api/v1/approvals", params={"all": "true"}).status_code == 200
    queues = client.get("/api/v1/queues").json()["queues"]
    assert "default" in [q["name"] for q in queues]
    workers = client.get("/api/v1/workers").json()["workers"]
    assert workers and workers[0]["queues"] and workers[0]["seen_at"].endswith("+00:00")
    assert client.get("/api/v1/breakers").json() == {"breakers": []}
    health = client.get("/api/v1/health").json()
    assert health["ok"] is True and health["reads_need_token"] is False
    assert health["store"] == ui.url


def test_concurrent_reads_and_writes_all_answer(ui: Scene) -> None:
    ids = [ui.start("inbox", workflow_id=f"busy-{i}") for i in range(8)]
    for wid in ids:
        ui.until(wid, "suspended")
    reader, writer = ui.reader(), ui.writer(by="load")

    def read(i: int) -> int:
        path = ["/api/v1/runs", f"/api/v1/runs/{ids[i % 8]}", f"/api/v1/runs/{ids[i % 8]}/journal"]
        return reader.get(path[i % 3]).status_code

    def write(wid: str) -> int:
        return writer.post(f"/api/v1/runs/{wid}/events", json={"name": "ping"}).status_code

    with ThreadPoolExecutor(8) as pool:
        reads = pool.map(read, range(48))
        writes = pool.map(write, ids)
        assert set(reads) == {200} and set(writes) == {200}
    for wid in ids:
        ui.until(wid, "completed")


def test_health_names_a_relative_sqlite_store_absolutely(tmp_path: Path) -> None:
    stalwart.Stalwart(f"sqlite:///{tmp_path / 'rel.db'}").close()
    with ui_server("sqlite:///rel.db", cwd=tmp_path) as server, server.client() as http:
        health = http.get("/api/v1/health").json()
    assert health["store"] == f"sqlite:///{tmp_path / 'rel.db'}"
