"""The chaos soak's history checker: what the store and the logs say happened, and the
invariants of issue 26 item 3 that it must satisfy.

A :class:`History` is plain data: the runs and their journals' outcomes as the store holds them
after the soak, the shared counters with their write histories, the stream offsets, every line
of the processes' logs (``soak_workload.EffectLog``), the driver's samples of the runs it saw
``running`` (with their lease holder and expiry, read from the database with the server's
clock), and the faults it injected. :func:`read_history` builds one from a store;
:func:`check` returns every violation, one :class:`Violation` per broken instance:

``unaccounted``
    a started run (in the store, or acknowledged by ``app.start``) that is neither terminal nor
    ``needs_attention`` with a reason.
``effect``
    an irreversible effect made more than once for one run, or a run whose ``verify``-settled
    effect completed without exactly one effect.
``lost_update``
    a shared counter whose value is not the number of its writes, is less than its acknowledged
    increments, or lacks a write an acknowledgement names.
``stream_gap``
    a stream whose offsets are not 0, 1, 2, ... without a gap.
``message``
    a published message without exactly one run, or a message run no one published.
``attempt``
    an attempt of a step or compensation with more than one outcome (``completed`` or
    ``failed``) in the journal; an ``in_doubt`` entry is not an outcome, it is settled by one.
``stale_lease``
    a run seen ``running`` longer than ``grace`` seconds past its lease while its holder was
    killed, paused or cut off.
"""

from __future__ import annotations

import contextlib
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import stalwart

__all__ = [
    "COUNTER_KEYS",
    "EFFECTS",
    "OUTCOMES",
    "TERMINAL",
    "Fault",
    "History",
    "LeaseSample",
    "Outcome",
    "Run",
    "Violation",
    "check",
    "read_history",
]

TERMINAL = frozenset({"completed", "failed", "cancelled"})
# An attempt's outcomes; ``in_doubt`` is not one: it says the outcome is unknown until verify
# or an operator's resolve records it (then as the same attempt's ``completed``).
OUTCOMES = frozenset({"completed", "failed"})
COUNTER_KEYS = ("soak-counter-0", "soak-counter-1", "soak-counter-2")
# effect op -> (the workflow that makes it, whether verify settles it: exactly once when the
# run completed)
EFFECTS = {"charge": ("pay", True), "email": ("notify", False)}


@dataclass(frozen=True)
class Run:
    """A run as the store holds it after the soak."""

    workflow_id: str
    name: str
    status: str
    error: str | None = None


@dataclass(frozen=True)
class Outcome:
    """A journal entry that records an attempt's outcome (completed, failed or in doubt)."""

    workflow_id: str
    kind: str
    seq: int | None
    attempt: int | None
    status: str


@dataclass(frozen=True)
class LeaseSample:
    """A run the driver saw ``running`` at server time ``t``, held by process ``pid`` (None
    when the holder names no pid) until ``expires``."""

    t: float
    workflow_id: str
    pid: int | None
    expires: float


@dataclass(frozen=True)
class Fault:
    """A fault injected into process ``pid`` (0 for the database) from ``start`` to ``end``
    (``None``: for good, a kill)."""

    kind: str
    pid: int
    start: float
    end: float | None


@dataclass
class History:
    """Everything the checker reads (see the module docstring)."""

    runs: dict[str, Run]
    outcomes: list[Outcome] = field(default_factory=list)
    # key -> (value, [(version, value, by)] oldest first)
    counters: dict[str, tuple[int, list[tuple[int, Any, str | None]]]] = field(default_factory=dict)
    streams: dict[str, list[int]] = field(default_factory=dict)
    log: list[dict[str, Any]] = field(default_factory=list)
    samples: list[LeaseSample] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    grace: float = 15.0
    queue: str = "stalwart-soak"  # the RabbitMQ queue whose messages start runs
    notes: Counter[str] = field(default_factory=Counter)  # what the faults did, for the summary


@dataclass(frozen=True)
class Violation:
    """One broken invariant, with what shows it."""

    invariant: str
    subject: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.subject}: {self.detail}"


def check(history: History) -> list[Violation]:
    """Every violation of the soak's invariants in ``history``."""
    return [
        *_accounted(history),
        *_effects(history),
        *_counters(history),
        *_streams(history),
        *_messages(history),
        *_attempts(history),
        *_leases(history),
    ]


def _accounted(h: History) -> Iterable[Violation]:
    acked = {line["wid"] for line in h.log if line["op"] == "started"}
    for wid in sorted(acked - set(h.runs)):
        yield Violation("unaccounted", wid, "app.start acknowledged it; the store has no run")
    for run in h.runs.values():
        if run.status in TERMINAL:
            continue
        if run.status == "needs_attention" and run.error:
            continue
        yield Violation(
            "unaccounted", run.workflow_id, f"{run.name} is {run.status} (error {run.error!r})"
        )


def _effects(h: History) -> Iterable[Violation]:
    made: Counter[tuple[str, str]] = Counter(
        (line["op"], line["wid"]) for line in h.log if line["op"] in EFFECTS
    )
    for (op, wid), n in sorted(made.items()):
        if n > 1:
            yield Violation("effect", wid, f"{op} made {n} times")
    for run in h.runs.values():
        for op, (workflow, verified) in EFFECTS.items():
            if verified and run.name == workflow and run.status == "completed":
                n = made[(op, run.workflow_id)]
                if n != 1:
                    yield Violation(
                        "effect", run.workflow_id, f"completed with {op} made {n} times"
                    )


