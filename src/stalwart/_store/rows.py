"""The typed rows the store verbs return (frozen dataclasses, never tuples), and ``Entry``,
the journal entry the engine hands them to write."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypeVar

from .._model import EntryKind, EntryStatus, ErrorRecord, Usage

if TYPE_CHECKING:
    from .ingress import IngressCount

__all__ = [
    "ApprovalRow",
    "BreakerRow",
    "ChildRedrive",
    "CompensationRow",
    "CountRow",
    "Entry",
    "ForkCandidate",
    "IndexRow",
    "JournalRow",
    "LeaseAsk",
    "LeaseClaim",
    "LiveNameRow",
    "NewRun",
    "QueueLimits",
    "QueueRow",
    "ReplayState",
    "RunRow",
    "SharedRow",
    "SharedSet",
    "SpendRow",
    "StatsRows",
    "UsageRow",
    "WaitDecision",
    "WorkerRow",
    "as_kwargs",
    "changed",
]

R = TypeVar("R")


_READERS: dict[type, tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]] = {}


def _reader(row_type: type) -> tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]:
    known = _READERS.get(row_type)
    if known is None:
        names = tuple(f.name for f in fields(row_type))
        known = _READERS[row_type] = (names, attrgetter(*names))
    return known


def as_kwargs(row: Any) -> dict[str, Any]:
    """A dataclass row's fields by name (a row of two fields or more; each of them an
    ``__init__`` argument), read in one call rather than one a field: a run's creation and
    its end take it."""
    names, read = _reader(type(row))
    return dict(zip(names, read(row), strict=True))


def changed(row: R, **changes: Any) -> R:
    """``dataclasses.replace(row, **changes)`` for a row ``as_kwargs`` can read, at about
    half its cost."""
    values = as_kwargs(row)
    values.update(changes)
    return type(row)(**values)


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """A queue's declared limits, applied by every worker of the app."""

    concurrency: int | None = None
    rate: int | None = None
    period: float = 1.0


@dataclass(frozen=True, slots=True)
class RunRow:
    """A run as stored."""

    workflow_id: str
    name: str
    status: str
    queue: str
    priority: int
    input: bytes | None
    output: bytes | None
    error: str | None
    created_at: float
    updated_at: float
    lease_owner: str | None
    lease_expires_at: float | None
    wake_at: float | None = None
    waiting_for: str | None = None
    deadline: float | None = None
    cancel_requested: int = 0
    retrying: str | None = None  # "seq:attempt" of the last retry that began
    progress: bytes | None = None  # the last heartbeat's details, encoded
    current_step: str | None = None  # JSON: the step its holder executes now
    trace_context: str | None = None  # the caller's W3C trace context at start, as JSON
    parent_id: str | None = None  # the run that started this one as its child


@dataclass(frozen=True, slots=True)
class ApprovalRow:
    """An approval request as stored."""

    workflow_id: str
    approval_id: str
    subject: str
    details: bytes | None
    requested_at: float
    expires_at: float | None
    decided_at: float | None
    approved: int | None
    by: str | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class IndexRow:
    """One journal row as replay needs it: no inputs, outputs still as stored references."""

    seq: int
    position: str
    kind: str
    name: str
    status: str
    attempt: int | None
    output: bytes | None
    error: str | None
    input: bytes | None = None  # only for scheduled waits: what they wait for


@dataclass(frozen=True, slots=True)
class ReplayState:
    """What executing a run reads first: its replay index and the rollback in progress."""

    index: list[IndexRow]
    rollback: bytes | None  # as ``rollback_in_progress`` says


@dataclass(frozen=True, slots=True)
class JournalRow:
    """One journal row for the audit trail, payloads resolved to their encoded bytes."""

    id: int
    seq: int | None
    kind: str
    name: str
    status: str
    attempt: int | None
    started_at: float | None
    finished_at: float | None
    input: bytes | None
    output: bytes | None
    error: str | None
    by: str | None
    position: str | None = None
    usage: str | None = None  # JSON: what a step attempt used


@dataclass(frozen=True, slots=True)
class ChildRedrive:
    """A child run a parent's retry reopens with it: the child, the parent it must still
    have, and the entries its journal gets."""

    workflow_id: str
    parent_id: str
    entries: list[Entry]


