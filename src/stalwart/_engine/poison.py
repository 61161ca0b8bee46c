"""The poison rule: a run that kills its worker at the same point ``max_recoveries`` times in
a row is stopped instead of crash-looping the fleet (rolled back first when it has completed
compensable steps; sent to an operator when its rollback is what keeps crashing)."""

from __future__ import annotations

import logging
from typing import Any

from .._errors import CorruptRecord
from .._model import ErrorRecord, ErrorType, RunStatus
from .._runtime import Runtime
from .._store import Entry, RunRow
from .children import cancel_children
from .compensation import Undo, interruption, pending_compensations
from .executor import rollback_state
from .interrupted import last_seen
from .lifecycle import lifecycle
from .poison_charge import charge_breakers, interrupted_attempts

__all__ = ["stop_poison_run"]

log = logging.getLogger("stalwart")


def stop_poison_run(runtime: Runtime, row: RunRow, crashes: int, owner: str) -> bool:
    """Stop a run whose worker died at the same point ``crashes`` times in a row; ``True``
    when the run must be invoked once more (by ``owner``, who holds it) to end.

    A run with completed compensable steps is rolled back like any failure before it is
    failed: the next invocation runs its compensations and then ends it ``failed``. A run
    whose rollback itself keeps crashing its worker goes to ``needs_attention`` (never to
    ``failed`` with compensations still pending). Otherwise it is failed here."""
    wid = row.workflow_id
    now = runtime.clock.time()
    try:
        plan = pending_compensations(
            runtime.store.compensation_plan(wid), codec=runtime.codec, workflow_id=wid
        )
        rollback = runtime.store.rollback_in_progress(wid)
        then = None if rollback is None else rollback_state(runtime, wid, rollback)[0]
    except CorruptRecord as exc:
        detail = ErrorRecord.of(exc, reason=str(exc), seq=exc.seq)
        _finish_poisoned(runtime, wid, RunStatus.NEEDS_ATTENTION, detail, owner=owner, now=now)
        log.error("run %s: %s", wid, exc)
        return False
    if rollback is not None:
        if not plan:  # only the rollback's ending is left to record
            return True
        state = {"then": then}
        _rollback_crashed(runtime, wid, plan[0], state=state, crashes=crashes, owner=owner, now=now)
        return False
    if plan:
        detail = _crashed_error(runtime, crashes)
        entry = lifecycle(
            "rolling_back",
            now,
            output=runtime.codec.encode({"then": RunStatus.FAILED, "detail": detail.to_json()}),
        )
        charged = interrupted_attempts(runtime, row, now)
        if not runtime.store.append_many(wid, [*charged, entry], owner=owner):
            return False  # another process took the run meanwhile
        charge_breakers(runtime, charged, now)
        log.warning(
            "run %s: crashed its worker %d times; rolling it back before failing it",
            wid,
            crashes,
        )
        return True
    cancel_children(runtime, wid, by=f"parent {wid}")
    error = _crashed_error(runtime, crashes)
    charged = interrupted_attempts(runtime, row, now)
    _finish_poisoned(runtime, wid, RunStatus.FAILED, error, owner=owner, now=now, charged=charged)
    log.warning("run %s: failed after crashing its worker %d times", wid, crashes)
    return False


def _crashed_error(runtime: Runtime, crashes: int) -> ErrorRecord:
    return ErrorRecord(
        ErrorType.WORKER_CRASHED,
        f"crashed its worker {crashes} times: each recovery found it where the last one "
        "left it, so it was failed instead of crash-looping the fleet "
        f"(max_recoveries={runtime.max_recoveries})",
    )


def _rollback_crashed(
    runtime: Runtime,
    wid: str,
    undo: Undo,
    *,
    state: dict[str, Any],
    crashes: int,
    owner: str,
    now: float,
) -> None:
    """The compensation ``undo`` crashed its worker ``crashes`` times in a row: charge
    its interrupted attempt and hand the run to an operator, who retries it to continue
    the rollback with a fresh budget."""
    row = runtime.store.get_run(wid)
    retrying, seen = (row.retrying, last_seen(row)) if row else (None, None)
    charged = interruption(undo, retrying, now, final=True, seen=seen)
    if charged is not None and not runtime.store.append(wid, charged, owner=owner):
        return  # another process took the run meanwhile
    reason = (
        f"the compensation of step {undo.name!r} (seq {undo.seq}) crashed its worker "
        f"{crashes} times in a row, so the rollback stopped instead of crash-looping the "
        f"fleet (max_recoveries={runtime.max_recoveries}); fix the cause, then retry "
        "the run to continue the rollback"
    )
    error = ErrorRecord(
        ErrorType.COMPENSATION_FAILED,
        reason,
        reason=reason,
        seq=undo.seq,
        then=state.get("then", RunStatus.FAILED),
    )
    _finish_poisoned(runtime, wid, RunStatus.NEEDS_ATTENTION, error, owner=owner, now=now)
    log.warning("run %s: %s", wid, reason)


def _finish_poisoned(
    runtime: Runtime,
    wid: str,
    status: str,
    error: ErrorRecord,
    *,
    owner: str,
    now: float,
    charged: list[Entry] | None = None,
) -> None:
    entry = Entry.ended(status, now, output=None, error=error)
    text = error.to_json()
    ended = runtime.store.finish_run(
        wid,
        owner=owner,
        status=status,
        output=None,
        error=text,
        now=now,
        entry=entry,
        charged=charged or (),
    )
    if ended and charged:
        charge_breakers(runtime, charged, now)
