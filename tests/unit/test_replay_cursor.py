"""The replay cursor (``Invocation``) without a store: positions, lookup, divergence, fencing.

What it promises: the n-th journaled call of a task is at ``"<task path>n"`` whatever order
concurrent calls finish in; replay finds a call's latest record by position and checks it is the
same call (kind and name), else the run diverged; a row it cannot read is a ``CorruptRecord``
naming its seq, raised only when replay reaches it; every recorded call must be made again; new
rows are journaled only while the invocation holds the lease, and a store failure becomes a
signal workflow code cannot catch. A tiny fake stands in for the store (the four verbs the cursor
calls) and for the app's runtime (store, codec, clock).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from stalwart import CorruptRecord, NonDeterminismError, StoreError
from stalwart._engine.invocation import Invocation
from stalwart._model import ErrorRecord
from stalwart._registry import WorkflowDef
from stalwart._serde import Codec, make_codec
from stalwart._signals import Abort, Cancel, LeaseLost, Release, StoreFailed
from stalwart._store import Entry, IndexRow
from stalwart.testing import FakeClock

CODEC = make_codec("json")


@dataclass
class FakeStore:
    """The store verbs an invocation calls: journal writes fenced by the lease, payload loads."""

    held: bool = True  # False: another owner holds the run now
    error: Exception | None = None  # raised by every write
    appended: list[tuple[str, Entry, str | None]] = field(default_factory=list)
    marks: list[str] = field(default_factory=list)

    def _write(self) -> bool:
        if self.error is not None:
            raise self.error
        return self.held

    def append(self, workflow_id: str, entry: Entry, *, owner: str | None) -> bool:
        held = self._write()
        if held:
            self.appended.append((workflow_id, entry, owner))
        return held

    def append_many(self, workflow_id: str, entries: list[Entry], *, owner: str | None) -> bool:
        held = self._write()
        if held:
            self.appended.extend((workflow_id, e, owner) for e in entries)
        return held

    def mark_retry(self, workflow_id: str, *, owner: str, marker: str) -> bool:
        held = self._write()
        if held:
            self.marks.append(marker)
        return held

    def load_payload(self, stored: bytes) -> bytes:
        if stored.startswith(b"missing"):
            raise CorruptRecord("payload not found")
        return stored  # every payload here is inline


@dataclass
class FakeRuntime:
    store: FakeStore = field(default_factory=FakeStore)
    codec: Codec = CODEC
    clock: FakeClock = field(default_factory=FakeClock)


def _wf(*, is_async: bool = False) -> WorkflowDef:
    if is_async:

        async def agent() -> None:
            return None

        return WorkflowDef(fn=agent, name="agent", queue="default", is_async=True)

    def plain() -> None:
        return None

    return WorkflowDef(fn=plain, name="agent", queue="default", is_async=False)


def _row(
    seq: int,
    position: str,
    name: str = "fetch",
    *,
    kind: str = "step",
    status: str = "completed",
    attempt: int | None = 1,
    output: bytes | None = None,
    error: str | None = None,
) -> IndexRow:
    return IndexRow(seq, position, kind, name, status, attempt, output, error)


def _invocation(
    index: list[IndexRow] | None = None,
    *,
    runtime: FakeRuntime | None = None,
    is_async: bool = False,
) -> Invocation:
    core: Any = runtime or FakeRuntime()
    return Invocation(
        core, _wf(is_async=is_async), "run-1", "host/1/x#1", recovering=True, index=index or []
    )


def _aborted_with(excinfo: pytest.ExceptionInfo[Abort]) -> Exception:
    return excinfo.value.error


# -- positions ----------------------------------------------------------------------------


def test_a_sync_workflow_numbers_its_calls_from_zero() -> None:
    inv = _invocation()
    assert [inv.next_position() for _ in range(3)] == ["0", "1", "2"]


def test_an_async_workflow_outside_a_running_loop_uses_the_main_task_path() -> None:
    inv = _invocation(is_async=True)
    assert [inv.next_position(), inv.next_position()] == ["0", "1"]


def test_task_positions_follow_creation_order_not_completion_order() -> None:
    inv = _invocation(is_async=True)
    got: dict[str, list[str]] = {}

    async def child(label: str, delay: float, grandchild: bool) -> None:
        await asyncio.sleep(delay)
        got[label] = [inv.next_position()]
        if grandchild:
            me = asyncio.current_task()
            task = asyncio.get_running_loop().create_task(child(label + ".g", 0, False))
            inv.adopt_task(task, parent=me)
            await task
        got[label].append(inv.next_position())

    async def main() -> None:
        me = asyncio.current_task()
        assert me is not None
        inv.task_paths[me] = ""
        loop = asyncio.get_running_loop()
        slow = loop.create_task(child("slow", 0.02, True))  # created first, finishes last
        inv.adopt_task(slow, parent=me)
        fast = loop.create_task(child("fast", 0, False))
        inv.adopt_task(fast, parent=me)
        got["main"] = [inv.next_position()]
        await asyncio.gather(slow, fast)
        got["main"].append(inv.next_position())

    asyncio.run(main())
    assert got == {
        "main": ["0", "1"],
        "slow": ["t0.0", "t0.1"],
        "slow.g": ["t0.t0.0", "t0.t0.1"],
        "fast": ["t1.0", "t1.1"],
    }


def test_a_task_created_outside_the_run_gets_no_path_of_its_own() -> None:
    inv = _invocation(is_async=True)

    async def main() -> list[str]:
        stranger = asyncio.get_running_loop().create_task(asyncio.sleep(0))
        inv.adopt_task(stranger, parent=None)  # no parent: not one of the run's tasks
        inv.adopt_task(stranger, parent=stranger)  # a parent the run does not know
        await stranger
        return list(inv.task_paths.values())

    assert asyncio.run(main()) == []


def test_new_seqs_continue_after_the_highest_recorded_one() -> None:
    assert _invocation().alloc_seq() == 1  # an empty journal starts at 1
    inv = _invocation([_row(1, "0"), _row(5, "2"), _row(2, "1")])
    assert [inv.alloc_seq(), inv.alloc_seq()] == [6, 7]


# -- lookup -------------------------------------------------------------------------------


def test_a_position_with_no_record_is_a_new_call() -> None:
    inv = _invocation([_row(1, "0")])
    assert inv.lookup("1", "step", "fetch") is None
    assert inv.unvisited == {"0"}


def test_lookup_returns_the_latest_row_of_a_position() -> None:
    failed = json.dumps({"type": "ConnectionError", "message": "503", "final": False})
    inv = _invocation(
        [
            _row(1, "0", status="failed", attempt=1, error=failed),
            _row(1, "0", status="completed", attempt=2, output=b'J"ok"'),
        ]
    )
    rec = inv.lookup("0", "step", "fetch")
    assert rec is not None
    assert (rec.seq, rec.status, rec.attempt, rec.output, rec.error) == (
        1,
        "completed",
        2,
        b'J"ok"',
        None,
    )
    assert inv.unvisited == set()


def test_a_reused_row_reads_as_completed_and_a_missing_attempt_as_zero() -> None:
    inv = _invocation([_row(1, "0", status="reused", attempt=None)])
    rec = inv.lookup("0", "step", "fetch")
    assert rec is not None and rec.status == "completed" and rec.attempt == 0


def test_a_recorded_error_is_parsed() -> None:
    error = {"type": "ValueError", "message": "bad", "final": True}
    inv = _invocation([_row(1, "0", status="failed", error=json.dumps(error))])
    rec = inv.lookup("0", "step", "fetch")
    assert rec is not None and rec.error == ErrorRecord("ValueError", "bad", final=True)


# -- divergence ---------------------------------------------------------------------------


def test_another_step_name_at_a_recorded_position_is_a_divergence() -> None:
    inv = _invocation([_row(3, "2", "charge")])
    with pytest.raises(Abort) as excinfo:
        inv.lookup("2", "step", "refund")
    error = _aborted_with(excinfo)
    assert isinstance(error, NonDeterminismError)
    assert (error.seq, error.recorded, error.requested) == (3, "charge", "refund")
    assert excinfo.value.attention
    assert "seq 3" in str(error) and "'charge'" in str(error) and "'refund'" in str(error)


def test_another_kind_of_call_with_the_same_name_is_a_divergence() -> None:
    inv = _invocation([_row(1, "0", "now", kind="step")])
    with pytest.raises(Abort) as excinfo:
        inv.lookup("0", "now", "now")
    assert isinstance(_aborted_with(excinfo), NonDeterminismError)


def test_a_divergence_is_sticky() -> None:
    inv = _invocation([_row(1, "0", "charge")])
    with pytest.raises(Abort) as first:
        inv.lookup("0", "step", "refund")
    with pytest.raises(Abort) as again:
        inv.check_alive()  # workflow code that caught it cannot go on
    assert again.value is first.value


def test_code_that_makes_every_recorded_call_has_replayed_fully() -> None:
    inv = _invocation([_row(1, "0"), _row(2, "1", "charge")])
    inv.lookup("0", "step", "fetch")
    inv.lookup("1", "step", "charge")
    inv.check_fully_replayed()
    assert inv.fatal is None
    _invocation().check_fully_replayed()  # an empty journal has nothing to replay


def test_code_that_ends_before_its_recorded_calls_diverged_at_the_first_one_left() -> None:
    inv = _invocation([_row(1, "0"), _row(4, "t0.0", "charge"), _row(2, "1", "ship")])
    inv.lookup("0", "step", "fetch")
    with pytest.raises(Abort) as excinfo:
        inv.check_fully_replayed()
    error = _aborted_with(excinfo)
    assert isinstance(error, NonDeterminismError)
    assert (error.seq, error.recorded, error.requested) == (2, "ship", None)
    assert excinfo.value.attention


# -- rows replay cannot read --------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        (_row(2, "0", kind="telepathy"), "kind 'telepathy'"),
        (_row(2, "0", status="exploded"), "status 'exploded'"),
        (_row(2, "0", kind="sleep", status="in_doubt"), "status 'in_doubt'"),
        (_row(2, "0", attempt=-1), "attempt -1"),
        (_row(2, "0", status="failed", error=None), "no recorded error"),
        (_row(2, "0", status="failed", error="{not json"), "not JSON"),
        (_row(2, "0", status="failed", error="[1, 2]"), "not an error record"),
        (_row(2, "0", status="failed", error='{"final": "yes"}'), "final 'yes'"),
        (_row(2, "0", status="failed", error='{"retry_at": "soon"}'), "retry_at 'soon'"),
    ],
)
def test_a_damaged_row_is_a_corrupt_record_naming_its_seq(row: IndexRow, problem: str) -> None:
    inv = _invocation([row])  # reading the index raises nothing: the run may never reach it
    with pytest.raises(Abort) as excinfo:
        inv.lookup("0", row.kind, row.name)
    error = _aborted_with(excinfo)
    assert isinstance(error, CorruptRecord)
    assert (error.workflow_id, error.seq) == ("run-1", 2)
    assert problem in str(error)
    assert not excinfo.value.attention


def test_a_damaged_row_followed_by_a_good_one_of_its_position_is_read() -> None:
    inv = _invocation([_row(1, "0", status="exploded"), _row(1, "0", status="completed")])
    rec = inv.lookup("0", "step", "fetch")
    assert rec is not None and rec.status == "completed"


def test_a_good_row_followed_by_a_damaged_one_of_its_position_is_damage() -> None:
    inv = _invocation([_row(1, "0", status="completed"), _row(1, "0", status="exploded")])
    with pytest.raises(Abort):
        inv.lookup("0", "step", "fetch")


def test_a_recorded_output_is_decoded_and_a_bad_one_is_a_corrupt_record() -> None:
    inv = _invocation(
        [
            _row(1, "0", output=CODEC.encode({"total": 3})),
            _row(2, "1", output=None),
            _row(3, "2", output=b"J{garbled"),
            _row(4, "3", output=b"missing-digest"),
        ]
    )
    found = [inv.lookup(p, "step", "fetch") for p in "0123"]
    assert found[0] is not None and inv.load_value(found[0]) == {"total": 3}
    assert found[1] is not None and inv.load_value(found[1]) is None
    for rec, seq in ((found[2], 3), (found[3], 4)):
        assert rec is not None
        with pytest.raises(Abort) as excinfo:
            inv.load_value(rec)
        error = _aborted_with(excinfo)
        assert isinstance(error, CorruptRecord) and error.seq == seq
        assert "cannot be decoded" in str(error)


# -- recorded values ----------------------------------------------------------------------


def test_a_value_is_recorded_once_and_replayed_identically() -> None:
    runtime = FakeRuntime()
    first = _invocation(runtime=runtime)
    made = dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC)
    assert first.record_value("now", lambda: made) == made
    [(workflow_id, entry, owner)] = runtime.store.appended
    assert (workflow_id, owner) == ("run-1", "host/1/x#1")
    assert (entry.kind, entry.name, entry.status, entry.seq, entry.position, entry.attempt) == (
        "now",
        "now",
        "completed",
        1,
        "0",
        1,
    )
    assert entry.output is not None
    replay = _invocation([_row(1, "0", "now", kind="now", output=entry.output)], runtime=runtime)
    assert replay.record_value("now", lambda: pytest.fail("produced again")) == made
    assert len(runtime.store.appended) == 1  # nothing journaled twice


def test_a_recorded_value_of_the_wrong_type_is_a_corrupt_record() -> None:
    inv = _invocation([_row(1, "0", "uuid", kind="uuid", output=CODEC.encode(42))])
    with pytest.raises(Abort) as excinfo:
        inv.record_value("uuid", lambda: pytest.fail("produced again"))
    error = _aborted_with(excinfo)
    assert isinstance(error, CorruptRecord) and "is not a uuid value" in str(error)


# -- journaling under the lease -----------------------------------------------------------


def test_a_write_refused_by_the_store_means_the_lease_was_lost() -> None:
    runtime = FakeRuntime(store=FakeStore(held=False))
    inv = _invocation(runtime=runtime)
    entry = Entry(kind="step", name="fetch", status="completed", seq=1, position="0")
    writes: list[Callable[[], None]] = [
        lambda: inv.append(entry),
        lambda: inv.append_many([entry]),
        lambda: inv.mark_retry("1:2"),
    ]
    for write in writes:
        with pytest.raises(LeaseLost):
            write()
    assert inv.lease_lost.is_set()
    with pytest.raises(LeaseLost):
        inv.check_alive()
    assert runtime.store.appended == [] and runtime.store.marks == []


def test_a_write_under_the_lease_is_journaled_with_this_owner() -> None:
    runtime = FakeRuntime()
    inv = _invocation(runtime=runtime)
    entry = Entry(kind="step", name="fetch", status="completed", seq=1, position="0")
    inv.append(entry)
    inv.append_many([entry, entry])
    inv.mark_retry("1:2")
    assert [owner for _, _, owner in runtime.store.appended] == ["host/1/x#1"] * 3
    assert runtime.store.marks == ["1:2"]
    assert not inv.lease_lost.is_set()


def test_a_store_error_while_journaling_is_a_signal_and_a_corrupt_record_stays_itself() -> None:
    entry = Entry(kind="step", name="fetch", status="completed", seq=1, position="0")
    outage = StoreError("disk I/O error")
    inv = _invocation(runtime=FakeRuntime(store=FakeStore(error=outage)))
    writes: list[Callable[[], None]] = [
        lambda: inv.append(entry),
        lambda: inv.append_many([entry]),
        lambda: inv.mark_retry("1:2"),
    ]
    for write in writes:
        with pytest.raises(StoreFailed) as excinfo:
            write()
        assert excinfo.value.error is outage
    assert not isinstance(StoreFailed(outage), Exception)  # `except Exception` cannot catch it
    damage = CorruptRecord("bad row", workflow_id="run-1", seq=1)
    inv = _invocation(runtime=FakeRuntime(store=FakeStore(error=damage)))
    with pytest.raises(CorruptRecord):
        inv.append(entry)


# -- boundaries ---------------------------------------------------------------------------


def test_check_alive_stops_for_each_reason_the_sticky_failure_first() -> None:
    runtime = FakeRuntime()
    inv = _invocation(runtime=runtime)
    inv.check_alive()  # nothing to stop for
    inv.deadline = runtime.clock.time() + 10
    inv.check_alive()
    runtime.clock.advance(10)
    with pytest.raises(Cancel, match="deadline"):
        inv.check_alive()
    inv.cancel_requested.set()
    with pytest.raises(Cancel, match="it was cancelled"):
        inv.check_alive()
    inv.releasing.set()
    with pytest.raises(Release):
        inv.check_alive()
    signal = inv.suspend(wake_at=5.0, waiting_for=None)
    with pytest.raises(type(signal)) as suspended:
        inv.check_alive()
    assert suspended.value is signal
    inv.lease_lost.set()
    with pytest.raises(LeaseLost):
        inv.check_alive()
    fatal = inv.abort(ValueError("boom"), attention=False)
    with pytest.raises(Abort) as aborted:
        inv.check_alive()
    assert aborted.value is fatal
