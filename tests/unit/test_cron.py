"""Schedules as pure values: checks, ticks in a time zone, run ids, and the plan for a due
schedule (``_cron``), as truth tables; no store, no clock."""

from __future__ import annotations

import datetime as _dt

import pytest

from stalwart import UsageError
from stalwart._cron import (
    Advance,
    check_catch_up,
    check_cron,
    check_schedule_name,
    check_timezone,
    next_tick,
    plan,
    tick_run_id,
)

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z
EVERY_2S = "* * * * * */2"


def _utc(*parts: int) -> float:
    return _dt.datetime(*parts, tzinfo=_dt.UTC).timestamp()  # type: ignore[misc]


@pytest.mark.parametrize("cron", ["*/5 * * * *", "0 9 * * 1-5", EVERY_2S, "30 2 1 * * 15"])
def test_five_or_six_fields_are_taken(cron: str) -> None:
    assert check_cron(cron) == cron


def test_seconds_written_first_are_refused_with_where_they_go() -> None:
    with pytest.raises(UsageError, match="the sixth field is the seconds") as caught:
        check_cron("*/10 * * * * *")  # Quartz's every 10 seconds: every second here
    assert "'* * * * * */10' is every 10 seconds" in str(caught.value)
    assert check_cron("* * * * * *") == "* * * * * *"  # every second, said plainly
    assert check_cron("0 9 * * 1-5 0") == "0 9 * * 1-5 0"


@pytest.mark.parametrize(
    ("alias", "after", "tick"),
    [
        ("@hourly", _utc(2026, 3, 28, 9, 30), _utc(2026, 3, 28, 10)),
        ("@daily", _utc(2026, 3, 28, 9), _utc(2026, 3, 29)),
        ("@DAILY", _utc(2026, 3, 28, 9), _utc(2026, 3, 29)),
        ("@midnight", _utc(2026, 3, 28, 9), _utc(2026, 3, 29)),
        ("@weekly", _utc(2026, 3, 28, 9), _utc(2026, 3, 29)),  # Sunday 00:00
        ("@monthly", _utc(2026, 3, 28, 9), _utc(2026, 4, 1)),
        ("@yearly", _utc(2026, 3, 28, 9), _utc(2027, 1, 1)),
        ("@annually", _utc(2026, 3, 28, 9), _utc(2027, 1, 1)),
    ],
)
def test_croniters_aliases_are_taken_and_tick_as_croniter_says(
    alias: str, after: float, tick: float
) -> None:
    assert check_cron(alias) == alias
    assert next_tick(alias, "UTC", after) == tick


@pytest.mark.parametrize(
    ("cron", "says"),
    [
        ("* * * *", "pass five fields"),
        ("* * * * * * *", "pass five fields"),
        (
            "@reboot",
            "'@hourly', '@daily', '@midnight', '@weekly', '@monthly', '@yearly', '@annually'",
        ),
        ("61 * * * *", "out of range"),
        ("0 0 31 2 *", "pass five fields"),  # February 31st never comes
        (5, "pass five fields"),
    ],
)
def test_a_bad_cron_says_what_to_pass(cron: object, says: str) -> None:
    with pytest.raises(UsageError, match=says) as caught:
        check_cron(cron)
    assert "\n" not in str(caught.value) and "'* * * * * */2' every 2 seconds" in str(caught.value)


def test_bad_time_zones_catch_up_policies_and_names_say_what_to_pass() -> None:
    assert check_timezone("Europe/Berlin") == "Europe/Berlin"
    for zone in ("Mars/Olympus", "", None, "../etc/passwd"):
        with pytest.raises(UsageError, match="pass an IANA time zone name"):
            check_timezone(zone)
    for policy in ("latest", "all", "none"):
        assert check_catch_up(policy) == policy
    for policy in ("newest", None, "ALL"):
        with pytest.raises(UsageError, match="pass 'latest'"):
            check_catch_up(policy)
    for name in ("", "  ", None, "x" * 500):
        with pytest.raises(UsageError, match="a schedule name is a non-empty string"):
            check_schedule_name(name)


def test_six_fields_put_seconds_last_and_ticks_are_strictly_after() -> None:
    assert next_tick(EVERY_2S, "UTC", T0) == T0 + 2
    assert next_tick(EVERY_2S, "UTC", T0 + 0.5) == T0 + 2
    assert next_tick("*/5 * * * *", "UTC", T0 + 1) == T0 + 300


