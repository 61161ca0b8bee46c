"""When an attempt a crash interrupted really ran, read after the crash at no cost to the hot
path.

The lease keeper already publishes the step its run executes now on the run's row (its name,
seq, attempt and start, for operators; a step shorter than one poll is never published), and
with it the holder's lease length. The lease's expiry, renewed by the keeper and by each
heartbeat, then says when the holder was last alive: ``lease_expires_at - lease_seconds``. A
recovery reads both from the row it takes over, so the interrupted attempt is journaled with
its real start and "interrupted after ~N s" instead of the recovery's time and no duration.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .._format import duration
from .._store import RunRow

__all__ = ["LastSeen", "interrupted_span", "last_seen"]


@dataclass(frozen=True, slots=True)
class LastSeen:
    """The attempt a run's holder published before it stopped, and when it was last alive."""

    seq: int
    attempt: int
    undo: bool  # a compensation's attempt, not the step's
    started_at: float
    alive_at: float


def last_seen(row: RunRow) -> LastSeen | None:
    """What ``row`` (a run taken over from a holder that stopped) says about the attempt in
    flight; ``None`` when it published none, or not in a form this code reads."""
    if not row.current_step:
        return None
    try:
        step = json.loads(row.current_step)
        seq, attempt, started = int(step["seq"]), int(step["attempt"]), float(step["started_at"])
        lease = step.get("lease_seconds")
    except (ValueError, KeyError, TypeError):
        return None
    alive = started
    if isinstance(lease, int | float) and row.lease_expires_at is not None:
        alive = max(started, row.lease_expires_at - float(lease))
    return LastSeen(seq, attempt, bool(step.get("undo")), started, alive)


def interrupted_span(
    seen: LastSeen | None, *, seq: int, attempt: int, now: float, undo: bool = False
) -> tuple[float, float, str]:
    """The interrupted attempt ``attempt`` of ``seq``: when it started, when it was last seen
    alive (both ``now`` when unknown) and the words for it ("interrupted after ~1.4s")."""
    if seen is None or (seen.seq, seen.attempt, seen.undo) != (seq, attempt, undo):
        return now, now, f"attempt {attempt} was interrupted"
    alive = min(seen.alive_at, now)
    took = duration(max(0.0, alive - seen.started_at))
    return seen.started_at, alive, f"attempt {attempt} was interrupted after ~{took}"
