"""The store contract: atomic verbs over runs, their journal and payloads.

Every verb is one transaction. Verbs that change a run the caller executes carry the caller's
lease ``owner`` and do nothing (returning ``False``) when the caller no longer holds the lease,
so a worker that lost its lease can never overwrite the new holder's records. Every verb
returns a typed row (a frozen dataclass of ``rows.py``), a scalar or a list of them, never a
tuple.

The verbs are split by what they concern, so that a layer can ask for the narrowest role:

- ``RunStore``: the store itself (lifetime, clock, change detector) and runs as rows: create,
  read, list, finish. Everything that reads or ends a run needs it.
- ``LeaseStore``: who executes a run. Claiming (what is claimable, candidates, due wake-ups,
  dead holders on this host, cancel requests for the holder), taking, renewing and giving
  back a lease. Queue limits live here because they are checked when a lease is taken.
- ``JournalStore``: the journal a run appends while it holds its lease, and the views the
  engine replays from it (the replay index, the audit trail, the compensation plan, a
  rollback in progress). Compensation goes here, not with the operator verbs: the engine
  asks for the plan during execution, and it is a query over the journal.
- ``WaitStore``: durable waits: suspending a run, opening and resolving a wait, and the two
  things a wait waits for, events and approvals.
- ``AdminStore``: operator actions on a run nobody executes: cancel, redrive (retry and
  resolve), fork. ``list_runs`` stays with runs: it is a read model, not an action.
- ``ReadStore``: the fleet: the queues apps declared, the workers serving the store (each
  refreshes its row as it renews leases).
- ``BreakerStore``: circuit breakers shared by the fleet: their failures in a sliding window,
  opening, the one half-open probe, closing (which wakes the runs waiting on the breaker).
- ``SharedStore``: the shared context: versioned keys, each write kept as a history row unique
  on (key, version), written by compare-and-set (journaled with the writer's entry when a run
  writes).
- ``PruneStore`` (``prunes.py``): deleting ended runs with everything kept for them, and
  collecting the content-addressed rows no run uses any more.
- ``SnapshotStore`` (``snapshots.py``): workspace snapshots: content-addressed chunks, a row
  per snapshot found by its run, its tree's entries and the chunks it uses.
- ``StreamStore``: the chunks runs emit, written in batches by lease holders and read by
  offset (``streams.py``).

Each role's reads are a read role of ``read_roles.py`` that it extends (``RunStore`` extends
``RunReads``, ``JournalStore`` ``JournalReads``, ``WaitStore`` ``ApprovalReads``,
``BreakerStore`` ``BreakerReads``, ``ReadStore`` ``FleetReads``); ``ReadModelStore`` is all of
them, what the read models type their store as.

Run status transitions, each done by one verb whose ``WHERE`` clause holds the precondition
(``held``: ``lease_owner = owner``):

======================  ==================================  =================================
verb                    from (precondition)                 to
======================  ==================================  =================================
``create_run``          (no run with the id)                ``pending``, or ``running`` held
``fork_run``            (no run with the new id)            ``pending``
``take_lease``          claimable, ``lease_owner`` as seen  ``running`` held by the caller
``suspend_run``         ``running``, held; not yet arrived  ``suspended``, no lease
``release_run``         ``running``, held                   ``pending``, no lease
``finish_run``          ``running``, held                   ``completed`` / ``failed`` /
                                                            ``cancelled`` / ``needs_attention``
``cancel_run``          ``pending`` / ``suspended`` /       ``cancelled`` (nothing to undo), or
                        ``needs_attention``, no lease       ``pending`` + cancel flag (undo
                                                            first; from ``needs_attention``)
``redrive``             ``failed`` / ``needs_attention``    ``pending``, no lease
======================  ==================================  =================================

Claimable (defined once, the ``claimable`` fragment of ``sql/queries.sql``): pending or
running without a live lease (none, lapsed, or its holder seen gone), or suspended and due.
Verbs that keep the status: ``release_lease`` (drops the lease; a ``running`` run left so is
recovered by its next taker), ``renew_lease``, ``record_progress``, ``mark_retry``, and the
wake-ups inside ``deliver_event`` / ``decide_approval`` (a waiting run becomes due now).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from .._errors import StoreError
from .._model import ErrorRecord
from .changes import Changes
from .coordination import ChildStore, MessageStore, SharedStore
from .ingress import IngressCount, IngressRow, IngressStore
from .keys import KeyStore
from .prunes import PruneStore
from .read_roles import (
    ApprovalReads,
    BreakerReads,
    FleetReads,
    JournalReads,
    ReadModelStore,
    RunReads,
)
from .rows import (
    ApprovalRow,
    BreakerRow,
    ChildRedrive,
    CompensationRow,
    CountRow,
    Entry,
    ForkCandidate,
    IndexRow,
    JournalRow,
    LeaseAsk,
    LeaseClaim,
    LiveNameRow,
    NewRun,
    QueueLimits,
    QueueRow,
    ReplayState,
    RunRow,
    SharedRow,
    SharedSet,
    StatsRows,
    UsageRow,
    WaitDecision,
    WorkerRow,
)
from .schedules import ScheduledRun, ScheduleRow, ScheduleStore
from .snapshots import SnapshotStore
from .streams import ChunkRow, NewChunk, RunChunks, StreamStore
from .versions import SchemaVersion, VersionStore

# Set while ``stalwart check`` imports an app: its queue and schedule declarations are checked
# but not written, and its store is opened without being migrated (an older schema is refused),
# so checking a release against the production store changes nothing there.
READ_ONLY_DECLARATIONS: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "stalwart_read_only_declarations", default=False
)


class MissingStore(StoreError):
    """Opened read-only (``READ_ONLY_DECLARATIONS``), a SQLite URL named a file that is not
    there, and none was made; ``path`` is that file, absolute."""

    def __init__(self, message: str, *, path: Path) -> None:
        super().__init__(message)
        self.path = path


class UnmigratedStore(StoreError):
    """Opened read-only (``READ_ONLY_DECLARATIONS``), a store whose schema is older than this
    code (``current`` 0: no stalwart schema at all), which is not migrated to find out."""

    def __init__(self, message: str, *, url: str, current: int) -> None:
        super().__init__(message)
        self.url = url
        self.current = current


__all__ = [
    "AdminStore",
    "ApprovalReads",
    "ApprovalRow",
    "BreakerReads",
    "BreakerRow",
    "BreakerStore",
    "ChildRedrive",
    "ChildStore",
    "ChunkRow",
    "CompensationRow",
    "CountRow",
    "CursorStore",
    "Entry",
    "FleetReads",
    "ForkCandidate",
    "IndexRow",
    "IngressCount",
    "IngressRow",
    "IngressStore",
    "JournalReads",
    "JournalRow",
    "JournalStore",
    "LeaseAsk",
    "LeaseClaim",
    "LeaseStore",
    "LiveNameRow",
    "MissingStore",
    "NewChunk",
    "NewRun",
    "OperatorStore",
    "PruneStore",
    "QueueLimits",
    "QueueRow",
    "ReadModelStore",
    "ReadStore",
    "ReplayState",
    "RunChunks",
    "RunReads",
    "RunRow",
    "RunStore",
    "ScheduleRow",
    "ScheduleStore",
    "ScheduledRun",
    "SchemaVersion",
    "SharedRow",
    "SharedSet",
    "SharedStore",
    "SnapshotStore",
    "StatsRows",
    "Store",
    "StreamStore",
    "UnmigratedStore",
    "UsageRow",
    "VersionStore",
    "WaitDecision",
    "WaitStore",
    "WorkerRow",
]

# The schema version this code writes; a store records the oldest code version it serves.
SCHEMA_VERSION = 27


class RunStore(RunReads, Protocol):
    """The store itself, and runs as rows."""

    url: str
    durable: bool
    changes: Changes  # how this process's threads wait for the store to change
    stream_changes: Changes  # what stream readers wait on: chunks written, and ``changes``

    def close(self) -> None:
        """Release connections."""

    def reserve_connections(self, threads: int) -> None:
        """Make room for ``threads`` threads using the store at once (where that matters)."""

    def release_memory(self) -> None:
        """Free what the store's connections cache and can read again (where that matters)."""

    def clock_offset(self) -> float | None:
        """How far the store's clock is ahead of this machine's: 0.0 for a store on this
        machine, ``None`` when a server does not answer now."""

    def data_version(self) -> int:
        """Changes whenever another connection commits (a cheap change detector)."""

    def create_run(
        self,
        *,
        workflow_id: str,
        name: str,
        status: str,
        queue: str,
        priority: int,
        input: bytes,
        now: float,
        owner: str | None,
        lease_until: float | None,
        entry: Entry,
        deadline: float | None = None,
        trace_context: str | None = None,
        count: IngressCount | None = None,
    ) -> bool:
        """Insert a run (and its first journal entry); ``False`` if the id exists. With
        ``count``, the same transaction adds one to that subscription's accepted count."""

    def create_runs(self, runs: Sequence[NewRun]) -> list[bool]:
        """``create_run`` of each run, in one transaction; whether each was created (``False``:
        its id exists, nothing written for it). Returns once that transaction committed."""

    def finish_run(
        self,
        workflow_id: str,
        *,
        owner: str,
        status: str,
        output: bytes | None,
        error: str | None,
        now: float,
        entry: Entry,
        charged: Sequence[Entry] = (),
        ties: bool = True,
    ) -> bool:
        """End a held running run with ``status`` (terminal or ``needs_attention``), release
        the lease, close its pending approvals and journal it (after ``charged``: attempts
        its ending charges, such as the one a crash interrupted). ``ties=False``: the caller
        knows the run has no parent to wake and no approval to close."""

    async def finish_run_async(
        self,
        workflow_id: str,
        *,
        owner: str,
        status: str,
        output: bytes | None,
        error: str | None,
        now: float,
        entry: Entry,
        charged: Sequence[Entry] = (),
        ties: bool = True,
    ) -> bool:
        """``finish_run`` for a caller on an event loop: the loop goes on while the run's end
        waits for its commit."""


