"""Public value types and the vocabulary of statuses and journal kinds."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime as _dt
import json
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from . import _inputs
from ._errors import StoreError, UsageError

__all__ = [
    "ENDED",
    "STATUSES",
    "TERMINAL",
    "Approval",
    "ApprovalRequest",
    "Breaker",
    "BreakerState",
    "Budget",
    "CurrentStep",
    "EntryKind",
    "EntryStatus",
    "ErrorRecord",
    "ErrorType",
    "JournalEntry",
    "OutcomeKind",
    "QueueInfo",
    "RunDetail",
    "RunStatus",
    "Schedule",
    "SharedWrite",
    "SnapshotRef",
    "Usage",
    "Versioned",
    "WorkerInfo",
    "WorkflowInfo",
    "from_epoch",
    "run_id",
    "to_epoch",
]


class RunStatus(StrEnum):
    """Where a run is in its lifecycle (``runs.status``)."""

    PENDING = "pending"
    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    NEEDS_ATTENTION = "needs_attention"


TERMINAL = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})
STATUSES = tuple(status.value for status in RunStatus)  # plain words: click shows them


class EntryKind(StrEnum):
    """What a journal entry records."""

    STEP = "step"
    SLEEP = "sleep"
    EVENT = "event"
    APPROVAL = "approval"
    NOW = "now"
    UUID = "uuid"
    RANDOM = "random"
    RUN = "run"  # the run's own milestones: started, rolling_back, finished, needs_attention
    COMPENSATION = "compensation"
    OPERATOR = "operator"  # what a person did: retry, cancel, resolve, fork, an event
    CHILD = "child"  # a child run this run started, and how it ended once the run saw it
    SHARED = "shared"  # a read or compare-and-set of the shared context
    PATCH = "patch"  # a patched() point this run reached with the code that has the patch
    SEND = "send"  # an event this run sent another run, and whether it was delivered


class EntryStatus(StrEnum):
    """How a journal entry ended (a scheduled wait has not ended yet)."""

    COMPLETED = "completed"
    REUSED = "reused"  # a fork's copy of a step it did not run again
    FAILED = "failed"
    SCHEDULED = "scheduled"
    IN_DOUBT = "in_doubt"
    COMPENSATED = "compensated"


class OutcomeKind(StrEnum):
    """How one invocation of a run ended, as the lifecycle driver sees it."""

    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    NEEDS_ATTENTION = "needs_attention"
    SUSPENDED = "suspended"
    WAKE = "wake"  # suspended, but what it waits for is already there: invoke again
    RELEASED = "released"  # given back at a step boundary (worker shutting down)
    LEASE_LOST = "lease_lost"
    ABORT = "abort"  # the engine could not go on (a corrupt record, a store failure)


ENDED = frozenset(
    {OutcomeKind.COMPLETED, OutcomeKind.FAILED, OutcomeKind.CANCELLED, OutcomeKind.NEEDS_ATTENTION}
)  # the outcomes after which the run has a result (or a reason) to read


class ErrorType(StrEnum):
    """The error types the engine itself records (a step's own failure records the
    exception's class name instead)."""

    IN_DOUBT = "InDoubt"
    COMPENSATION_FAILED = "CompensationFailed"
    WORKER_CRASHED = "WorkerCrashed"
    CORRUPT_RECORD = "CorruptRecord"
    ATTEMPT_INTERRUPTED = "AttemptInterrupted"
    REDRIVEN = "Redriven"
    RESOLVED_RERUN = "ResolvedRerun"
    WORKFLOW_CANCELLED = "WorkflowCancelled"
    BUDGET_EXCEEDED = "BudgetExceeded"
    LOOP_DETECTED = "LoopDetected"


@dataclass(frozen=True, slots=True)
class ErrorRecord:
    """A recorded failure reason: a run's ``error`` or a journal entry's.

    Stored as JSON with the same keys (``to_json``/``from_json`` are its one encoder and its
    one decoder). ``final`` means no attempt is left; ``retry_at`` is when the next attempt
    may start; ``rerun`` marks an in-doubt step an operator chose to run again; ``seq`` names
    the entry a run-level reason is about; ``then`` is the status a rollback ends in;
    ``directed`` says who set the delay before the next attempt when the server did (or the
    step, with ``RetryAfter``), e.g. ``"Retry-After: 7 s"``.
    """

    type: str
    message: str = ""
    final: bool = False
    retry_at: float | None = None
    rerun: bool = False
    seq: int | None = None
    reason: str | None = None
    then: str | None = None
    directed: str | None = None

    @classmethod
    def of(cls, error: BaseException, **fields: Any) -> ErrorRecord:
        """The record of an exception: its class name and message."""
        return cls(type=type(error).__name__, message=str(error), **fields)

    def to_json(self) -> str:
        """The stored form; fields at their default are left out."""
        data: dict[str, Any] = {"type": str(self.type), "message": self.message}
        for name in ("final", "retry_at", "rerun", "seq", "reason", "then", "directed"):
            value = getattr(self, name)
            if value is not None and value is not False:
                data[name] = str(value) if name == "then" else value
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str, opener: Callable[[bytes], bytes] | None = None) -> ErrorRecord:
        """Decode a stored record; ``ValueError`` saying why when it is not one.

        An encrypted store keeps the message sealed (``sealed``, base64) and ``encrypted
        (key k1)`` as the message; ``opener`` (a keyring's) restores it where it can."""
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"the recorded error is not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise ValueError(f"the recorded error {data!r} is not an error record")
        sealed = data.get("sealed")
        if opener is not None and isinstance(sealed, str):
            with contextlib.suppress(StoreError, ValueError):  # the key is not here: as stored
                data["message"] = opener(base64.b64decode(sealed)).decode("utf-8", "replace")
        fields: dict[str, Any] = {}
        for name, types in _ERROR_FIELDS.items():
            value = data.get(name)
            if value is None:
                continue
            if not isinstance(value, types) or (types != (bool,) and isinstance(value, bool)):
                raise ValueError(
                    f"the recorded error's {name} {value!r} is not a {types[0].__name__}"
                )
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"the recorded error's retry_at {value!r} is not a time")
            fields[name] = value
        fields.setdefault("type", "Error")
        return cls(**fields)

    def text(self) -> str:
        """How a person reads it: ``Type: message``, and who set the retry's delay."""
        text = f"{self.type}: {self.message}"
        return text if self.directed is None else f"{text} [{self.directed}]"


