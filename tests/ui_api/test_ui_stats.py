"""``GET /api/v1/stats`` of a live ``stalwart ui`` on SQLite and on PostgreSQL: the shape the
contract gives, and numbers that match the runs the test made (counted here from their
journals, not from the store's statistics)."""

from __future__ import annotations

import contextlib
import datetime as dt
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from ui_harness import ui_server

import stalwart

TOKEN = "stats-token"
WIDTHS = {"1h": (12, 300), "24h": (24, 3600), "7d": (28, 6 * 3600)}


def _declare(app: stalwart.Stalwart) -> dict[str, Any]:
    @app.step(name="think")
    def think(x: int) -> int:
        stalwart.record_usage(input_tokens=100 + x, output_tokens=10, cost=0.25)
        return x

    @app.step(name="fetch", retry=stalwart.Retry.never())
    def fetch(x: int) -> int:
        if x % 3 == 0:
            raise ConnectionError("down")
        return x

    @app.workflow(name="agent")
    def agent(x: int) -> int:
        return fetch(think(x))

    @app.workflow(name="waiter", queue="slow")
    def waiter() -> Any:
        return stalwart.wait_for_event("never", timeout=3600)

    return {"agent": agent, "waiter": waiter}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Any]:
    """A store with six finished agent runs (two failed) and a pending one, and its server."""
    if request.param == "sqlite":
        urls: Iterator[str] = iter([f"sqlite:///{tmp_path_factory.mktemp('stats') / 's.db'}"])
    else:
        from store_urls import postgres_schema_url

        urls = postgres_schema_url()
    for url in urls:
        with stalwart.Stalwart(url) as app:
            flows = _declare(app)
            for x in range(1, 7):
                with contextlib.suppress(stalwart.WorkflowFailed):
                    app.run(flows["agent"], x, workflow_id=f"agent-{x}")
            app.start(flows["waiter"], workflow_id="waiting")
            with ui_server(url, "--token", TOKEN) as server:
                yield app, server


def test_stats_answers_what_the_runs_did_in_every_window(served: Any) -> None:
    _, server = served
    with server.client(TOKEN) as client:
        for window, (count, width) in WIDTHS.items():
            answer = client.get("/api/v1/stats", params={"window": window})
            assert answer.status_code == 200, answer.text
            stats = answer.json()
            assert set(stats) == {"window", "buckets", "steps", "workflows", "queues"}
            assert stats["window"] == window
            starts = [dt.datetime.fromisoformat(b["start"]) for b in stats["buckets"]]
            assert len(starts) == count and all(s.utcoffset() == dt.timedelta(0) for s in starts)
            assert all((b - a).total_seconds() == width for a, b in itertools.pairwise(starts))
            now = dt.datetime.now(dt.UTC)
            assert starts[-1] <= now < starts[-1] + dt.timedelta(seconds=width)
            assert sum(b["started"] for b in stats["buckets"]) == 7
            ended: dict[str, int] = {}
            for bucket in stats["buckets"]:
                for status, n in bucket["finished"].items():
                    ended[status] = ended.get(status, 0) + n
            assert ended == {"completed": 4, "failed": 2, "cancelled": 0}
            steps = {s["name"]: s for s in stats["steps"]}
            assert set(steps) == {"think", "fetch"}
            assert (steps["think"]["attempts"], steps["think"]["failures"]) == (6, 0)
            assert (steps["fetch"]["attempts"], steps["fetch"]["failures"]) == (6, 2)
            for step in steps.values():
                assert 0 <= step["p50_ms"] <= step["p95_ms"]
            flows = {w["name"]: w for w in stats["workflows"]}
            assert flows["agent"] == {
                "name": "agent",
                "runs": 6,
                "input_tokens": sum(100 + x for x in range(1, 7)),
                "output_tokens": 60,
                "cost": pytest.approx(1.5),
            }
            assert flows["waiter"]["runs"] == 1
            queues = {q["name"]: q for q in stats["queues"]}
            assert queues["slow"] == {"name": "slow", "pending": 1, "running": 0}


def test_stats_latency_is_the_journals_nearest_rank(served: Any) -> None:
    app, server = served
    took = sorted(
        (e.finished_at - e.started_at).total_seconds() * 1000
        for x in range(1, 7)
        for e in app.journal(f"agent-{x}")
        if e.kind == "step" and e.name == "think"
    )
    with server.client(TOKEN) as client:
        stats = client.get("/api/v1/stats", params={"window": "1h"}).json()
    think = next(s for s in stats["steps"] if s["name"] == "think")
    assert think["p50_ms"] == pytest.approx(took[2], abs=0.06)  # rank ceil(0.5 * 6) = 3
    assert think["p95_ms"] == pytest.approx(took[5], abs=0.06)  # rank ceil(0.95 * 6) = 6


def test_stats_refuses_a_window_it_does_not_draw(served: Any) -> None:
    _, server = served
    with server.client(TOKEN) as client:
        answer = client.get("/api/v1/stats", params={"window": "2d"})
        assert answer.status_code == 400
        assert "window" in answer.json()["error"]["message"]
        assert client.get("/api/v1/stats").json()["window"] == "24h"