class LeaseStore(Protocol):
    """Who executes a run: claims, leases and the queue limits a start must fit."""

    def claimable(self, workflow_id: str, *, now: float, holder_gone: bool = False) -> bool:
        """Whether a worker may take the run now (``holder_gone``: the caller saw the lease
        holder's process gone, so its lease counts as lapsed)."""

    def claim_candidates(
        self, *, names: list[str], queues: list[str], now: float, limit: int
    ) -> list[RunRow]:
        """Claimable runs of these workflows and queues, best first: takeovers, then due
        wake-ups, then new runs, each by priority and age; each the whole row, as ``get_run``
        reads it."""

    def held_on_host(self, *, host_prefix: str, names: list[str]) -> list[RunRow]:
        """Running runs held by processes whose owner id starts with ``host_prefix``, each
        the whole row, as ``get_run`` reads it."""

    def next_wake(self, *, names: list[str], queues: list[str]) -> float | None:
        """The earliest ``wake_at`` of a suspended run."""

    def next_start(self, queue: str, limits: QueueLimits) -> float | None:
        """When the queue's rate next lets a run start (``None``: it has no rate)."""

    def take_lease(
        self,
        workflow_id: str,
        *,
        owner: str,
        expected_owner: str | None,
        now: float,
        lease_until: float,
        entry: Entry | None = None,
        recovery: bool = False,
        holder_gone: bool = False,
        limits: QueueLimits | None = None,
        replay: bool = False,
    ) -> LeaseClaim:
        """Take the lease of a claimable run whose owner is still ``expected_owner``.

        With ``limits``, a pending or suspended run starts only within its queue's limits.
        With ``recovery``, count the recoveries in a row (see ``LeaseClaim``). With
        ``replay``, the store may read the run's ``replay_state`` with the claim, where that
        costs no round trip of its own, and return it in ``LeaseClaim.replay``."""

    def take_leases(self, asks: Sequence[LeaseAsk]) -> list[LeaseClaim | Exception]:
        """``take_lease`` of each of ``asks``, together (the claims share transactions), in
        order: what each decided, or the error it failed with (the others stand)."""

    def renew_lease(self, workflow_id: str, *, owner: str, lease_until: float) -> bool | None:
        """Extend a held lease: ``None`` if it was lost, else whether cancel was requested."""

    def record_progress(
        self,
        workflow_id: str,
        *,
        owner: str,
        progress: bytes | None,
        now: float,
        lease_until: float,
    ) -> bool:
        """Store a step's heartbeat details and extend the lease."""

    def publish_step(self, workflow_id: str, *, owner: str, current: str | None) -> bool:
        """Say which step the holder executes now (JSON), for operators; ``None``: none.
        The run's end (``finish_run``, ``cancel_run``) and ``redrive`` clear it: a recovery
        must not date an interrupted attempt from a previous life of the run."""

    def release_lease(self, workflow_id: str, *, owner: str, now: float) -> bool:
        """Give up a held lease, leaving the run's status as it is."""

    def release_run(self, workflow_id: str, *, owner: str, now: float) -> bool:
        """Give a held run back as ``pending`` (a graceful stop, not a recovery)."""

    def cancel_requested_for(self, owner_prefix: str) -> set[str]:
        """Runs held by owners starting with ``owner_prefix`` that were asked to cancel."""


