"""Circuit breakers shared by the fleet. Before an attempt of a step with a breaker starts,
the breaker's state is read from the store: closed, the attempt runs; open, the run suspends
on a durable timer until the cooldown ends (no attempt is spent, no worker held); after the
cooldown, one attempt fleet-wide takes the probe (half-open) and the others wait for it.
Every recorded failure counts in the store's sliding window; the probe's outcome closes or
reopens the breaker, and closing wakes the runs waiting on it."""

from __future__ import annotations

import logging

from .._model import Breaker
from .._store.base import BreakerStore
from .invocation import Invocation

__all__ = ["admit", "count_failure", "report"]

log = logging.getLogger("stalwart")

# A run woken early (the breaker is still open) waits at least this long before it looks again.
_MIN_WAIT = 0.1


def admit(inv: Invocation, breaker: Breaker, attempt: str) -> str | None:
    """Let ``attempt`` start, or suspend the run until the breaker may let it; returns
    ``attempt`` when it is the half-open probe."""
    store: BreakerStore = inv.runtime.store
    name = breaker.name
    now = inv.runtime.clock.time()
    row = store.breaker(name, now=now)
    if row is None or row.state == "closed":
        return None
    if row.state == "half_open" and (row.probe_until or 0.0) <= now:
        if store.expire_probe(name, now=now, cooldown=breaker.cooldown):
            log.warning("breaker %s: its probe did not finish in time; open again", name)
        row = store.breaker(name, now=now)  # open as of the probe's deadline, or taken again
        if row is None or row.state == "closed":
            return None
    if row.state == "open" and (row.retry_at or 0.0) <= now:
        until = now + inv.runtime.lease_seconds
        if store.take_probe(name, probe=attempt, now=now, until=until):
            log.info("breaker %s: half-open, run %s probes", name, inv.workflow_id)
            return attempt
        row = store.breaker(name, now=now)
    if row is None or row.state == "closed":
        return None
    if row.state == "open":
        wake = row.retry_at or 0.0
    else:  # another attempt probes: it may fail (open again) long before its deadline
        wake = min(row.probe_until or 0.0, now + breaker.cooldown)
    raise inv.suspend(wake_at=max(wake, now + _MIN_WAIT), waiting_for=f"breaker:{name}")


def report(
    inv: Invocation, breaker: Breaker, probe: str | None, *, ok: bool, started: float | None = None
) -> bool:
    """An attempt's outcome: a failure counts in the window (and may open the breaker); the
    probe's success closes it. True when the breaker is open after a failure (its runs wait
    for it, so the failure is not the run's last attempt). A failure of an attempt that
    ``started`` before the breaker last closed is old news and is not counted."""
    store: BreakerStore = inv.runtime.store
    name = breaker.name
    now = inv.runtime.clock.time()
    if ok:
        if probe is not None and store.breaker_succeeded(name, probe=probe, now=now):
            log.info("breaker %s: closed, its probe succeeded", name)
        return False
    if count_failure(store, breaker, probe, now=now, started=started):
        return True
    row = store.breaker(name, now=now)
    return row is not None and row.state != "closed"


def count_failure(
    store: BreakerStore,
    breaker: Breaker,
    probe: str | None,
    *,
    now: float,
    started: float | None = None,
) -> bool:
    """Count a failed attempt in ``breaker``'s window (see :func:`report`); True, and said in
    the log, when it opened the breaker."""
    opened = store.breaker_failed(
        breaker.name,
        now=now,
        failures=breaker.failures,
        window=breaker.window,
        cooldown=breaker.cooldown,
        probe=probe,
        started=started,
    )
    if opened:
        log.warning(
            "breaker %s: open (%s); its steps wait %gs before one probe",
            breaker.name,
            "the probe failed" if probe else f"{breaker.failures} failures in {breaker.window:g}s",
            breaker.cooldown,
        )
    return opened