_ERROR_FIELDS: dict[str, tuple[type, ...]] = {
    "type": (str,),
    "message": (str,),
    "final": (bool,),
    "retry_at": (int, float),
    "rerun": (bool,),
    "seq": (int,),
    "reason": (str,),
    "then": (str,),
    "directed": (str,),
}


def from_epoch(seconds: float | None) -> _dt.datetime | None:
    """A UTC datetime for epoch ``seconds``."""
    return None if seconds is None else _dt.datetime.fromtimestamp(seconds, _dt.UTC)


def to_epoch(when: _dt.datetime | float) -> float:
    """Epoch seconds for a datetime (naive ones are taken as UTC) or a number."""
    if isinstance(when, _dt.datetime):
        if when.tzinfo is None:
            when = when.replace(tzinfo=_dt.UTC)
        return when.timestamp()
    return float(when)


@dataclass(frozen=True)
class WorkflowInfo:
    """A run as listed by ``app.list_workflows``."""

    workflow_id: str
    name: str
    status: str
    queue: str
    created_at: _dt.datetime
    updated_at: _dt.datetime
    error: str | None
    parent_id: str | None = None  # the run that started this one as its child


@dataclass(frozen=True)
class CurrentStep:
    """The step a running run executes now, as its holder last published it: the step's
    name, seq and attempt, when the attempt started, the details of its last
    ``stalwart.heartbeat`` (``None`` if none) and the id of the worker holding the run
    (``web-3-8121-1f0c``, as :class:`WorkerInfo` and the logs name it)."""

    name: str
    seq: int
    attempt: int
    started_at: _dt.datetime
    heartbeat: Any
    holder: str | None


