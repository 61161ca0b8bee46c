"""Schedules on every backend, with a fake clock: declaring, listing, removing, and how a
worker's ticker starts ticks (never early; however late while a worker ran; missed ones per
``catch_up``). The fleet of real worker processes is in ``tests/faults/test_fleet_schedules.py``."""

from __future__ import annotations

import datetime as _dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import stalwart
from stalwart import testing
from stalwart._store.base import WorkerRow
from stalwart._ticks import Ticker
from stalwart.testing import FakeClock

T0 = 1_767_225_600.0  # the fake clock's start: 2026-01-01T00:00:00Z
EVERY_2S = "* * * * * */2"


@pytest.fixture
def job(app: stalwart.Stalwart) -> Any:
    @app.workflow(name="job")
    def job(label: str = "tick") -> str:
        return label

    return job


def _ticker(app: stalwart.Stalwart, started_at: float | None = None) -> Ticker:
    """What a worker of ``app`` that started at ``started_at`` (default: now) fires with."""
    runtime = app._runtime
    return Ticker(runtime, runtime.clock.time() if started_at is None else started_at)


def _started(app: stalwart.Stalwart) -> list[str]:
    return sorted(r.workflow_id for r in app.list_workflows(limit=1000))


def _at(seconds: float) -> str:
    return f"{_dt.datetime.fromtimestamp(T0 + seconds, _dt.UTC):%Y-%m-%dT%H:%M:%SZ}"


def test_a_schedule_is_listed_with_its_next_tick_and_can_be_removed(
    app: stalwart.Stalwart, job: Any
) -> None:
    declared = app.schedule(job, "0 9 * * *", name="daily", timezone="Europe/Berlin")
    assert declared == stalwart.Schedule(
        name="daily",
        workflow="job",
        cron="0 9 * * *",
        timezone="Europe/Berlin",
        catch_up="latest",
        next_tick=declared.next_tick,
    )
    assert declared.next_tick.isoformat() == "2026-01-01T09:00:00+01:00"
    app.schedule(job, EVERY_2S, catch_up="none")  # named after the workflow
    assert [s.name for s in app.schedules()] == ["daily", "job"]
    app.unschedule("daily")
    assert [s.name for s in app.schedules()] == ["job"]
    with pytest.raises(stalwart.InvalidOperation, match=r"no schedule named 'daily'.*'job'"):
        app.unschedule("daily")


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (lambda app, job: app.schedule(job, "* * *"), "pass five fields"),
        (lambda app, job: app.schedule(job, "* * * * *", timezone="Mars/X"), "IANA time zone"),
        (lambda app, job: app.schedule(job, "* * * * *", catch_up="some"), "pass 'latest'"),
        (lambda app, job: app.schedule("nope", "* * * * *"), "no workflow of that name"),
        (lambda app, job: app.schedule(print, "* * * * *"), "decorate it with @app.workflow"),
        (lambda app, job: app.schedule(job, "* * * * *", args=(1, 2)), "do not fit workflow"),
        (lambda app, job: app.schedule(job, "* * * * *", args="ab"), "pass a tuple"),
    ],
)
def test_bad_declarations_say_what_to_pass(
    app: stalwart.Stalwart, job: Any, call: Any, says: str
) -> None:
    with pytest.raises((stalwart.UsageError, TypeError), match=says) as caught:
        call(app, job)
    assert "\n" not in str(caught.value)
    assert app.schedules() == []


def test_a_tick_is_never_started_before_it_comes(
    app: stalwart.Stalwart, clock: FakeClock, job: Any
) -> None:
    app.schedule(job, EVERY_2S, args=("hello",))
    ticker = _ticker(app)
    clock.advance(1.999)
    ticker.fire()
    assert _started(app) == []
    clock.advance(0.001)
    ticker.fire()
    assert _started(app) == [f"job@{_at(2)}"]
    ticker.fire()  # handled: nothing more
    assert _started(app) == [f"job@{_at(2)}"]
    assert app.handle(f"job@{_at(2)}").status() == "pending"
    assert app.run(job, workflow_id=f"job@{_at(2)}") == "hello"  # its arguments


def test_an_alias_such_as_daily_starts_its_tick_at_midnight_and_not_before(
    app: stalwart.Stalwart, clock: FakeClock, job: Any
) -> None:
    declared = app.schedule(job, "@daily", name="nightly")
    assert (declared.cron, declared.next_tick.isoformat()) == (
        "@daily",
        "2026-01-02T00:00:00+00:00",
    )
    ticker = _ticker(app)
    clock.advance(86_399.5)
    ticker.fire()
    assert _started(app) == []
    clock.advance(0.5)
    ticker.fire()
    assert _started(app) == ["nightly@2026-01-02T00:00:00Z"]
    (schedule,) = app.schedules()
    assert schedule.next_tick.isoformat() == "2026-01-03T00:00:00+00:00"