@dataclass(frozen=True, slots=True)
class Entry:
    """A journal entry to append, never changed once built. ``input``/``output`` are encoded
    payloads; ``error`` and ``usage`` (with ``model``, the model that usage was priced by) are
    values the store encodes where it writes the row (``ErrorRecord.to_json``,
    ``Usage.to_json``)."""

    kind: EntryKind
    name: str
    status: EntryStatus
    seq: int | None = None
    position: str | None = None
    attempt: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    input: bytes | None = None
    output: bytes | None = None
    error: ErrorRecord | None = None
    by: str | None = None
    compensable: bool = False
    usage: Usage | None = None  # what a step attempt used
    model: str | None = None  # the model its usage came from

    @classmethod
    def milestone(
        cls,
        name: str,
        now: float,
        *,
        failed: bool = False,
        input: bytes | None = None,
        output: bytes | None = None,
        error: ErrorRecord | None = None,
        by: str | None = None,
    ) -> Entry:
        """A milestone of the run itself (started, resumed, suspended, rolling_back, its end)."""
        return cls(
            kind=EntryKind.RUN,
            name=name,
            status=EntryStatus.FAILED if failed else EntryStatus.COMPLETED,
            started_at=now,
            finished_at=now,
            input=input,
            output=output,
            error=error,
            by=by,
        )

    @classmethod
    def ended(
        cls, status: str, now: float, *, output: bytes | None, error: ErrorRecord | None
    ) -> Entry:
        """The end of a run that ends ``status`` (a run status): ``finished`` (failed unless it
        completed), or ``needs_attention``."""
        attention = status == "needs_attention"
        return cls.milestone(
            "needs_attention" if attention else "finished",
            now,
            failed=status != "completed",
            output=output,
            error=error,
        )

    @classmethod
    def operator(cls, action: str, now: float, *, by: str, input: bytes | None = None) -> Entry:
        """What an operator did to the run (``action``: retry, cancel, fork...), and who."""
        return cls(
            kind=EntryKind.OPERATOR,
            name=action,
            status=EntryStatus.COMPLETED,
            started_at=now,
            finished_at=now,
            input=input,
            by=by,
        )

    @classmethod
    def reset(
        cls,
        kind: EntryKind,
        name: str,
        now: float,
        *,
        seq: int | None,
        position: str | None,
        error: ErrorRecord,
    ) -> Entry:
        """A fresh attempt budget (attempt 0, failed with ``error``) for a step or a
        compensation an operator redrives."""
        return cls(
            kind=kind,
            name=name,
            status=EntryStatus.FAILED,
            seq=seq,
            position=position,
            attempt=0,
            started_at=now,
            finished_at=now,
            error=error,
        )


@dataclass(frozen=True, slots=True)
class LeaseAsk:
    """One claim of ``take_leases``: the arguments of ``take_lease``."""

    workflow_id: str
    owner: str
    expected_owner: str | None
    now: float
    lease_until: float
    entry: Entry | None = None
    recovery: bool = False
    holder_gone: bool = False
    limits: QueueLimits | None = None
    replay: bool = False


@dataclass(frozen=True, slots=True)
class LeaseClaim:
    """What ``take_lease`` decided."""

    taken: bool
    # For a recovery, how many recoveries in a row found the run with no more completed
    # journal entries than the previous one (1 when it made progress since); 0 otherwise.
    recoveries: int = 0
    # The run's replay state, read in the claim's own round trip where the store could (asked
    # with ``take_lease(replay=True)``); ``None``: read it with ``replay_state``.
    replay: ReplayState | None = None


@dataclass(frozen=True, slots=True)
class CompensationRow:
    """A journal row of a compensable step or of a compensation, payloads resolved."""

    id: int
    seq: int
    position: str
    name: str
    status: str
    attempt: int | None
    input: bytes | None
    output: bytes | None
    kind: str
    error: str | None


@dataclass(frozen=True, slots=True)
class ForkCandidate:
    """A positioned journal row a fork may reuse."""

    id: int
    seq: int
    position: str
    kind: str
    name: str
    status: str
    compensable: int


