"""A run's running totals: kept with the run as its journal grows, so a budget check and
``app.usage`` read one row; a run journaled before the store kept them is counted from its
journal, as before, so nothing recorded is lost in the upgrade."""

from __future__ import annotations

from typing import Any

import pytest

import stalwart
from stalwart._engine.budget import Spend
from stalwart._store.sql import migrating as sql_module
from stalwart.testing import FakeClock, store_of

TOTALS = 18  # the migration that keeps them


def _agent(app: stalwart.Stalwart, budget: stalwart.Budget | None = None) -> Any:
    @app.step(name="think")
    def think(turn: int) -> str:
        stalwart.record_usage(input_tokens=50, output_tokens=10, cost=0.5)
        return f"thought {turn}"

    @app.workflow(name="agent", budget=budget)
    def agent(turns: int) -> int:
        for turn in range(turns):
            think(turn)
        return turns

    return agent


def _spend(app: stalwart.Stalwart, workflow_id: str, budget: stalwart.Budget) -> Spend:
    return Spend.of_run(app._runtime, workflow_id, budget)


def test_a_run_journaled_before_the_totals_is_counted_from_its_journal(
    shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = sql_module.load_migrations
    with monkeypatch.context() as before:
        before.setattr(
            sql_module,
            "load_migrations",
            lambda backend: [m for m in real(backend) if m.version < TOTALS],
        )
        before.setattr(sql_module, "SCHEMA_VERSION", TOTALS - 1)
        with stalwart.Stalwart(shared_url, clock=FakeClock()) as old:
            agent = _agent(old)
            assert old.run(agent, 3, workflow_id="old") == 3
    with stalwart.Stalwart(shared_url, clock=FakeClock()) as app:
        agent = _agent(app, stalwart.Budget(max_tokens=1000))
        totals = store_of(app).run_spend("old")
        assert totals is not None and not totals.since_start
        assert app.usage("old") == stalwart.Usage(150, 30, 1.5, 3)
        assert _spend(app, "old", stalwart.Budget(max_tokens=1000)).used == app.usage("old")
        assert app.run(agent, 2, workflow_id="new") == 2
        totals = store_of(app).run_spend("new")
        assert totals is not None and totals.since_start
        assert app.usage("new") == stalwart.Usage(100, 20, 1.0, 2)
        assert _spend(app, "new", stalwart.Budget(max_tokens=1000)).used == app.usage("new")


def test_a_budget_reads_the_totals_not_the_journal(app: stalwart.Stalwart) -> None:
    agent = _agent(app, stalwart.Budget(max_tokens=1000))
    assert app.run(agent, 4, workflow_id="counted") == 4
    store: Any = store_of(app)
    read: list[str] = []
    journal = store.journal
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(store, "journal", lambda wid, **kw: read.append(wid) or journal(wid, **kw))
    try:
        spend = _spend(app, "counted", stalwart.Budget(max_tokens=1000))
        assert app.usage("counted") == stalwart.Usage(200, 40, 2.0, 4)
    finally:
        monkeypatch.undo()
    assert spend.used == stalwart.Usage(200, 40, 2.0, 4)
    assert read == []  # one row of totals, whatever the journal's length


def test_repeats_are_counted_across_invocations_from_the_store(store_url: str) -> None:
    with stalwart.Stalwart(store_url) as app:  # the real clock: a short sleep ends by itself
        _loops_after_a_suspension(app)


def _loops_after_a_suspension(app: stalwart.Stalwart) -> None:
    calls: list[str] = []

    @app.step
    def search(query: str) -> list[str]:
        calls.append(query)
        return []

    @app.workflow(budget=stalwart.Budget(max_repeats=2))
    def agent() -> None:
        search("flights to Lima")
        search("flights to Lima")
        search("other")
        stalwart.sleep(0.05)  # the run suspends: what follows is another invocation
        search("flights to Lima")

    with pytest.raises(stalwart.LoopDetected, match=r"call 3 of step '\S*search'"):
        app.run(agent, workflow_id="looping")
    assert calls == ["flights to Lima", "flights to Lima", "other"]
    assert [e.name for e in app.journal("looping") if e.kind == "run"].count("resumed") == 1
    totals = store_of(app).run_spend("looping")
    assert totals is not None and totals.counts_calls