@pytest.mark.parametrize("catch_up", ["latest", "all", "none"])
def test_ticks_that_came_due_while_a_worker_ran_all_start_however_late(
    app: stalwart.Stalwart, clock: FakeClock, job: Any, catch_up: str
) -> None:
    app.schedule(job, EVERY_2S, catch_up=catch_up)
    ticker = _ticker(app)
    clock.advance(10.5)  # the worker was busy: five ticks came due since its last look
    ticker.fire()
    assert _started(app) == sorted(f"job@{_at(s)}" for s in (2, 4, 6, 8, 10))


@pytest.mark.parametrize(
    ("catch_up", "expected"),
    [("latest", [16]), ("all", [4, 6, 8, 10, 12, 14, 16]), ("none", [])],
)
def test_ticks_missed_while_no_worker_ran_start_per_catch_up(
    app: stalwart.Stalwart, clock: FakeClock, job: Any, catch_up: str, expected: list[int]
) -> None:
    app.schedule(job, EVERY_2S, catch_up=catch_up)
    first = _ticker(app)
    clock.advance(2)
    first.fire()  # the fleet started tick 2, then every worker stopped
    clock.advance(15)  # at T0 + 17 a worker starts again
    _ticker(app).fire()
    assert _started(app) == sorted([f"job@{_at(2)}", *(f"job@{_at(s)}" for s in expected)])
    (schedule,) = app.schedules()
    assert schedule.next_tick.timestamp() == T0 + 18  # nothing of the backlog is left


def _worker_row(
    app: stalwart.Stalwart,
    name: str,
    started: float,
    seen: float,
    serves: str | None = '["job"]',
) -> None:
    """A worker's row as its last refresh left it (the worker may be dead since)."""
    row = WorkerRow(name, "elsewhere", 1, '["default"]', T0 + started, T0 + seen, 0, serves)
    testing.store_of(app).beat_worker(row)


@pytest.mark.parametrize(("catch_up", "expected"), [("latest", [4, 6, 8]), ("none", [6, 8])])
def test_only_workers_that_serve_the_workflow_count_as_running_for_its_schedule(
    app: stalwart.Stalwart, clock: FakeClock, job: Any, catch_up: str, expected: list[int]
) -> None:
    # From T0 on only a worker of another app ran (its row says it serves "other"); from
    # T0 + 5 a worker of an older release ran too (its row names no workflows: it may serve
    # any). Ticks 2 and 4 came due while no worker of "job" ran; 6 and 8 while one ran.
    app.schedule(job, EVERY_2S, catch_up=catch_up)
    _worker_row(app, "other-app", started=0.0, seen=9.4, serves='["other"]')
    _worker_row(app, "old-release", started=5.0, seen=9.4, serves=None)
    clock.advance(9.5)
    _ticker(app).fire()
    assert _started(app) == sorted(f"job@{_at(s)}" for s in expected)


@pytest.mark.parametrize(("catch_up", "expected"), [("latest", [2]), ("all", [2]), ("none", [])])
def test_a_tick_after_a_rows_last_refresh_waits_for_the_row_then_follows_catch_up(
    app: stalwart.Stalwart, clock: FakeClock, job: Any, catch_up: str, expected: list[int]
) -> None:
    # A worker last refreshed its row at T0 + 1 and was killed; tick 2 came due; a worker
    # starts at T0 + 2.5. The row may still be refreshed (it is younger than a lease): with
    # catch_up "latest" or "none" tick 2 waits. Once it is stale, tick 2 was missed.
    app.schedule(job, EVERY_2S, catch_up=catch_up)
    _worker_row(app, "dead", started=0.0, seen=1.0)
    clock.advance(2.5)
    ticker = _ticker(app)
    ticker.fire()
    assert _started(app) == ([] if catch_up != "all" else [f"job@{_at(2)}"])
    clock.advance(app._runtime.lease_seconds)  # the row went stale: its worker is gone
    ticker.fire()
    started = [f"job@{_at(s)}" for s in expected]
    later = [f"job@{_at(s)}" for s in range(4, int(2.5 + app._runtime.lease_seconds) + 1, 2)]
    assert _started(app) == sorted([*started, *later])  # the new worker ran since T0 + 2.5


def test_a_tick_after_a_rows_last_refresh_starts_once_the_row_is_refreshed_past_it(
    app: stalwart.Stalwart, clock: FakeClock, job: Any
) -> None:
    app.schedule(job, EVERY_2S, catch_up="none")
    _worker_row(app, "busy", started=0.0, seen=1.0)
    clock.advance(2.5)
    ticker = _ticker(app)
    ticker.fire()
    assert _started(app) == []  # the busy worker may start it yet
    _worker_row(app, "busy", started=0.0, seen=2.5)  # it was alive at tick 2
    ticker.fire()
    assert _started(app) == [f"job@{_at(2)}"]