class JournalStore(JournalReads, Protocol):
    """A run's journal: what its holder appends (and reads, ``JournalReads``)."""

    def append(
        self,
        workflow_id: str,
        entry: Entry,
        *,
        owner: str | None,
        chunks: Sequence[NewChunk] = (),
    ) -> bool:
        """Append a journal entry; with ``owner``, only while that owner holds the lease, and
        with the stream ``chunks`` emitted before it in the same transaction."""

    async def append_async(self, workflow_id: str, entry: Entry, *, owner: str) -> bool:
        """``append`` of an entry of a held run, for a caller on an event loop: the loop goes
        on while the entry waits for its commit."""

    def append_many(
        self,
        workflow_id: str,
        entries: list[Entry],
        *,
        owner: str,
        chunks: Sequence[NewChunk] = (),
    ) -> bool:
        """Append several entries in one transaction, fenced by the lease (with ``chunks``
        as ``append``)."""

    def mark_retry(self, workflow_id: str, *, owner: str, marker: str) -> bool:
        """Note on a held run that a step's retry began (``seq:attempt``)."""

    def count_calls(self, workflow_id: str) -> None:
        """From now on count the run's calls by step and arguments (``run_calls``), the calls
        it journaled before included; idempotent."""


class WaitStore(ApprovalReads, Protocol):
    """Durable waits, and the events and approvals they wait for."""

    def suspend_run(
        self,
        workflow_id: str,
        *,
        owner: str,
        wake_at: float | None,
        waiting_for: str | None,
        now: float,
        entry: Entry | None = None,
    ) -> bool:
        """Suspend and release the lease, unless what the run waits for already arrived."""

    def open_wait(
        self,
        workflow_id: str,
        entry: Entry,
        *,
        owner: str,
        approval: dict[str, Any] | None = None,
    ) -> bool:
        """Journal a wait as scheduled, with its approval request if any."""

    def resolve_wait(
        self,
        workflow_id: str,
        entry: Entry,
        *,
        owner: str,
        event_name: str | None = None,
        approval_id: str | None = None,
        time_out: bool = False,
        now: float = 0.0,
        encode_decision: Callable[[ApprovalRow], bytes] | None = None,
        until: float | None = None,
    ) -> WaitDecision:
        """Decide a wait in one transaction: event, then decision, then timer."""

    def deliver_event(
        self,
        workflow_id: str,
        *,
        name: str,
        payload: bytes | None,
        dedup_key: str | None,
        now: float,
        entry: Entry,
        count: IngressCount | None = None,
    ) -> bool:
        """Store an event and wake its run; ``False`` for a repeated ``dedup_key``;
        ``InvalidOperation`` when the run is completed or cancelled. With ``count``, a
        delivered event adds one to that subscription's accepted count in its transaction."""

    def decide_approval(
        self,
        workflow_id: str,
        approval_id: str,
        *,
        approved: bool,
        by: str,
        reason: str | None,
        now: float,
        entry: Entry,
    ) -> bool:
        """Store a decision and wake the run; ``False`` if it was decided already."""


