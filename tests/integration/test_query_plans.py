"""The queries a process polls all the time, and the console's reads (the run list, its counts,
a run page), use an index, never a scan of the whole runs or journal table.

Plans are read as the store runs each query (its optional filters resolved by
``specialize``). SQLite plans do not depend on the data (no statistics are gathered), so a
small store shows the plan of a big one. PostgreSQL plans a small table with a sequential scan,
cheaper there, so its plans are read with ``enable_seqscan = off``: what remains is whether an
index *can* serve the query, which is what a big store needs. bench/console_reads.py prints the
plans and timings on 100,000 runs."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import stalwart
from stalwart._store.queries import specialize
from stalwart._store.sql import migrating as sql_module
from stalwart._store.sqlite import _Q
from stalwart.testing import FakeClock, store_of

pytestmark = pytest.mark.timeout(60)

NOTHING = {"status": None, "name": None, "queue": None, "since": None, "parent_id": None}
PAGE = {**NOTHING, "limit": 50, "before": None, "before_id": None, "parent_id": None}
CONSOLE_INDEXES = (
    "runs_by_status_created",
    "runs_by_name_created",
    "runs_by_queue_created",
    "runs_by_name_status",
)


def test_cancel_poll_does_not_scan_every_run(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    with stalwart.Stalwart(f"sqlite:///{path}", clock=FakeClock()):
        pass
    with sqlite3.connect(path) as db:
        plan = [
            row[-1]
            for row in db.execute(
                "EXPLAIN QUERY PLAN " + _Q["cancel_requested_for"], {"owner_prefix": "host/1/"}
            )
        ]
    assert not any(step.startswith("SCAN runs") for step in plan), plan


# -- the console's reads ------------------------------------------------------------------------


def test_a_count_of_one_status_under_a_filter_reads_one_index_range(shared_url: str) -> None:
    """The console counts each status under the name or queue filter: covered by an index
    whose prefix is both, not a walk of every run of that status."""
    with _app_with_runs(shared_url) as app:
        for params, index in (
            ({"status": "completed", "name": "agent"}, "runs_by_name_status"),
            ({"status": "pending", "queue": "batch"}, "runs_by_status"),
        ):
            plan = _plan(app, "count_runs", {**NOTHING, **params})
            if "sqlite" in shared_url:
                assert plan == [f"SEARCH runs USING COVERING INDEX {index} ({_eq(params)})"], plan
            else:
                assert not _unindexed(plan, params), plan


def _eq(params: dict[str, str]) -> str:
    order = ["name", "status"] if "name" in params else ["status", "queue"]
    return " AND ".join(f"{column}=?" for column in order)


def _app_with_runs(url: str) -> stalwart.Stalwart:
    app = stalwart.Stalwart(url, clock=FakeClock())

    @app.step()
    def call_llm(prompt: str) -> str:
        return prompt.upper()

    @app.workflow(name="agent")
    def agent(task: str) -> str:
        return call_llm(task) + call_llm(task * 2)

    for i in range(5):
        app.run(agent, f"task {i}", workflow_id=f"run-{i}")
    app.start(agent, "later", workflow_id="queued", queue="batch")
    return app


def _reads(at: float) -> list[tuple[str, str, dict[str, Any]]]:
    """(what, query name, parameters) of every read the run list and a run page make."""
    one = {"workflow_id": "run-1"}
    return [
        ("list", "list_runs", PAGE),
        ("list by status", "list_runs", {**PAGE, "status": "failed"}),
        ("list by name", "list_runs", {**PAGE, "name": "agent"}),
        ("list by queue", "list_runs", {**PAGE, "queue": "batch"}),
        ("list since", "list_runs", {**PAGE, "since": at}),
        ("list deep page", "list_runs", {**PAGE, "before": at, "before_id": "run-3"}),
        ("list by status and name", "list_runs", {**PAGE, "status": "failed", "name": "x"}),
        ("count", "count_runs", NOTHING),
        ("count by status", "count_runs", {**NOTHING, "status": "completed"}),
        ("count by name", "count_runs", {**NOTHING, "name": "agent"}),
        ("count by status and name", "count_runs", {**NOTHING, "status": "failed", "name": "x"}),
        ("count by status and queue", "count_runs", {**NOTHING, "status": "pending", "queue": "q"}),
        ("a run", "get_run", one),
        ("its journal", "journal", one),
        ("its journal since a poll", "journal_after", {**one, "after": 3}),
        ("a page of its journal", "journal_page", {**one, "after": 3, "limit": 50}),
        ("its journal's size", "journal_size", one),
        ("its usage", "step_usage", one),
        ("its approval", "get_approval", {**one, "approval_id": "1"}),
        ("its children", "list_runs", {**PAGE, "parent_id": "run-1", "limit": 200}),
        ("its children by status", "count_runs", {**NOTHING, "status": "failed", "parent_id": "x"}),
        ("the approvals inbox", "list_approvals", {"pending": 1, "workflow_id": None}),
        ("the waits of a page", "approvals_of_runs", {"ids": ["run-1", "run-2"]}),
        ("the queues page", "queue_counts", {}),
        ("the overview's runs started", "stats_started", {"since": at, "width": 300.0}),
        ("the overview's runs ended", "stats_finished", {"since": at, "width": 300.0}),
        ("the overview's steps", "stats_steps", {"since": at}),
        ("the overview's unsettled doubts", "stats_steps_in_doubt", {"since": at}),
        ("the overview's step times", "stats_step_times", {"since": at, "every": 1, "name": None}),
        ("a step's times", "stats_step_times", {"since": at, "every": 1, "name": "call_llm"}),
        ("the overview's workflows", "stats_workflows", {"since": at}),
    ]


def _plan(app: stalwart.Stalwart, name: str, given: dict[str, Any]) -> list[str]:
    store: Any = store_of(app)
    params = {k: store._list(v) if isinstance(v, list) else v for k, v in given.items()}
    sql = store._sql(name, params)
    if type(store).__name__ == "SQLiteStore":
        rows = store._run(lambda conn: conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall())
        return [str(row[3]) for row in rows]

    def explain(conn: Any) -> list[Any]:
        conn.execute("SET LOCAL enable_seqscan = off")  # this transaction only
        return list(conn.execute("EXPLAIN " + sql, params).fetchall())

    return [str(row[0]) for row in store._write(explain)]


def _unindexed(plan: list[str], filters: dict[str, Any]) -> list[str]:
    """The steps of ``plan`` that read runs or journal rows without an index; on SQLite also a
    scan of every run (in an index's order) where the query filters on an indexed column."""
    filtered = any(filters.get(key) is not None for key in ("status", "name", "queue", "parent_id"))
    bad = []
    for step in plan:
        scan = re.match(r"\s*SCAN (runs|journal|approvals)\b", step)
        if scan and not re.search(r"USING (COVERING )?INDEX", step):
            bad.append(step)
        elif scan and filtered and scan[1] == "runs":
            bad.append(f"{step} (a filtered read scans every run)")
        elif re.search(r"Seq Scan on (runs|journal|approvals)\b", step):
            bad.append(step)
    return bad


def test_the_run_list_and_a_run_page_read_through_indexes(shared_url: str) -> None:
    with _app_with_runs(shared_url) as app:
        at = app.list_workflows(limit=3)[-1].created_at.timestamp()
        bad = {}
        for what, name, params in _reads(at):
            plan = _plan(app, name, params)
            assert any(re.search(r"\b(runs|journal|approvals)\b", step) for step in plan), plan
            if found := _unindexed(plan, params):
                bad[what] = (found, plan)
        assert not bad, bad


@pytest.mark.parametrize(
    ("name", "index"),
    [
        ("stats_started", "runs_by_created_name"),
        ("stats_finished", "runs_ended"),
        ("stats_steps", "journal_steps"),
        ("stats_step_times", "journal_steps"),
        ("stats_workflows", "runs_by_created_name"),
    ],
)
def test_the_overview_reads_its_window_from_its_index(
    tmp_path: Path, name: str, index: str
) -> None:
    """GET /api/v1/stats reads a range of an index that covers what it counts, from the
    window's start: never a run or journal row before it (SQLite; PostgreSQL's plans are
    checked with the console's reads above)."""
    with _app_with_runs(f"sqlite:///{tmp_path / 'runs.db'}") as app:
        plan = _plan(app, name, {"since": 1.0, "width": 300.0, "every": 2, "name": None})
        since = r"\((created_at|updated_at|started_at)>\?\)"
        pattern = rf"SEARCH (runs|journal) USING COVERING INDEX {index} {since}"
        assert any(re.match(pattern, step) for step in plan), plan


@pytest.mark.parametrize(
    ("params", "index"),
    [
        ({"status": "failed"}, "runs_by_status_created"),
        ({"name": "agent"}, "runs_by_name_created"),
        ({"queue": "batch"}, "runs_by_queue_created"),
        ({"status": "failed", "name": "agent"}, "runs_by_name_status"),
    ],
)
def test_a_filtered_run_list_uses_its_filters_index(
    shared_url: str, params: dict[str, str], index: str
) -> None:
    with _app_with_runs(shared_url) as app:
        plan = _plan(app, "list_runs", {**PAGE, **params})
        if "sqlite" in shared_url:
            # the page's keys from the filter's index (covering them), then its rows by key
            pattern = rf"SEARCH runs USING (COVERING )?INDEX {index} "
            assert any(re.match(pattern, step) for step in plan), plan
        else:  # PostgreSQL may pick another index; any index will do, not a scan of all rows
            assert any(re.search(r"Index|Bitmap", step) for step in plan), plan
            assert not _unindexed(plan, params), plan


def test_the_console_indexes_are_added_to_an_existing_store(
    shared_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = sql_module.load_migrations
    before = [m for m in real("sqlite") if m.version < 12]
    monkeypatch.setattr(
        sql_module,
        "load_migrations",
        lambda backend: [m for m in real(backend) if m.version < 12],
    )
    monkeypatch.setattr(sql_module, "SCHEMA_VERSION", before[-1].version)
    # This code reads runs.parent_id (migration 13), which the release before lacked: the
    # column is added by hand, and the upgrade below stops at migration 12.
    with stalwart.Stalwart(shared_url, clock=FakeClock()) as bare:
        store_of(bare)._run(lambda conn: conn.execute("ALTER TABLE runs ADD COLUMN parent_id TEXT"))
    with _app_with_runs(shared_url) as app:  # a store of the release before, with runs
        assert not _indexes(app) & set(CONSOLE_INDEXES)
    monkeypatch.setattr(
        sql_module, "load_migrations", lambda backend: [m for m in real(backend) if m.version < 13]
    )
    monkeypatch.setattr(sql_module, "SCHEMA_VERSION", 12)
    with stalwart.Stalwart(shared_url, clock=FakeClock()) as app:
        assert _indexes(app) >= set(CONSOLE_INDEXES)
        assert [r.workflow_id for r in app.list_workflows("completed", limit=2)] == [
            "run-4",
            "run-3",
        ]
        assert app.count_workflows(queue="batch") == 1


def _indexes(app: stalwart.Stalwart) -> set[str]:
    store: Any = store_of(app)
    if type(store).__name__ == "SQLiteStore":
        query = "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'runs'"
    else:
        query = "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
    return {str(row[0]) for row in store._run(lambda conn: conn.execute(query).fetchall())}


# -- optional conditions ------------------------------------------------------------------------


def test_an_optional_condition_is_dropped_when_its_value_is_null_and_kept_when_given() -> None:
    sql = "WHERE (:a IS NULL OR a = :a) AND (:b IS NULL OR (b < :b AND (c = 1)))"
    assert specialize(sql, frozenset({"a", "b"})) == "WHERE TRUE AND TRUE"
    assert specialize(sql, frozenset({"a"})) == "WHERE TRUE AND ((b < :b AND (c = 1)))"
    assert specialize(sql, frozenset()) == "WHERE (a = :a) AND ((b < :b AND (c = 1)))"
    pyformat = "(%(a)s IS NULL OR a = %(a)s) AND (x IS NULL OR y)"
    assert specialize(pyformat, frozenset({"a"})) == "TRUE AND (x IS NULL OR y)"  # x: a column
    nested = "(:a IS NULL OR a < :a AND (:b IS NULL OR b = :b))"
    assert specialize(nested, frozenset({"b"})) == "(a < :a AND TRUE)"
    with pytest.raises(ValueError, match="not closed"):
        specialize("(:a IS NULL OR a = :a", frozenset())


def test_run_list_filters_read_the_same_runs_whatever_the_filters_given(shared_url: str) -> None:
    with _app_with_runs(shared_url) as app:
        every = app.list_workflows(limit=100)
        for status, name, queue in [
            ("completed", None, None),
            (None, "agent", None),
            (None, None, "batch"),
            ("pending", "agent", "batch"),
            ("failed", None, None),
        ]:
            wanted = {"status": status, "name": name, "queue": queue}
            expected = [
                r for r in every if all(v in (None, getattr(r, k)) for k, v in wanted.items())
            ]
            assert app.list_workflows(status, name, queue=queue) == expected
            assert app.count_workflows(status, name, queue) == len(expected)
        page = app.list_workflows(limit=2)
        assert app.list_workflows(limit=100, before=page[-1]) == every[2:]