@dataclass(frozen=True, slots=True)
class UsageRow:
    """What one step attempt used, as the journal keeps it (``usage`` may be ``None``); its
    ``error`` says whether a crash interrupted it (``in_doubt`` rows are not attempts of
    their own: they mark one interrupted or abandoned)."""

    seq: int | None
    status: str
    usage: str | None
    name: str = ""
    error: str | None = None


@dataclass(frozen=True, slots=True)
class SpendRow:
    """A run's running totals (``run_spend``): what its attempts used, whether a crash lost
    some of it (``partial``), the input of the last operator retry that may give it a budget
    (resolved), whether the totals cover the run since it started (``since_start``: else it
    was journaled before the totals were kept, and its journal is what counts), and whether
    its calls are counted (``counts_calls``, see ``count_calls``)."""

    input_tokens: int
    output_tokens: int
    cost: float
    attempts: int
    partial: bool
    budget_input: bytes | None
    since_start: bool
    counts_calls: bool = False


@dataclass(frozen=True, slots=True)
class CountRow:
    """How many runs of one queue are in one status."""

    queue: str
    status: str
    runs: int


@dataclass(frozen=True, slots=True)
class QueueRow:
    """A queue's limits as an app declared them."""

    name: str
    concurrency: int | None
    rate: int | None
    period: float


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """A worker process serving the store, as its last renewal left it."""

    id: str
    host: str
    pid: int
    queues: str  # JSON list
    started_at: float
    seen_at: float
    running: int
    workflows: str | None = None  # JSON list; None: a worker of an older release (any workflow)


@dataclass(frozen=True, slots=True)
class BreakerRow:
    """A circuit breaker as stored, with its failed attempts inside the window."""

    name: str
    state: str  # "closed", "open" or "half_open"
    window_seconds: float
    opened_at: float | None
    retry_at: float | None  # open: when a probe may start
    probe_owner: str | None  # half_open: the attempt probing
    probe_until: float | None  # half_open: when an unfinished probe counts as failed
    failures: int


@dataclass(frozen=True, slots=True)
class WaitDecision:
    """What decided a wait: ``winner`` is ``"event"``, ``"approval"`` or ``"timer"``, or
    ``"none"`` (nothing yet) or ``"lost"`` (the lease is gone or the wait was decided)."""

    winner: str
    data: bytes | None = None


@dataclass(frozen=True, slots=True)
class SharedRow:
    """One write of a shared key as stored; the latest one is the key's current value."""

    key: str
    version: int
    value: bytes  # the encoded value (payloads resolved)
    by: str
    at: float


@dataclass(frozen=True, slots=True)
class SharedSet:
    """What a compare-and-set of a shared key decided: ``version`` is the version it wrote,
    ``None`` when ``if_version`` no longer matched; ``held`` is ``False`` when the writing
    run's lease was lost (then nothing was written)."""

    held: bool
    version: int | None


@dataclass(frozen=True, slots=True)
class LiveNameRow:
    """How many runs of one workflow name in one queue have not ended."""

    queue: str
    name: str
    runs: int


@dataclass(frozen=True, slots=True)
class StatsRows:
    """What the console's overview draws for a window, as the store counted it.

    ``started``: (bucket, runs created in it); ``finished``: (bucket, status, runs that ended
    in it with that status), a bucket being ``width`` seconds from ``since``; ``steps``: (step
    name, attempts, failed attempts, p50 and p95 seconds of the attempts with both times,
    nearest rank, of a sample past 10,000 such attempts); ``workflows``: (workflow name, runs
    created, input tokens, output tokens, cost their attempts recorded so far)."""

    started: list[tuple[int, int]]
    finished: list[tuple[int, str, int]]
    steps: list[tuple[str, int, int, float | None, float | None]]
    workflows: list[tuple[str, int, int, int, float]]


@dataclass(frozen=True, slots=True)
class NewRun:
    """A run to create (``create_runs``): ``create_run``'s arguments, one run's worth."""

    workflow_id: str
    name: str
    status: str
    queue: str
    priority: int
    input: bytes
    now: float
    owner: str | None
    lease_until: float | None
    entry: Entry
    deadline: float | None = None
    trace_context: str | None = None
    count: IngressCount | None = None
