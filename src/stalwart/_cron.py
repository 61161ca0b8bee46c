"""Schedules as pure values: checking a declaration, the ticks of a cron expression in a time
zone, the run id of a tick, and what a worker does next about a due schedule.

Ticks are computed by ``croniter`` from a time-zone-aware start, so a daily ``0 9 * * *`` in
``Europe/Berlin`` is 09:00 Berlin time on both sides of a DST change (08:00 UTC in winter,
07:00 UTC in summer). Nothing here reads a clock or touches the store.
"""

from __future__ import annotations

import datetime as _dt
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from . import _inputs
from ._errors import UsageError

__all__ = [
    "ALIASES",
    "CATCH_UP",
    "MAX_NAME_LENGTH",
    "Advance",
    "check_catch_up",
    "check_cron",
    "check_schedule_name",
    "check_timezone",
    "next_tick",
    "plan",
    "tick_run_id",
]

CATCH_UP = ("latest", "all", "none")
# croniter's names for common expressions ("@daily" is "0 0 * * *"), in any case.
ALIASES = ("@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually")
_ID_SUFFIX = len("@YYYY-MM-DDTHH:MM:SSZ")
MAX_NAME_LENGTH = 512 - _ID_SUFFIX  # a tick's run id is "<name>@<tick>", at most 512 chars
_CRON_HINT = (
    "pass five fields (minute hour day-of-month month day-of-week), or six with seconds "
    "last, as croniter reads them: '*/5 * * * *' is every 5 minutes, '* * * * * */2' every "
    "2 seconds; or one of the aliases " + ", ".join(repr(a) for a in ALIASES)
)


def check_cron(cron: Any) -> str:
    """``cron`` checked: five or six fields that croniter accepts and that ever match, or
    one of croniter's :data:`ALIASES`."""
    if isinstance(cron, str) and cron.lower() in ALIASES:
        return cron
    if not isinstance(cron, str) or len(cron.split()) not in (5, 6):
        raise UsageError(f"cron={cron!r}: {_CRON_HINT}")
    fields = cron.split()
    if len(fields) == 6 and fields[5] == "*" and fields[0] != "*":
        raise UsageError(
            f"cron={cron!r}: the sixth field is the seconds, and '*' there starts a run every "
            "second of each minute the first field matches; seconds go last here (Quartz "
            "and Spring put them first: move them to the end), e.g. '* * * * * */10' is "
            "every 10 seconds, '0 9 * * 1-5 0' 09:00 on weekdays"
        )
    try:
        croniter(cron, _dt.datetime(2000, 1, 1, tzinfo=_dt.UTC)).get_next(float)
    except CroniterError as exc:
        raise UsageError(f"cron={cron!r}: {exc}; {_CRON_HINT}") from None
    return cron


def check_timezone(timezone: Any) -> str:
    """``timezone`` checked: an IANA time zone name."""
    hint = "pass an IANA time zone name such as 'UTC', 'Europe/Berlin' or 'America/New_York'"
    if not isinstance(timezone, str) or not timezone:
        raise UsageError(f"timezone={timezone!r}: {hint}")
    try:
        _zone(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise UsageError(f"timezone={timezone!r}: no such time zone; {hint}") from None
    return timezone


def check_catch_up(catch_up: Any) -> str:
    """``catch_up`` checked: one of :data:`CATCH_UP`."""
    if catch_up not in CATCH_UP or not isinstance(catch_up, str):
        raise UsageError(
            f"catch_up={catch_up!r}: pass 'latest' (start only the newest tick missed while "
            "no worker ran), 'all' (start each) or 'none' (start none)"
        )
    return catch_up


def check_schedule_name(name: Any) -> str:
    """``name`` checked: a non-empty string short enough for its ticks' run ids."""
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_LENGTH:
        raise UsageError(
            f"name={name!r}: a schedule name is a non-empty string of at most "
            f"{MAX_NAME_LENGTH} characters (its runs are named '<name>@<tick>')"
        )
    return _inputs.name(name, "name", "app.schedule")


@functools.lru_cache(maxsize=64)
def _zone(timezone: str) -> ZoneInfo:
    return ZoneInfo(timezone)


def next_tick(cron: str, timezone: str, after: float) -> float:
    """The first tick strictly after epoch ``after``, in epoch seconds."""
    start = _dt.datetime.fromtimestamp(after, _zone(timezone))
    return float(croniter(cron, start).get_next(float))


def _prev_tick(cron: str, timezone: str, before: float) -> float:
    """The last tick strictly before epoch ``before``."""
    start = _dt.datetime.fromtimestamp(before, _zone(timezone))
    return float(croniter(cron, start).get_prev(float))


def tick_run_id(name: str, tick: float) -> str:
    """The run id of a schedule's tick: ``"<name>@YYYY-MM-DDTHH:MM:SSZ"``, the tick in UTC."""
    return f"{name}@{_dt.datetime.fromtimestamp(tick, _dt.UTC):%Y-%m-%dT%H:%M:%SZ}"


@dataclass(frozen=True)
class Advance:
    """What to write for a due schedule: its last tick becomes ``tick`` (its run created when
    ``start``) and it is next due at ``next_due``."""

    tick: float
    start: bool
    next_due: float


def plan(
    *,
    cron: str,
    timezone: str,
    catch_up: str,
    last_tick: float,
    next_due: float,
    now: float,
    watched: Sequence[tuple[float, float]],
    unsure: Sequence[tuple[float, float]] = (),
) -> Advance | None:
    """The next thing to do about a schedule at ``now``; ``None`` when nothing is due, or when
    what to do cannot be told yet.

    ``watched`` are the spans of time during which a worker is known to have run (the
    caller's own span runs to now). A tick inside one came due while a worker ran: it is
    started, however late. ``unsure`` are the spans during which a worker may have run (after
    the last refresh of a worker row that may still be refreshed): a tick inside one waits
    (``None``) until that worker's row is refreshed past it or goes stale. Consecutive ticks
    outside every span came due while no worker ran: ``catch_up`` says which of them start
    (``latest``: the newest, ``all``: each, ``none``: none). One tick (or one stretch of
    unwatched ticks) per call; the caller writes it and asks again.
    """
    tick = next_tick(cron, timezone, last_tick)
    if tick > now:  # not due yet: only say when it will be, if the store does not know
        return None if tick == next_due else Advance(last_tick, False, tick)
    if catch_up == "all" or any(start <= tick <= end for start, end in watched):
        return Advance(tick, True, next_tick(cron, timezone, tick))
    if any(start <= tick <= end for start, end in unsure):
        return None
    # The stretch of unwatched ticks ends where the next span starts (the caller's, at the
    # latest), or now.
    starts = [start for start, _end in [*watched, *unsure] if start > tick]
    until = min(starts, default=now)
    newest = max(tick, _prev_tick(cron, timezone, min(until, now + 1e-6)))
    return Advance(newest, catch_up == "latest", next_tick(cron, timezone, newest))
