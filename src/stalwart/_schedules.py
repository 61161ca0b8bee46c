"""``app.schedule``, ``app.schedules()`` and ``app.unschedule``: schedules kept in the store.

Declaring checks everything a worker will need (the workflow, its arguments, the cron
expression, the time zone, the catch-up policy) and writes one row; the workers of the fleet
fire it (``_ticks``). Any process of the app may declare, list or remove schedules.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any
from zoneinfo import ZoneInfo

from . import _inputs
from ._cron import (
    check_catch_up,
    check_cron,
    check_schedule_name,
    check_timezone,
    next_tick,
)
from ._declare import definition_of, encode_args
from ._errors import InvalidOperation, RegistrationError, UsageError
from ._model import Schedule
from ._runtime import READ_ONLY_DECLARATIONS, Runtime
from ._store.base import ScheduleRow

__all__ = ["Schedules"]


def _view(row: ScheduleRow) -> Schedule:
    tick = next_tick(row.cron, row.timezone, row.last_tick)
    return Schedule(
        name=row.name,
        workflow=row.workflow,
        cron=row.cron,
        timezone=row.timezone,
        catch_up=row.catch_up,
        next_tick=_dt.datetime.fromtimestamp(tick, ZoneInfo(row.timezone)),
    )


class Schedules:
    """The schedule methods of :class:`~stalwart.Stalwart`."""

    _runtime: Runtime

    def schedule(
        self,
        wf: Any,
        cron: str,
        *,
        name: str | None = None,
        args: tuple[Any, ...] | list[Any] = (),
        kwargs: dict[str, Any] | None = None,
        timezone: str = "UTC",
        catch_up: str = "latest",
    ) -> Schedule:
        """Start a run of ``wf`` at every tick of ``cron`` (five fields, or six with seconds
        last, as croniter reads them, or an alias such as ``"@daily"``) in ``timezone``, kept
        in the store: declaring a schedule of the same ``name`` (default: the workflow's name)
        again updates it and keeps its last started tick. Each tick starts one run,
        ``"<name>@YYYY-MM-DDTHH:MM:SSZ"`` (the tick in UTC), fleet-wide; ticks missed while no
        worker ran start per ``catch_up``: ``"latest"`` only the newest, ``"all"`` each,
        ``"none"`` none (docs/schedules.md)."""
        try:
            definition = definition_of(self._runtime, wf)
        except RegistrationError:
            raise RegistrationError(
                f"app.schedule({wf!r}): no workflow of that name is registered on this app; "
                "pass a function decorated with @app.workflow (or the name it registers)"
            ) from None
        name = check_schedule_name(definition.name if name is None else name)
        check_cron(cron)
        check_timezone(timezone)
        check_catch_up(catch_up)
        if not isinstance(args, tuple | list):
            raise UsageError(f"app.schedule({name!r}): args={args!r}: pass a tuple of arguments")
        if kwargs is not None and not isinstance(kwargs, dict):
            raise UsageError(f"app.schedule({name!r}): kwargs={kwargs!r}: pass a dict or None")
        try:
            payload = encode_args(self._runtime, definition, tuple(args), dict(kwargs or {}))
        except TypeError as exc:
            raise UsageError(
                f"app.schedule({name!r}): args={tuple(args)!r}, kwargs={kwargs!r} do not fit "
                f"workflow {definition.name!r}{definition.signature}: {exc}"
            ) from None
        now = self._runtime.clock.time()
        if READ_ONLY_DECLARATIONS.get():  # stalwart check: what it would declare, unwritten
            tick = next_tick(cron, timezone, now)
            return Schedule(
                name, definition.name, cron, timezone, catch_up,
                _dt.datetime.fromtimestamp(tick, ZoneInfo(timezone)),
            )  # fmt: skip
        self._runtime.store.declare_schedule(
            name,
            workflow=definition.name,
            cron=cron,
            timezone=timezone,
            catch_up=catch_up,
            input=payload,
            now=now,
            next_due=next_tick(cron, timezone, now),
        )
        found = [s for s in self.schedules() if s.name == name]
        if not found:  # removed by another process since
            raise InvalidOperation(f"schedule {name!r} was removed while it was declared")
        return found[0]

    def schedules(self) -> list[Schedule]:
        """Every schedule in the store, by name, with its next tick
        (``stalwart schedules``)."""
        return [_view(row) for row in self._runtime.store.list_schedules()]

    def unschedule(self, name: str) -> None:
        """Remove schedule ``name``: no tick of it starts after this returns (its runs
        already started are left as they are). :class:`InvalidOperation` if there is none."""
        if not isinstance(name, str):
            raise TypeError(f"name={name!r}: pass the schedule's name")
        _inputs.name(name, "name", "app.unschedule")
        if not self._runtime.store.drop_schedule(name):
            known = ", ".join(repr(s.name) for s in self.schedules()) or "none"
            raise InvalidOperation(
                f"no schedule named {name!r} (schedules: {known}; list them with "
                "app.schedules() or `stalwart schedules`)"
            )
