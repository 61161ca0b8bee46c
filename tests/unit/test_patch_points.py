"""``patched`` and the dry cursor of ``app.check`` at the level of the replay cursor, without a
store: what a patch point decides from the journal at its position, which position the next
call gets on each branch, and what the dry cursor does with each kind of record.

A tiny fake stands in for the store (the writes are counted) and for the app's runtime."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from stalwart._engine.dryrun import DryInvocation, _Diverged, _Frontier
from stalwart._engine.invocation import CURRENT_RUN, Invocation
from stalwart._engine.loop import install_task_factory
from stalwart._engine.patches import patched
from stalwart._model import ErrorRecord
from stalwart._registry import WorkflowDef
from stalwart._serde import Codec, make_codec
from stalwart._signals import Abort
from stalwart._store import Entry, IndexRow
from stalwart.testing import FakeClock


@dataclass
class FakeStore:
    appended: list[Entry] = field(default_factory=list)

    def append(self, workflow_id: str, entry: Entry, *, owner: str | None) -> bool:
        self.appended.append(entry)
        return True

    def load_payload(self, stored: bytes) -> bytes:
        return stored


@dataclass
class FakeRuntime:
    store: FakeStore = field(default_factory=FakeStore)
    codec: Codec = field(default_factory=lambda: make_codec("json"))
    clock: FakeClock = field(default_factory=FakeClock)


def _wf(*, is_async: bool = False) -> WorkflowDef:
    def plain() -> None:
        return None

    return WorkflowDef(fn=plain, name="agent", queue="default", is_async=is_async)


def _row(seq: int, position: str, name: str, kind: str = "step", **kw: Any) -> IndexRow:
    status = kw.pop("status", "completed")
    return IndexRow(
        seq, position, kind, name, status, 1, kw.pop("output", None), kw.pop("error", None)
    )


def _inv(rows: list[IndexRow], *, cls: type[Invocation] = Invocation, **kw: Any) -> Any:
    runtime: Any = FakeRuntime()
    return cls(runtime, _wf(**kw), "run-1", "owner#1", recovering=False, index=rows)


def test_a_recorded_patch_at_its_position_replays_true_and_takes_the_position() -> None:
    inv = _inv([_row(1, "0", "p", kind="patch"), _row(2, "1", "fetch")])
    assert patched(inv, "p") is True
    assert inv.next_position() == "1"
    assert inv.runtime.store.appended == []


def test_another_record_there_means_the_run_went_past_before_the_patch() -> None:
    inv = _inv([_row(1, "0", "fetch")])
    assert patched(inv, "p") is False
    assert inv.next_position() == "0"  # the old code's call finds its own record there
    assert inv.lookup("0", "step", "fetch") is not None
    assert inv.runtime.store.appended == []


def test_a_record_further_on_in_the_same_task_also_means_the_old_branch() -> None:
    inv = _inv([_row(1, "1", "fetch")])  # a gap at 0 cannot be the frontier
    assert patched(inv, "p") is False


def test_another_patch_at_the_position_is_not_this_one() -> None:
    inv = _inv([_row(1, "0", "q", kind="patch")])
    assert patched(inv, "p") is False
    assert patched(inv, "q") is True


def test_at_the_frontier_the_patch_is_recorded_and_true() -> None:
    inv = _inv([_row(1, "0", "fetch")])
    inv.next_position()
    assert patched(inv, "p") is True
    (entry,) = inv.runtime.store.appended
    assert (entry.kind, entry.name, entry.position, entry.seq) == ("patch", "p", "1", 2)
    assert inv.next_position() == "2"


def test_records_of_a_task_created_after_this_point_mean_the_old_branch() -> None:
    # the old code gathered two fetches here: the main task made no call of its own, but the
    # task it created went on, so the run passed this point without the patch
    inv = _inv([_row(1, "t0.0", "fetch"), _row(2, "t0.1", "fetch")], is_async=True)
    assert patched(inv, "p") is False
    assert inv.runtime.store.appended == []


def test_records_of_tasks_created_before_this_point_do_not_count() -> None:
    inv = _inv([_row(1, "t0.0", "fetch"), _row(2, "t0.t0.0", "fetch")], is_async=True)
    inv.children[""] = 1  # the main task created t0 (which created its own) before this point
    assert patched(inv, "p") is True


def test_in_a_task_the_decision_reads_that_task_positions() -> None:
    inv = _inv([_row(1, "t0.0", "fetch")], is_async=True)

    async def main() -> tuple[bool, bool]:
        inv.task_paths[asyncio.current_task()] = ""  # type: ignore[index]

        async def child() -> bool:
            return patched(inv, "p")

        CURRENT_RUN.set(inv)
        install_task_factory(asyncio.get_running_loop())
        in_child = await asyncio.create_task(child())
        return in_child, patched(inv, "q")  # another place: another id

    assert asyncio.run(main()) == (False, True)


# -- the dry cursor ----------------------------------------------------------------------------


def test_one_id_at_a_second_call_site_is_refused_and_the_same_site_again_is_not() -> None:
    inv = _inv([])

    def ask() -> bool:
        return patched(inv, "p")

    assert [ask(), ask()] == [True, True]  # one place, reached twice (a loop, say)
    assert patched(inv, "q") is True
    with pytest.raises(Abort) as refused:
        patched(inv, "p")
    assert type(refused.value.error).__name__ == "RegistrationError"
    assert "patch id 'p' is asked for at test_patch_points.py:" in str(refused.value.error)
    assert [e.name for e in inv.runtime.store.appended] == ["p", "p", "q"]


def test_the_dry_cursor_answers_settled_records_and_stops_elsewhere() -> None:
    final = ErrorRecord("ValueError", "no", final=True).to_json()
    retry = ErrorRecord("ValueError", "again").to_json()
    rows = [
        _row(1, "0", "fetch", output=b'J"x"'),
        _row(2, "1", "risky", status="failed", error=final),
        _row(3, "2", "flaky", status="failed", error=retry),
        _row(4, "3", "go", kind="event", status="scheduled"),
    ]
    inv = _inv(rows, cls=DryInvocation)
    assert inv.lookup("0", "step", "fetch").seq == 1
    assert inv.lookup("1", "step", "risky").seq == 2  # its recorded error is raised again
    with pytest.raises(_Frontier):
        inv.lookup("2", "step", "flaky")  # a next attempt would run
    with pytest.raises(_Frontier):
        inv.lookup("3", "event", "go")  # the wait is not decided
    with pytest.raises(_Frontier):
        inv.lookup("4", "step", "later")  # nothing recorded
    inv.check_fully_replayed()  # past a frontier nothing was compared


def test_the_dry_cursor_reports_kind_and_name_of_both_sides_and_writes_nothing() -> None:
    inv = _inv([_row(1, "0", "fetch"), _row(2, "1", "go", kind="event")], cls=DryInvocation)
    with pytest.raises(_Diverged) as diverged:
        inv.lookup("0", "patch", "p")
    assert (diverged.value.seq, diverged.value.recorded, diverged.value.requested) == (
        1,
        "step fetch",
        "patch p",
    )
    inv = _inv([_row(1, "0", "fetch"), _row(2, "1", "go", kind="event")], cls=DryInvocation)
    inv.lookup("0", "step", "fetch")
    with pytest.raises(_Diverged) as ended:
        inv.check_fully_replayed()
    assert (ended.value.seq, ended.value.recorded, ended.value.requested) == (2, "event go", None)
    with pytest.raises(_Frontier):
        inv.append(Entry(kind="now", name="now", status="completed"))
    assert inv.runtime.store.appended == []


def test_the_dry_cursor_passes_a_damaged_record_on_as_corrupt() -> None:
    inv = _inv([_row(1, "0", "fetch", status="exploded")], cls=DryInvocation)
    with pytest.raises(Abort) as aborted:
        inv.lookup("0", "step", "fetch")
    assert type(aborted.value.error).__name__ == "CorruptRecord"
