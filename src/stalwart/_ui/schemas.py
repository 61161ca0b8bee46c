"""The shapes of the HTTP API's requests and answers, from which the OpenAPI document is built.

Answers are the dictionaries of ``_wire`` (the JSON form the CLI's ``--json`` prints too); these
models describe them, and the API tests check every answer against the document. Times are ISO
8601 strings in UTC; recorded inputs, outputs and details are any JSON.
"""

from __future__ import annotations

import datetime as _dt
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ApprovalCount",
    "ApprovalList",
    "ApprovalRequest",
    "BreakerList",
    "DecideBody",
    "ErrorBody",
    "EventBody",
    "EventResult",
    "ForkBody",
    "Health",
    "Journal",
    "QueueList",
    "ResolveBody",
    "RunDetail",
    "RunPage",
    "ScheduleList",
    "Stats",
    "Status",
    "Text",
    "WorkerList",
]

Status = Literal[
    "pending", "running", "suspended", "completed", "failed", "cancelled", "needs_attention"
]

# What a store can keep: no NUL character (PostgreSQL text refuses it) and at most 10,000
# characters; anything else is a malformed request (400), checked before the store is asked.
NO_NUL = r"^[^\x00]*$"
Text = Annotated[str, Field(max_length=10_000, pattern=NO_NUL)]
Name = Annotated[str, Field(min_length=1, max_length=512, pattern=NO_NUL)]
Seq = Annotated[int, Field(ge=1, le=2**31 - 1)]


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- errors ---------------------------------------------------------------------------------


class ErrorDetail(_Answer):
    """What went wrong: ``type`` is a stalwart error class (``WorkflowNotFound``,
    ``InvalidOperation``, ``UnsafeFork``, ...) or an HTTP reason (``BadRequest``,
    ``Unauthorized``, ``NotFound``); ``message`` says it in words."""

    type: str
    message: str


class ErrorBody(_Answer):
    """Every error answer: ``{"error": {"type": ..., "message": ...}}``."""

    error: ErrorDetail


# -- runs -------------------------------------------------------------------------------------


class Usage(_Answer):
    """Tokens, cost and step attempts (a run's totals, or one journal entry's attempt);
    ``partial``: the totals miss an interrupted attempt's usage (a lower bound)."""

    input_tokens: int
    output_tokens: int
    cost: float
    attempts: int
    partial: bool


class RunInfo(_Answer):
    """A run as a list shows it; ``waiting_for`` is filled for pending and suspended runs."""

    workflow_id: str
    name: str
    status: Status
    queue: str
    created_at: _dt.datetime
    updated_at: _dt.datetime
    error: str | None
    waiting_for: str | None
    parent_id: str | None


class CurrentStep(_Answer):
    """The step a running run executes now: its attempt, start, last heartbeat and holder."""

    name: str
    seq: int
    attempt: int
    started_at: _dt.datetime
    heartbeat: Any
    holder: str | None


class RunDetail(_Answer):
    """A run as ``GET /runs/{id}`` shows it (and every successful write answers)."""

    workflow_id: str
    name: str
    status: Status
    queue: str
    created_at: _dt.datetime
    updated_at: _dt.datetime
    error: str | None
    waiting_for: str | None
    current: CurrentStep | None
    usage: Usage
    parent_id: str | None


class EventResult(RunDetail):
    """The run after an event, and whether the event was ``delivered`` (``false``: a repeat of
    a ``dedup_key`` the run already got, ignored)."""

    delivered: bool


class RunPage(_Answer):
    """A page of runs, newest first. ``more`` says whether older runs match; pass
    ``next_before`` as ``before`` to get them. ``counts`` is how many runs have each status
    with the other filters (name, queue, since) applied, whatever ``status`` and ``before``."""

    runs: list[RunInfo]
    more: bool
    next_before: str | None
    counts: dict[str, int]


class Entry(_Answer):
    """One journal entry: a step attempt, a wait, an event, an operator action, ... ``id``
    grows with each entry of the store (pass the last one you have as ``after``)."""

    id: int
    seq: int | None
    kind: str
    name: str
    status: str
    attempt: int
    started_at: _dt.datetime | None
    finished_at: _dt.datetime | None
    input: Any
    output: Any
    error: str | None
    by: str | None
    usage: Usage | None
    idempotency_key: str | None