@dataclass(frozen=True)
class RunDetail:
    """One run as an operator sees it (``app.describe``): its :class:`WorkflowInfo`, what it
    waits on (``"timer until T"``, ``"event NAME"``, ``"approval SUBJECT"``, ``"breaker
    NAME"``, ``"queue Q"``, ``"child ID"``, else ``None``), the step it executes now, and its
    usage."""

    info: WorkflowInfo
    waiting_for: str | None
    current: CurrentStep | None
    usage: Usage


@dataclass(frozen=True)
class QueueInfo:
    """A queue: its declared limits (``None``: unlimited) and how many of its runs are
    ``pending`` and ``running`` now, fleet-wide."""

    name: str
    concurrency: int | None
    rate: int | None
    period: float
    pending: int
    running: int


@dataclass(frozen=True)
class WorkerInfo:
    """A worker process serving the store: its id (``host-pid-suffix``, such as
    ``web-3-8121-1f0c``: the short host name, the pid and a random suffix, new at every
    start), host name and pid, the queues it serves, when it started, when it was last seen,
    and how many runs it executes."""

    id: str
    host: str
    pid: int
    queues: list[str]
    started_at: _dt.datetime
    seen_at: _dt.datetime
    running: int


@dataclass(frozen=True)
class Budget:
    """What a run may spend: tokens (input plus output), cost, step attempts, and how often
    one step may be called with the same arguments. Checked before each step attempt, so the
    attempt that would go past a limit does not start."""

    max_tokens: int | None = None
    max_cost: float | None = None
    max_steps: int | None = None
    max_repeats: int | None = None

    def __post_init__(self) -> None:
        # Each limit is checked by the rule every limit follows: inf (or None) is no limit.
        for name in ("max_tokens", "max_steps", "max_repeats"):
            object.__setattr__(self, name, _inputs.count(getattr(self, name), name, "Budget"))
        cost = _inputs.number(self.max_cost, "max_cost", "Budget", positive=True)
        object.__setattr__(self, "max_cost", cost)

    def to_dict(self) -> dict[str, Any]:
        """The limits that are set, as the journal records them."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


@dataclass(frozen=True)
class Breaker:
    """A circuit breaker shared by every worker of the fleet (its state lives in the store).

    After ``failures`` failed attempts within ``window`` seconds, across all runs, it opens:
    attempts of its steps do not start, and their runs wait on a durable timer without
    spending an attempt. After ``cooldown`` seconds one attempt fleet-wide probes
    (half-open): its success closes the breaker, its failure opens it again."""

    name: str
    failures: int = 5
    window: float = 60.0
    cooldown: float = 30.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip() or ":" in self.name:
            raise UsageError(
                f"Breaker(name={self.name!r}): pass a non-empty name without ':', such as 'openai'"
            )
        _inputs.name(self.name, "name", "Breaker")
        failures = self.failures
        if isinstance(failures, bool) or not isinstance(failures, int) or failures < 1:
            raise UsageError(f"Breaker(failures={failures!r}): pass an int >= 1")
        for field in ("window", "cooldown"):  # lengths of time the fleet counts: finite
            seconds = _inputs.seconds(getattr(self, field), field, "Breaker", positive=True)
            object.__setattr__(self, field, seconds)


@dataclass(frozen=True)
class BreakerState:
    """A breaker as the fleet sees it: ``state`` is ``"closed"``, ``"open"`` or
    ``"half_open"``; ``failures`` counts the failed attempts inside its window; ``retry_at``
    is when an open breaker lets a probe start (half-open: when an unfinished probe counts as
    failed)."""

    name: str
    state: str
    failures: int
    opened_at: _dt.datetime | None
    retry_at: _dt.datetime | None


@dataclass(frozen=True)
class Usage:
    """What model calls used: tokens in and out, cost (in the currency of the app's prices)
    and the step attempts counted (``app.usage`` sums a run; a journal entry holds one
    attempt's). ``partial``: the totals miss what an attempt interrupted by a crash (or left
    in doubt) used, of a step that records usage, so they are a lower bound."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    attempts: int = 0
    partial: bool = False

    def __radd__(self, other: object) -> Usage:
        if other == 0:  # sum() starts from 0
            return self
        return NotImplemented

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cost + other.cost,
            self.attempts + other.attempts,
            self.partial or other.partial,
        )

    def to_json(self, model: str | None = None) -> str:
        """One attempt's usage as the journal keeps it."""
        data: dict[str, Any] = {"in": self.input_tokens, "out": self.output_tokens}
        if self.cost:
            data["cost"] = self.cost
        if model is not None:
            data["model"] = model
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> Usage:
        """One attempt's usage from the journal; ``ValueError`` when it is not one."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"the recorded usage {text[:60]!r} is not a usage record")
        tokens_in, tokens_out, cost = data.get("in", 0), data.get("out", 0), data.get("cost", 0.0)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (tokens_in, tokens_out)):
            raise ValueError(f"the recorded usage {text[:60]!r} has no token counts")
        if isinstance(cost, bool) or not isinstance(cost, int | float):
            raise ValueError(f"the recorded usage {text[:60]!r} has no cost")
        return cls(tokens_in, tokens_out, float(cost), 1)


@dataclass(frozen=True)
class JournalEntry:
    """One entry of a run's audit trail (see ``app.journal``)."""

    seq: int | None
    kind: str
    name: str
    status: str
    attempt: int | None
    started_at: _dt.datetime | None
    finished_at: _dt.datetime | None
    input: Any
    output: Any
    error: str | None
    by: str | None
    usage: Usage | None = None  # what this attempt's model calls used
    idempotency_key: str | None = None  # the key the step (or its compensation) used
    id: int = 0  # grows with each entry of the store: app.journal(after=) pages by it