class AdminStore(Protocol):
    """Operator actions on runs."""

    def cancel_run(self, workflow_id: str, *, now: float, error: ErrorRecord, entry: Entry) -> str:
        """``"cancelled"`` at once, ``"requested"`` from its holder, or ``"finished"``."""

    def redrive(
        self,
        workflow_id: str,
        *,
        now: float,
        entries: list[Entry],
        children: Sequence[ChildRedrive] = (),
    ) -> bool:
        """Make a failed or needs_attention run pending again and journal ``entries``, with
        ``children`` (each still that parent's, failed, cancelled or needs_attention) in the
        same transaction; ``False``, and nothing written, when any precondition fails."""

    def fork_candidates(self, workflow_id: str) -> list[ForkCandidate]:
        """The positioned journal rows of a run a fork may reuse, in order."""

    def fork_run(
        self,
        source: str,
        *,
        new_id: str,
        name: str,
        queue: str,
        input: bytes | None,
        now: float,
        reuse: list[int],
        started: Entry,
        by: str,
        notes: Entry,
    ) -> bool:
        """Create a run whose journal reuses rows of ``source``."""


class BreakerStore(BreakerReads, Protocol):
    """Circuit breakers shared by every worker of the fleet."""

    def breaker_failed(
        self,
        name: str,
        *,
        now: float,
        failures: int,
        window: float,
        cooldown: float,
        probe: str | None,
        started: float | None = None,
    ) -> bool:
        """Count a failed attempt and open the breaker if it should; True if it opened. An
        attempt that ``started`` before a closed breaker's last change (its close) is not
        counted: its failure is from before the probe that closed it."""

    def expire_probe(self, name: str, *, now: float, cooldown: float) -> bool:
        """Open the breaker again if its probe is past its deadline."""

    def take_probe(self, name: str, *, probe: str, now: float, until: float) -> bool:
        """Grant the half-open probe to attempt ``probe``, if nobody holds it."""

    def breaker_succeeded(self, name: str, *, probe: str, now: float) -> bool:
        """Close the breaker after its probe succeeded, waking the runs waiting on it."""