def test_a_daily_tick_keeps_its_wall_clock_time_across_dst() -> None:
    # Berlin springs forward on 2026-03-29: 09:00 is 08:00 UTC before it and 07:00 UTC after.
    first = next_tick("0 9 * * *", "Europe/Berlin", _utc(2026, 3, 28, 12))
    second = next_tick("0 9 * * *", "Europe/Berlin", first)
    assert (first, second) == (_utc(2026, 3, 29, 7), _utc(2026, 3, 30, 7))
    before = next_tick("0 9 * * *", "Europe/Berlin", _utc(2026, 3, 27, 12))
    assert before == _utc(2026, 3, 28, 8)
    assert next_tick("0 9 * * *", "UTC", _utc(2026, 3, 28, 12)) == _utc(2026, 3, 29, 9)


def test_a_ticks_run_id_is_the_schedules_name_and_the_tick_in_utc() -> None:
    tick = next_tick("0 9 * * *", "Europe/Berlin", _utc(2026, 6, 1))
    assert tick_run_id("report", tick) == "report@2026-06-01T07:00:00Z"


def _plan(catch_up: str, last: float, now: float, watched: list[tuple[float, float]]) -> object:
    return plan(
        cron=EVERY_2S,
        timezone="UTC",
        catch_up=catch_up,
        last_tick=last,
        next_due=next_tick(EVERY_2S, "UTC", last),
        now=now,
        watched=watched,
    )


@pytest.mark.parametrize("catch_up", ["latest", "all", "none"])
def test_a_tick_that_came_due_while_a_worker_ran_starts_however_late(catch_up: str) -> None:
    watched = [(T0, float("inf"))]
    assert _plan(catch_up, T0, T0 + 60, watched) == Advance(T0 + 2, True, T0 + 4)


def test_ticks_missed_while_no_worker_ran_start_per_catch_up() -> None:
    # No worker from T0 to T0 + 9; this one since then: ticks 2, 4, 6 and 8 were missed.
    watched = [(T0 + 9, float("inf"))]
    assert _plan("all", T0, T0 + 10, watched) == Advance(T0 + 2, True, T0 + 4)
    assert _plan("latest", T0, T0 + 10, watched) == Advance(T0 + 8, True, T0 + 10)
    assert _plan("none", T0, T0 + 10, watched) == Advance(T0 + 8, False, T0 + 10)
    # A worker that ran from T0 to T0 + 4.5 watched ticks 2 and 4: they start, then the gap.
    two = [(T0, T0 + 4.5), (T0 + 9, float("inf"))]
    assert _plan("none", T0, T0 + 10, two) == Advance(T0 + 2, True, T0 + 4)
    assert _plan("none", T0 + 4, T0 + 10, two) == Advance(T0 + 8, False, T0 + 10)


def test_nothing_is_planned_before_a_tick_and_next_due_is_kept_right() -> None:
    watched = [(T0, float("inf"))]
    assert _plan("latest", T0, T0 + 1.999, watched) is None
    stale = plan(
        cron=EVERY_2S,
        timezone="UTC",
        catch_up="latest",
        last_tick=T0,
        next_due=T0 + 0.5,  # as declaring again leaves it: due now, to be planned
        now=T0 + 1,
        watched=watched,
    )
    assert stale == Advance(T0, False, T0 + 2)


def test_a_tick_after_the_last_refresh_of_a_row_that_may_still_be_refreshed_waits() -> None:
    # A worker row refreshed at T0 + 1 that may still be refreshed: tick 2 may have come due
    # while it ran, so nothing is decided; once the row is stale it is a missed tick.
    watched = [(T0, T0 + 1), (T0 + 5, float("inf"))]
    unsure = [(T0 + 1, float("inf"))]
    for catch_up in ("latest", "none"):
        assert (
            plan(
                cron=EVERY_2S,
                timezone="UTC",
                catch_up=catch_up,
                last_tick=T0,
                next_due=T0 + 2,
                now=T0 + 6,
                watched=watched,
                unsure=unsure,
            )
            is None
        )
    assert _plan("all", T0, T0 + 6, watched) == Advance(T0 + 2, True, T0 + 4)
    assert _plan("latest", T0, T0 + 6, watched) == Advance(T0 + 4, True, T0 + 6)
    assert _plan("none", T0, T0 + 6, watched) == Advance(T0 + 4, False, T0 + 6)