@dataclass(frozen=True)
class Approval:
    """A human decision on an approval request."""

    approved: bool
    by: str
    reason: str | None
    decided_at: _dt.datetime


@dataclass(frozen=True)
class ApprovalRequest:
    """A pending or decided approval request."""

    workflow_id: str
    approval_id: str
    subject: str
    details: Any
    requested_at: _dt.datetime
    expires_at: _dt.datetime | None
    decision: Approval | None


MAX_ID_LENGTH = 512


def run_id(given: Any, *, label: str = "workflow_id") -> str:
    """``given`` checked as a run id, or a fresh one when it is ``None``."""
    if given is None:
        return uuid.uuid4().hex
    if not isinstance(given, str) or not given or len(given) > MAX_ID_LENGTH:
        shown = given if not isinstance(given, str) else f"{given[:40]!r}... ({len(given)} chars)"
        raise UsageError(
            f"{label}={shown if len(repr(given)) > 60 else repr(given)}: a run id is a non-empty "
            f"string of at most {MAX_ID_LENGTH} characters"
        )
    return _inputs.name(given, label)


@dataclass(frozen=True)
class Versioned:
    """A shared key's value and its version: 0 (and value ``None``) for a key never written,
    then 1, 2, ... one per write. Pass ``version`` back as ``if_version`` to write only if
    nobody wrote in between."""

    value: Any
    version: int


@dataclass(frozen=True)
class SharedWrite:
    """One write of a shared key, as ``app.shared_history`` keeps it: the ``version`` it
    made, the ``value`` written, ``by`` whom (the writing run's id, or the ``by`` of
    ``app.shared_set``) and ``at`` what time."""

    key: str
    version: int
    value: Any
    by: str
    at: _dt.datetime


@dataclass(frozen=True)
class SnapshotRef:
    """A workspace snapshot (``stalwart.snapshot``): its ``id``, its ``name``, how many
    regular ``files`` it holds and their total size in ``bytes``, what it added to the store
    (``stored_bytes``: compressed chunks no earlier snapshot had) and when it was taken
    (``created_at``, UTC). A step may return it; pass it to ``stalwart.restore``."""

    id: str
    name: str
    files: int
    bytes: int
    stored_bytes: int
    created_at: _dt.datetime


@dataclass(frozen=True)
class Schedule:
    """A schedule as the store keeps it: its name, the workflow its ticks start, its cron
    expression and time zone, its catch-up policy (``"latest"``, ``"all"`` or ``"none"``),
    and the next tick the fleet will start, an aware datetime in the schedule's time zone (in
    the past while no worker runs; its run id is ``"<name>@<tick in UTC>"``)."""

    name: str
    workflow: str
    cron: str
    timezone: str
    catch_up: str
    next_tick: _dt.datetime
