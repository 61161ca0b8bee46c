"""The step attempt a poison run's last crash interrupted, charged when the run is failed.

A recovery charges the attempt a crash interrupted when its replay reaches the step
(``steps.py``); a run the poison rule fails is not replayed, so the attempt in flight at its
last crash is found from what the run's row and journal say instead: the run's retry mark
(``seq:attempt``, written as a step's retry began) or the step its holder published, when
the journal's latest row of that step is the failed attempt just before it. That attempt is
journaled as an ``AttemptInterrupted`` failure, with its real start when the holder published
it, in the transaction that fails the run, so budgets, breakers and ``app.usage`` count it.
"""

from __future__ import annotations

import logging

from .._model import EntryKind, EntryStatus, ErrorRecord, ErrorType
from .._runtime import Runtime
from .._store import Entry, RunRow
from .._store.base import JournalRow
from .breakers import count_failure
from .interrupted import interrupted_span, last_seen

__all__ = ["charge_breakers", "interrupted_attempts"]

log = logging.getLogger("stalwart")


def interrupted_attempts(runtime: Runtime, row: RunRow, now: float) -> list[Entry]:
    """The failed entries charging the step attempts ``row``'s last crash interrupted (none
    when neither its retry mark nor its published step names one this code can place)."""
    seen = last_seen(row)
    wanted: list[tuple[int, int]] = []
    if row.retrying and not row.retrying.startswith("undo:"):
        try:
            seq, attempt = (int(part) for part in row.retrying.split(":"))
        except ValueError:
            seq, attempt = 0, 0
        if attempt >= 2:
            wanted.append((seq, attempt))
    if seen is not None and not seen.undo and (seen.seq, seen.attempt) not in wanted:
        wanted.append((seen.seq, seen.attempt))
    if not wanted:
        return []
    latest: dict[int, JournalRow] = {}
    for entry in runtime.store.journal(row.workflow_id):
        if entry.kind == EntryKind.STEP and entry.seq is not None:
            latest[entry.seq] = entry
    charged = []
    for seq, attempt in wanted:
        before = latest.get(seq)
        if before is None or before.position is None or not _retried_after(before, attempt):
            continue
        started, alive, said = interrupted_span(seen, seq=seq, attempt=attempt, now=now)
        detail = ErrorRecord(
            ErrorType.ATTEMPT_INTERRUPTED,
            f"{said}: its process stopped before the outcome was recorded",
        )
        charged.append(
            Entry(
                kind=EntryKind.STEP,
                name=before.name,
                status=EntryStatus.FAILED,
                seq=seq,
                position=before.position,
                attempt=attempt,
                started_at=started,
                finished_at=alive,
                input=before.input,
                error=detail,
            )
        )
    return charged


def _retried_after(before: JournalRow, attempt: int) -> bool:
    """Whether ``before`` is the failed, retried attempt just before ``attempt``."""
    if before.status != EntryStatus.FAILED or before.attempt != attempt - 1 or not before.error:
        return False
    try:
        return not ErrorRecord.from_json(before.error).final
    except ValueError:
        return False


def charge_breakers(runtime: Runtime, charged: list[Entry], now: float) -> None:
    """Count the charged attempts as failures of their steps' breakers, as a recorded
    failure of an attempt is counted."""
    for entry in charged:
        step = runtime.registry.step(entry.name)
        breaker = None if step is None else step.breaker
        if breaker is None:
            continue
        try:
            count_failure(runtime.store, breaker, None, now=now)
        except Exception:  # the run is failed already; its breaker misses one failure
            log.warning("breaker %s: counting a crashed attempt failed", breaker.name)