class Journal(_Answer):
    """A run's journal, in order (with ``after``: its entries since that id; with ``limit``: at
    most that many, ``more`` saying whether others follow). ``total`` is how many entries the
    whole journal has."""

    workflow_id: str
    entries: list[Entry]
    more: bool
    total: int


# -- approvals and the fleet ----------------------------------------------------------------


class Decision(_Answer):
    """Who approved or rejected a request, when and why."""

    approved: bool
    by: str
    reason: str | None
    decided_at: _dt.datetime


class ApprovalRequest(_Answer):
    """An approval a run asked for, and its ``decision`` (``null`` while it waits)."""

    workflow_id: str
    approval_id: str
    subject: str
    details: Any
    requested_at: _dt.datetime
    expires_at: _dt.datetime | None
    decision: Decision | None


class ApprovalList(_Answer):
    """Approval requests, oldest first."""

    approvals: list[ApprovalRequest]


class ApprovalCount(_Answer):
    """How many approval requests wait for a decision."""

    pending: int


class Queue(_Answer):
    """A queue: its limits (``null``: none) and its pending and running runs, fleet-wide."""

    name: str
    concurrency: int | None
    rate: int | None
    period: float
    pending: int
    running: int


class QueueList(_Answer):
    """Every queue apps declared or runs use."""

    queues: list[Queue]


class Worker(_Answer):
    """A worker process, as its last lease renewal left it."""

    id: str
    host: str
    pid: int
    queues: list[str]
    started_at: _dt.datetime
    seen_at: _dt.datetime
    running: int


class WorkerList(_Answer):
    """The live workers of the store."""

    workers: list[Worker]


class Schedule(_Answer):
    """A schedule: the workflow its ticks start, when, and what it does after an outage."""

    name: str
    workflow: str
    cron: str
    timezone: str
    catch_up: str
    next_tick: _dt.datetime


class ScheduleList(_Answer):
    """The schedules of the store, by name."""

    schedules: list[Schedule]


class Breaker(_Answer):
    """A circuit breaker: ``closed``, ``open`` or ``half_open``."""

    name: str
    state: str
    failures: int
    opened_at: _dt.datetime | None
    retry_at: _dt.datetime | None


class BreakerList(_Answer):
    """The breakers that have counted a failure."""

    breakers: list[Breaker]


class Health(_Answer):
    """The server answers: its version, its store (password masked) and what needs the
    token."""

    ok: bool
    version: str
    store: str
    reads_need_token: bool


class StatsBucket(_Answer):
    """One interval of the window: runs created in it, and runs that ended in it by status."""

    start: _dt.datetime
    started: int
    finished: dict[str, int]


class StepStats(_Answer):
    """A step's attempts in the window, how many failed, and the median and 95th percentile
    of their durations (nearest rank, of an even sample past 10,000 timed attempts; ``null``
    without a timed attempt)."""

    name: str
    attempts: int
    failures: int
    p50_ms: float | None
    p95_ms: float | None


class WorkflowStats(_Answer):
    """A workflow's runs created in the window, with what their attempts recorded so far."""

    name: str
    runs: int
    input_tokens: int
    output_tokens: int
    cost: float


class QueueDepth(_Answer):
    """A queue's pending and running runs now."""

    name: str
    pending: int
    running: int


class Stats(_Answer):
    """What the console's overview draws for a window (``1h``, ``24h`` or ``7d``)."""

    window: Literal["1h", "24h", "7d"]
    buckets: list[StatsBucket]
    steps: list[StepStats]
    workflows: list[WorkflowStats]
    queues: list[QueueDepth]


# -- request bodies ---------------------------------------------------------------------------


class DecideBody(_Body):
    """``approve`` and ``reject``: a reason, and which request when the run has several."""

    reason: Text | None = None
    approval_id: Name | None = None


class ResolveBody(_Body):
    """``resolve``: the in-doubt step's ``seq`` and either ``result`` (what happened, any JSON,
    ``null`` included) or ``"rerun": true``."""

    seq: Seq
    result: Any = None
    rerun: bool = False


class ForkBody(_Body):
    """``fork``: where the new run starts executing, its id, and whether completed
    irreversible steps may run again."""

    from_seq: Seq
    new_id: Name | None = None
    allow_reexecute: bool = False


class EventBody(_Body):
    """``events``: the event's name, its payload (any JSON) and a dedup key."""

    name: Name
    payload: Any = None
    dedup_key: Name | None = None


class EmptyBody(_Body):
    """``cancel`` and ``retry`` take no fields (``{}``, or no body at all)."""
