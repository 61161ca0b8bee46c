"""The dry replay behind ``app.check`` and ``stalwart check``: does the current code still make
the calls a run's journal recorded?

A dry replay runs the workflow function from the top, like any replay, with a cursor that only
reads (:class:`DryInvocation`):

- every journaled call (a step, a wait, ``now``, a patch point, any kind recorded through
  :meth:`Invocation.lookup`) is compared with the record at its position, kind and name;
  the first that differs is the divergence;
- a settled record returns its recorded value (or raises its recorded error), as on a
  real replay, so the code goes on to its next call;
- the first call with nothing settled at its position — no record, a step whose next attempt
  is still to come, a wait not yet resolved — is the run's frontier: a real worker would
  execute from there, so the dry replay stops, and the run is ``ok``.

Nothing executes and nothing is written: a call with a settled record is answered from it
(replay never writes for those), the cursor stops before any call it would have to execute or
wait for, and it refuses the journal writes (each refusal is a frontier too). So a check takes
no lease and writes nothing. A journaled call added to the engine keeps this true by writing
only through the cursor (``append``, ``append_many``, ``mark_retry``) or only after
``lookup`` found nothing settled.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

from .._errors import CorruptRecord, NonDeterminismError, StoreError
from .._model import EntryKind, EntryStatus
from .._registry import WorkflowDef
from .._runtime import Runtime
from .._signals import Abort, EngineSignal, StoreFailed
from .._store import Entry, RunRow
from .executor import _decode_input
from .invocation import Invocation, Recorded
from .workflow_body import run_async, run_sync

__all__ = ["CheckResult", "DryInvocation", "dry_replay", "stranded_names", "warn_stranded"]

log = logging.getLogger("stalwart")

CHECK_OWNER = "stalwart-check"  # holds no lease: a write in its name would be refused anyway


@dataclass(frozen=True)
class CheckResult:
    """What ``app.check()`` found for one run that has not ended.

    ``ok`` is ``True`` when the current code replays the run's journal to its frontier.
    Otherwise ``reason`` says why: ``"diverged"`` (at ``seq`` the journal ``recorded`` one call,
    the code ``requested`` another, each as ``"KIND NAME"``, ``requested`` ``None`` when the
    code ended without making it), ``"stranded"`` (the app no longer registers the run's
    workflow, ``recorded`` ``"workflow NAME"``) or ``"corrupt"`` (a record at ``seq`` cannot be
    read, ``recorded`` what it is)."""

    workflow_id: str
    ok: bool
    seq: int | None = None
    recorded: str | None = None
    requested: str | None = None
    reason: str | None = None


class _Frontier(EngineSignal):
    """The dry replay reached what a real invocation would execute or write."""


class _Diverged(EngineSignal):
    """The code asked for another call than the one the journal recorded."""

    def __init__(self, seq: int, recorded: str, requested: str | None) -> None:
        super().__init__(f"seq {seq}: recorded {recorded}, requested {requested}")
        self.seq, self.recorded, self.requested = seq, recorded, requested


def _call(kind: str, name: str) -> str:
    return f"{kind} {name}"


# Kinds whose call is answered from a record that is not (yet) completed: a child start that
# is ``scheduled`` (started, its end not yet seen) or ``failed``, or a send that found no
# target, replays without acting. A kind not listed here is answered only from a completed
# record, the safe default: the dry replay stops (as at a frontier) rather than let the
# engine act.
_ANSWERED: dict[str, frozenset[str]] = {
    EntryKind.CHILD: frozenset({EntryStatus.SCHEDULED, EntryStatus.COMPLETED, EntryStatus.FAILED}),
    EntryKind.SEND: frozenset({EntryStatus.COMPLETED, EntryStatus.FAILED}),
}


def _settled(rec: Recorded) -> bool:
    """Whether replay answers the call from this record alone (no attempt, no wait, no write)."""
    answered = _ANSWERED.get(rec.kind)
    if answered is not None:
        return rec.status in answered
    if rec.status == EntryStatus.COMPLETED:
        return True
    # A step's failure for good is raised again; a failed attempt with retries left would run.
    return rec.status == EntryStatus.FAILED and rec.error is not None and rec.error.final


class DryInvocation(Invocation):
    """A replay cursor that compares and reads, and stops where a real one would act."""

    frontier = False
    writes_streams = False

    def lookup(self, position: str, kind: str, name: str) -> Recorded | None:
        """The settled record at ``position`` if it is this call; otherwise stop."""
        if position not in self.recorded:
            self.frontier = True
            raise _Frontier(position)
        try:
            rec = super().lookup(position, kind, name)
        except Abort as stop:
            if not isinstance(stop.error, NonDeterminismError):
                raise
            was = self.recorded[position]
            raise _Diverged(was.seq, _call(was.kind, was.name), _call(kind, name)) from None
        if rec is None or not _settled(rec):
            self.frontier = True
            raise _Frontier(position)
        return rec

    def check_fully_replayed(self) -> None:
        """The code ended: every recorded call must have been made again (unless the replay
        stopped at a frontier, past which nothing was compared)."""
        if self.frontier or not self.unvisited:
            return
        rec = min((self.recorded[p] for p in self.unvisited), key=lambda r: r.seq)
        raise _Diverged(rec.seq, _call(rec.kind, rec.name), None)

    # Journal writes: a real invocation writes only past its frontier, so each is one.

    def append(self, entry: Entry) -> None:
        """Refused: the replay reached its frontier."""
        self.frontier = True
        raise _Frontier(f"the replay would journal {entry.kind} {entry.name}")

    async def append_async(self, entry: Entry) -> None:
        """Refused: the replay reached its frontier."""
        self.append(entry)

    def append_many(self, entries: list[Entry]) -> None:
        """Refused: the replay reached its frontier."""
        self.frontier = True
        raise _Frontier("the replay would journal entries")

    def mark_retry(self, marker: str) -> None:
        """Refused: the replay reached its frontier."""
        self.frontier = True
        raise _Frontier(f"the replay would begin the attempt {marker}")


def _corrupt(wid: str, error: BaseException, inv: Invocation | None) -> CheckResult:
    seq = getattr(error, "seq", None)
    rec = next((r for r in inv.recorded.values() if r.seq == seq), None) if inv else None
    what = _call(rec.kind, rec.name) if rec is not None else None
    return CheckResult(wid, False, seq, what, None, "corrupt")


def _replay(inv: DryInvocation, wf: WorkflowDef, row: RunRow) -> None:
    """Run the workflow against the journal until it ends or stops (signals propagate)."""
    runtime, wid = inv.runtime, inv.workflow_id
    if inv.recorded and runtime.store.rollback_in_progress(wid) is not None:
        return  # a worker finishes the rollback without replaying the workflow
    args, kwargs = _decode_input(runtime, wid, row.input)
    runner = run_async if wf.is_async else run_sync
    with contextlib.suppress(Exception):  # the code's own failure ends a run, not a divergence
        runner(inv, wf, args, kwargs)
    inv.check_fully_replayed()


def dry_replay(runtime: Runtime, row: RunRow) -> CheckResult:
    """Check one run that has not ended against the workflows ``runtime`` registers."""
    wid = row.workflow_id
    wf = runtime.registry.workflows.get(row.name)
    if wf is None:
        return CheckResult(wid, False, None, _call("workflow", row.name), None, "stranded")
    inv: DryInvocation | None = None
    try:
        index = runtime.store.replay_index(wid)
        inv = DryInvocation(runtime, wf, wid, CHECK_OWNER, recovering=False, index=index)
        _replay(inv, wf, row)
    except _Diverged as found:
        return CheckResult(wid, False, found.seq, found.recorded, found.requested, "diverged")
    except CorruptRecord as exc:
        return _corrupt(wid, exc, inv)
    except Abort as stop:
        if isinstance(stop.error, CorruptRecord):
            return _corrupt(wid, stop.error, inv)
        log.info("run %s: its dry replay stopped: %s", wid, stop.error)
    except StoreFailed as failed:
        raise failed.error from None
    except EngineSignal:
        pass  # a frontier, or a wait's suspension: nothing more to compare
    if inv is not None and inv.damaged:
        bad = min((inv.recorded[p] for p in inv.damaged), key=lambda r: r.seq)
        return CheckResult(wid, False, bad.seq, _call(bad.kind, bad.name), None, "corrupt")
    return CheckResult(wid, True)


def stranded_names(runtime: Runtime, queues: list[str]) -> dict[str, int]:
    """The workflow names of runs in ``queues`` that have not ended and that ``runtime``'s app
    does not register, with how many runs each."""
    served = set(queues)
    found: dict[str, int] = {}
    for row in runtime.store.live_run_names():
        if row.queue in served and row.name not in runtime.registry.workflows:
            found[row.name] = found.get(row.name, 0) + row.runs
    return found


def warn_stranded(runtime: Runtime, queues: list[str]) -> None:
    """A worker starting on ``queues``: one WARNING per workflow name whose runs there have not
    ended but which this app no longer registers (no worker of it will ever execute them)."""
    try:
        stranded = stranded_names(runtime, queues)
    except StoreError as exc:  # the worker's loop rides out an outage; this check is advice
        log.warning("could not look for stranded runs: %s", exc)
        return
    for name, runs in sorted(stranded.items()):
        log.warning(
            "%d run(s) of workflow %r in this worker's queues are stranded: the app no longer "
            "registers %r, so nothing executes them; register it again (keep the old version "
            "until its runs end) or cancel them (stalwart cancel ID, app.cancel); stalwart check "
            "MODULE:APP lists them",
            runs,
            name,
            name,
        )