class ReadStore(FleetReads, Protocol):
    """The fleet: declared queues, live workers, and the workflows of the runs not ended."""

    def declare_queue(
        self, name: str, *, concurrency: int | None, rate: int | None, period: float, now: float
    ) -> None:
        """Record a queue's limits as an app declared them."""

    def beat_worker(self, worker: WorkerRow) -> None:
        """Insert or refresh a worker's row."""

    def drop_worker(self, worker_id: str) -> None:
        """A worker stopped: remove its row."""

    def live_run_names(self) -> list[LiveNameRow]:
        """How many runs that have not ended each queue has of each workflow name."""


class Store(
    RunStore,
    LeaseStore,
    JournalStore,
    WaitStore,
    AdminStore,
    BreakerStore,
    ReadStore,
    ChildStore,
    MessageStore,
    SharedStore,
    ScheduleStore,
    SnapshotStore,
    VersionStore,
    KeyStore,
    StreamStore,
    PruneStore,
    IngressStore,
    Protocol,
):
    """What the engine needs from a backend: every role."""


class CursorStore(JournalStore, LeaseStore, StreamStore, Protocol):
    """What an invocation's replay cursor needs: its run's journal and its lease."""


class OperatorStore(AdminStore, WaitStore, JournalReads, RunReads, Protocol):
    """What the operator verbs need: the admin actions, the waits they resolve (events and
    approvals) and the journal and runs they check first."""
