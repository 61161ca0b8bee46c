"""A journal row replay cannot read raises ``CorruptRecord`` naming the run and ``seq``.

Never a silent default: a garbled error is not "retryable failure", an unknown status is not
"failed, retry", so a step that failed for good or completed is not run again.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import stalwart
from stalwart.testing import FakeClock, store_of

pytestmark = pytest.mark.timeout(60)

Sql = Callable[..., list[Any]]


def _is_postgres(app: stalwart.Stalwart) -> bool:
    return type(store_of(app)).__name__ == "PostgresStore"


def _crashed(app: stalwart.Stalwart, calls: list[int], fail: Callable[[int], None]) -> Any:
    """Run ``agent`` until its ``halt`` step crashes the process (after ``tool`` recorded)."""
    stop = {"on": True}

    @app.step(name="tool", retry=stalwart.Retry(max_attempts=3, initial_delay=0.0, jitter=False))
    def tool() -> int:
        calls.append(1)
        fail(len(calls))
        return len(calls)

    @app.step(name="halt")
    def halt() -> None:
        if stop["on"]:
            raise KeyboardInterrupt

    @app.workflow(name="agent")
    def agent() -> Any:
        try:
            got: Any = tool()
        except stalwart.StepFailed as exc:
            got = exc.cause_type
        halt()
        return got

    with pytest.raises(KeyboardInterrupt):
        app.run(agent, workflow_id="w")
    stop["on"] = False
    return agent


def _succeed(n: int) -> None:
    pass


def _fail_for_good(n: int) -> None:
    raise stalwart.NonRetryableError("card declined")


def _fail_then_crash(n: int) -> None:
    if n == 1:
        raise ValueError("flaky")
    if n == 2:
        raise KeyboardInterrupt  # the second attempt dies with its process


def _assert_corrupt(app: stalwart.Stalwart, agent: Any, calls: list[int], seq: int | None) -> None:
    before = len(calls)
    with pytest.raises(stalwart.CorruptRecord) as info:
        app.run(agent, workflow_id="w")
    assert (info.value.workflow_id, info.value.seq) == ("w", seq)
    if seq is not None:
        assert f"seq {seq}" in str(info.value)
    assert len(calls) == before  # nothing ran again
    assert app.handle("w").status() == "needs_attention"
    with pytest.raises(stalwart.CorruptRecord):
        app.run(agent, workflow_id="w")
    assert len(calls) == before


CASES = [
    ("garbled error", _fail_for_good, "error", "{not json"),
    ("error not a record", _fail_for_good, "error", "[1, 2]"),
    ("error final not a bool", _fail_for_good, "error", '{"type": "X", "final": "yes"}'),
    ("retry_at not a number", _fail_then_crash, "error", '{"type": "V", "retry_at": "soon"}'),
    ("status complete", _succeed, "status", "complete"),
    ("status xyz", _succeed, "status", "xyz"),
    ("status xyz of a failure", _fail_for_good, "status", "xyz"),
    ("unknown kind", _succeed, "kind", "stepp"),
    ("negative attempt", _fail_then_crash, "attempt", -1),
    ("attempt not a number", _fail_then_crash, "attempt", "abc"),
    ("output garbled", _succeed, "output", b"J{nope"),
]


@pytest.mark.parametrize(
    ("fail", "column", "value"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_a_damaged_step_row_is_a_corrupt_record_and_nothing_runs_again(
    app: stalwart.Stalwart, raw_sql: Sql, fail: Callable[[int], None], column: str, value: Any
) -> None:
    calls: list[int] = []
    agent = _crashed(app, calls, fail)
    if isinstance(value, str) and column == "attempt" and _is_postgres(app):
        with pytest.raises(stalwart.StoreError, match="invalid input syntax"):  # typed column
            raw_sql(app, "UPDATE journal SET attempt = :v WHERE workflow_id = 'w'", {"v": value})
        return
    raw_sql(
        app,
        f"UPDATE journal SET {column} = :v WHERE workflow_id = 'w' AND seq = 1",
        {"v": value},
    )
    _assert_corrupt(app, agent, calls, 1)


def test_a_damaged_timer_spec(store_url: str, raw_sql: Sql) -> None:
    calls: list[int] = []
    stop = {"on": True}
    with stalwart.Stalwart(store_url) as app:  # timers need real time to pass

        @app.workflow(name="agent")
        def agent() -> None:
            stalwart.sleep(0.05)
            calls.append(1)
            if stop["on"]:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            app.run(agent, workflow_id="w")
        stop["on"] = False
        # As if the process died while the run slept: the timer is open, its spec garbled.
        raw_sql(app, "DELETE FROM journal WHERE kind = 'sleep' AND status = 'completed'")
        spec = {"v": b'J{"until":"x"}'}
        raw_sql(app, "UPDATE journal SET input = :v WHERE kind = 'sleep'", spec)
        _assert_corrupt(app, agent, calls, 1)


def test_a_damaged_recorded_value(app: stalwart.Stalwart, raw_sql: Sql) -> None:
    calls: list[int] = []
    stop = {"on": True}

    @app.workflow(name="agent")
    def agent() -> Any:
        when = stalwart.now()
        calls.append(1)
        if stop["on"]:
            raise KeyboardInterrupt
        return when

    with pytest.raises(KeyboardInterrupt):
        app.run(agent, workflow_id="w")
    stop["on"] = False
    raw_sql(app, "UPDATE journal SET output = :v WHERE seq = 1", {"v": b"J5"})
    _assert_corrupt(app, agent, calls, 1)


def _compensated_agent(app: stalwart.Stalwart, undos: list[Any], crash_undo: bool) -> Any:
    stop = {"on": True}

    def undo(result: int, n: int) -> None:
        if stop["on"] and crash_undo:
            raise KeyboardInterrupt
        undos.append(n)

    @app.step(name="book", compensate=undo)
    def book(n: int) -> int:
        return n

    @app.step(name="halt")
    def halt() -> None:
        if stop["on"] and not crash_undo:
            raise KeyboardInterrupt

    @app.workflow(name="agent")
    def agent() -> None:
        book(7)
        halt()
        raise RuntimeError("give up")

    with pytest.raises(KeyboardInterrupt):
        app.run(agent, workflow_id="w")
    stop["on"] = False
    return agent


def test_a_damaged_compensation_plan_row(app: stalwart.Stalwart, raw_sql: Sql) -> None:
    undos: list[Any] = []
    agent = _compensated_agent(app, undos, crash_undo=False)
    raw_sql(app, "UPDATE journal SET input = :v WHERE seq = 1", {"v": b'J{"args":"abc"}'})
    with pytest.raises(stalwart.CorruptRecord) as info:
        app.run(agent, workflow_id="w")
    assert (info.value.workflow_id, info.value.seq) == ("w", 1)
    assert undos == []
    assert app.handle("w").status() == "needs_attention"


def test_a_damaged_rollback_state(app: stalwart.Stalwart, raw_sql: Sql) -> None:
    undos: list[Any] = []
    agent = _compensated_agent(app, undos, crash_undo=True)
    raw_sql(app, "UPDATE journal SET output = :v WHERE name = 'rolling_back'", {"v": b"J{}"})
    with pytest.raises(stalwart.CorruptRecord, match="rolling_back") as info:
        app.run(agent, workflow_id="w")
    assert info.value.workflow_id == "w"
    assert undos == []
    assert app.handle("w").status() == "needs_attention"


def test_a_damaged_run_error_is_a_corrupt_record(app: stalwart.Stalwart, raw_sql: Sql) -> None:
    @app.step(retry=stalwart.Retry.never())
    def boom() -> None:
        raise RuntimeError("no")

    @app.workflow
    def failing() -> None:
        boom()

    with pytest.raises(stalwart.WorkflowFailed):
        app.run(failing, workflow_id="bad-error")
    raw_sql(app, "UPDATE runs SET error = '{not json' WHERE workflow_id = 'bad-error'")
    with pytest.raises(stalwart.CorruptRecord, match="bad-error") as caught:
        app.handle("bad-error").result(timeout=5)
    assert caught.value.workflow_id == "bad-error"
    with pytest.raises(stalwart.CorruptRecord):
        app.retry("bad-error")


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


@pytest.mark.timeout(30)
def test_journal_names_run_and_seq_of_a_row_with_a_missing_payload(tmp_path: Path) -> None:
    with stalwart.Stalwart(_url(tmp_path), clock=FakeClock()) as app:

        @app.step
        def big() -> str:
            return "x" * 1000  # stored apart from the journal row

        @app.workflow
        def wf() -> str:
            return big()

        app.run(wf, workflow_id="w")
        with sqlite3.connect(tmp_path / "runs.db") as db:
            db.execute("DELETE FROM payloads")
        with pytest.raises(stalwart.CorruptRecord) as info:
            app.journal("w")
        assert "'w'" in str(info.value)
        assert "seq 1" in str(info.value)
        assert info.value.seq == 1