def _counters(h: History) -> Iterable[Violation]:
    acks: dict[str, set[tuple[int, str]]] = defaultdict(set)
    for line in h.log:
        if line["op"] == "inc_ack":
            acks[line["key"]].add((int(line["version"]), str(line["wid"])))
    for key in sorted(set(h.counters) | set(acks)):
        value, writes = h.counters.get(key, (0, []))
        if value != len(writes):
            yield Violation("lost_update", key, f"value {value} after {len(writes)} writes")
        if value < len(acks[key]):
            yield Violation(
                "lost_update", key, f"value {value} < {len(acks[key])} acknowledged increments"
            )
        written = {(version, by) for version, _value, by in writes}
        for version, wid in sorted(acks[key]):
            if (version, wid) not in written:
                yield Violation(
                    "lost_update", key, f"{wid}'s acknowledged version {version} is not in history"
                )


def _streams(h: History) -> Iterable[Violation]:
    for wid, offsets in sorted(h.streams.items()):
        if offsets != list(range(len(offsets))):
            missing = sorted(set(range(max(offsets, default=-1) + 1)) - set(offsets))
            yield Violation("stream_gap", wid, f"offsets {offsets[:20]}... missing {missing[:10]}")


def _messages(h: History) -> Iterable[Violation]:
    published = {line["id"] for line in h.log if line["op"] == "published"}
    prefix = f"{h.queue}:"
    runs = Counter(
        wid.removeprefix(prefix) for wid, run in h.runs.items() if wid.startswith(prefix)
    )
    for message_id in sorted(published):
        if runs[message_id] != 1:
            yield Violation("message", message_id, f"published; {runs[message_id]} runs")
    for message_id in sorted(set(runs) - published):
        yield Violation("message", message_id, "a run for a message no one published")


def _attempts(h: History) -> Iterable[Violation]:
    per_attempt: Counter[tuple[str, str, int | None, int | None]] = Counter(
        (o.workflow_id, o.kind, o.seq, o.attempt) for o in h.outcomes if o.status in OUTCOMES
    )
    for (wid, kind, seq, attempt), n in sorted(per_attempt.items(), key=str):
        if n > 1:
            yield Violation("attempt", wid, f"{kind} seq {seq} attempt {attempt}: {n} outcomes")


def _holder_down(h: History, pid: int | None, t: float) -> bool:
    for fault in h.faults:
        if fault.pid != pid or fault.start > t:
            continue
        if fault.end is None or t <= fault.end:
            return True
    return False


def _leases(h: History) -> Iterable[Violation]:
    reported: set[str] = set()
    for s in h.samples:
        if s.workflow_id in reported or s.t - s.expires <= h.grace:
            continue
        if s.pid is None or _holder_down(h, s.pid, s.t):
            reported.add(s.workflow_id)
            yield Violation(
                "stale_lease",
                s.workflow_id,
                f"running {s.t - s.expires:.1f} s past its lease; holder {s.pid} is down",
            )


# -- reading a store ------------------------------------------------------------------------


def read_history(
    app: stalwart.Stalwart,
    workdir: Path,
    *,
    samples: list[LeaseSample],
    faults: list[Fault],
    grace: float,
    queue: str,
) -> History:
    """The history of the soak on ``app``'s store whose logs are in ``workdir``."""
    from soak_workload import read_logs

    runs: dict[str, Run] = {}
    before = None
    while True:
        page = app.list_workflows(limit=1000, before=before)
        for info in page:
            runs[info.workflow_id] = Run(info.workflow_id, info.name, info.status, info.error)
        if len(page) < 1000:
            break
        before = page[-1]  # exact, even among runs created at the same time
    outcomes = []
    streams: dict[str, list[int]] = {}
    notes: Counter[str] = Counter()
    for wid, run in runs.items():
        for e in app.journal(wid):
            if e.kind in ("step", "compensation") and e.status in (*OUTCOMES, "in_doubt"):
                outcomes.append(Outcome(wid, e.kind, e.seq, e.attempt, e.status))
                notes["attempts interrupted"] += "interrupted" in (e.error or "")
                notes["settled by verify"] += e.by == "verify"
                notes["in doubt"] += e.status == "in_doubt"
        if run.name == "talk":
            with contextlib.suppress(TimeoutError):
                streams[wid] = [c.offset for c in app.stream(wid, follow=False)]
    counters: dict[str, tuple[int, list[tuple[int, Any, str | None]]]] = {}
    for key in COUNTER_KEYS:
        current = app.shared_get(key)
        writes: list[tuple[int, Any, str | None]] = [
            (w.version, w.value, w.by) for w in app.shared_history(key)
        ]
        counters[key] = (int(current.value or 0), writes)
    return History(
        runs=runs,
        outcomes=outcomes,
        counters=counters,
        streams=streams,
        log=list(read_logs(workdir)),
        samples=samples,
        faults=faults,
        grace=grace,
        queue=queue,
        notes=notes,
    )