def test_declaring_again_updates_the_schedule_and_keeps_its_last_tick(
    app: stalwart.Stalwart, clock: FakeClock, job: Any
) -> None:
    app.schedule(job, EVERY_2S, catch_up="none")
    ticker = _ticker(app)
    clock.advance(4)
    ticker.fire()
    assert _started(app) == [f"job@{_at(2)}", f"job@{_at(4)}"]
    clock.advance(0.5)
    # A new release declares it again, now every 3 s with another argument: its last tick
    # stays, so the ticks after it start under the new declaration.
    again = app.schedule(job, "* * * * * */3", args=("v2",), catch_up="all")
    assert (again.cron, again.catch_up, again.next_tick.timestamp()) == (
        "* * * * * */3",
        "all",
        T0 + 6,
    )
    clock.advance(1.5)
    ticker.fire()
    assert _started(app)[-1] == f"job@{_at(6)}"
    assert app.run(job, workflow_id=f"job@{_at(6)}") == "v2"
    assert len(app.schedules()) == 1


def test_two_tickers_racing_start_each_tick_once(
    app: stalwart.Stalwart, clock: FakeClock, job: Any
) -> None:
    app.schedule(job, EVERY_2S)
    tickers = [_ticker(app), _ticker(app)]
    for _ in range(5):
        clock.advance(2)
        for ticker in tickers:
            ticker.fire()
    assert _started(app) == sorted(f"job@{_at(s)}" for s in (2, 4, 6, 8, 10))


def test_a_removed_schedule_starts_nothing_more(
    app: stalwart.Stalwart, clock: FakeClock, job: Any
) -> None:
    app.schedule(job, EVERY_2S)
    ticker = _ticker(app)
    clock.advance(2)
    ticker.fire()
    app.unschedule("job")
    clock.advance(10)
    ticker.fire()
    assert _started(app) == [f"job@{_at(2)}"]


def test_schedules_json_and_table(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cron.db'}"
    with stalwart.Stalwart(url) as app:

        @app.workflow(name="report")
        def report() -> None:
            return None

        app.schedule(report, "0 9 * * 1-5", name="weekday-report", timezone="Europe/Berlin")
        app.schedule(report, EVERY_2S, catch_up="all")
        expected = app.schedules()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "STALWART_URL"}
        command = [sys.executable, "-m", "stalwart", "schedules", "--url", url, *args]
        return subprocess.run(
            command, capture_output=True, text=True, timeout=60, env=env, check=False
        )

    shown = cli("--json")
    assert shown.returncode == 0, shown.stderr
    lines = [json.loads(line) for line in shown.stdout.splitlines()]
    assert [line["name"] for line in lines] == ["report", "weekday-report"]
    assert lines[1] == {
        "name": "weekday-report",
        "workflow": "report",
        "cron": "0 9 * * 1-5",
        "timezone": "Europe/Berlin",
        "catch_up": "latest",
        "next_tick": expected[1].next_tick.astimezone(_dt.UTC).isoformat(),
    }
    table = cli()
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split()[:4] == ["SCHEDULE", "WORKFLOW", "CRON", "TIMEZONE"]
    assert rows[1].split()[:2] == ["weekday-report", "report"]
    missing = subprocess.run(
        [sys.executable, "-m", "stalwart", "schedules", "--url", f"sqlite:///{tmp_path}/no.db"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert missing.returncode == 1 and missing.stderr.startswith("error: no store at")


def test_the_worker_loop_waits_for_the_next_tick_and_a_leaving_worker_starts_what_came_due(
    app: stalwart.Stalwart, clock: FakeClock, job: Any
) -> None:
    app.schedule(job, EVERY_2S, catch_up="none")
    ticker = Ticker(app._runtime)
    started = clock.time()
    assert ticker.poll(started, 0.01) == 0.01  # the tick is 2 s away: the usual wait
    clock.advance(1.995)
    assert ticker.poll(started, 0.01) == pytest.approx(
        0.005, abs=1e-6
    )  # woken in time for the tick
    assert _started(app) == []
    clock.advance(0.005)
    ticker.poll(started, 0.01)
    assert _started(app) == [f"job@{_at(2)}"]
    # Busy until it stops: the ticks 4 and 6 came due while it ran, and start as it leaves.
    clock.advance(5)
    ticker.leave(started)
    assert _started(app) == [f"job@{_at(s)}" for s in (2, 4, 6)]
    # A worker that never served (its loop never started) starts nothing as it leaves.
    clock.advance(10)
    Ticker(app._runtime).leave(0.0)
    assert _started(app) == [f"job@{_at(s)}" for s in (2, 4, 6)]
