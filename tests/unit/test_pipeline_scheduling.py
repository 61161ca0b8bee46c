"""The write pipeline's scheduling alone (``GroupCommit``, with a commit that writes nothing):
what a forked child inherits of a commit under way, and what a caller cancelled while a batch
holds its write keeps of its task's cancellations."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any

import pytest

from stalwart._store.group_commit import BATCH_LIMIT, GroupCommit, Pending, own_loop


def _settling(gate: threading.Event) -> Any:
    """A commit that settles each write with its own value, in this process once ``gate`` is
    set (in a forked child at once)."""
    parent = os.getpid()

    def commit(batch: list[Pending[Any]]) -> None:
        if os.getpid() == parent:
            gate.wait(30)
        for pending in batch:
            pending.settle(pending.write)

    return commit


def _busy(pipeline: GroupCommit[Any]) -> None:
    deadline = time.monotonic() + 30
    while not pipeline._busy:
        assert time.monotonic() < deadline, "the commit never started"
        time.sleep(0.001)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_during_a_commit_commits_its_own_writes() -> None:
    """The parent's commit under way is not the child's: the child's first write leads a
    commit of its own instead of waiting for a leader it does not have."""
    gate = threading.Event()
    pipeline: GroupCommit[str] = GroupCommit(_settling(gate))
    leader = threading.Thread(target=pipeline.submit, args=("parent's",))
    leader.start()
    _busy(pipeline)
    pid = os.fork()
    if pid == 0:  # the child: a write of its own, within a few seconds, or a failure
        threading.Timer(10, lambda: os._exit(3)).start()
        try:
            ok = pipeline.submit("child's") == "child's" and not pipeline._busy
        except BaseException:
            ok = False
        os._exit(0 if ok else 1)
    gate.set()
    leader.join(timeout=30)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_a_caller_cancelled_while_a_batch_holds_its_write_keeps_no_cancellation() -> None:
    """Cancelled three times while its write is being committed, the caller returns what the write
    decided, and its task counts no cancellation afterwards (a ``TaskGroup`` or a timeout
    around it keeps its own count right)."""
    inside, go_on = threading.Event(), threading.Event()

    def commit(batch: list[Pending[Any]]) -> None:
        inside.set()
        go_on.wait(30)
        for pending in batch:
            pending.settle(pending.write)

    pipeline: GroupCommit[str] = GroupCommit(commit)

    async def main() -> tuple[str, int]:
        writing = asyncio.ensure_future(pipeline.submit_async("kept"))
        await asyncio.to_thread(inside.wait, 30)  # the pipeline's thread commits it
        writing.cancel()
        writing.cancel()  # two in one turn of the loop: one CancelledError, two counted
        await asyncio.sleep(0.01)
        writing.cancel()
        await asyncio.sleep(0.01)
        assert not writing.done()
        go_on.set()
        value = await writing
        return value, writing.cancelling()

    try:
        assert asyncio.run(asyncio.wait_for(main(), 30)) == ("kept", 0)
    finally:
        go_on.set()
        pipeline.close()


def _behind_the_loops_queued_writes(
    pipeline: GroupCommit[str], queued: int, sync_call: Any, delay: float = 0.0
) -> Any:
    """What ``sync_call`` (a thread's write) returns when it comes after ``queued`` writes an
    app's loop queued for its own turn, before that turn: ``"hung"`` if it never does."""
    out: dict[str, Any] = {}

    def call() -> None:
        try:
            out["value"] = sync_call()
        except Exception as exc:
            out["value"] = exc

    def in_a_thread() -> None:  # (on the loop: after the writes queued, before its turn)
        writer = threading.Thread(target=call, daemon=True)
        writer.start()
        writer.join(5.0)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        own_loop(loop)
        tasks = [asyncio.ensure_future(pipeline.submit_async(f"a{i}")) for i in range(queued)]
        loop.call_soon(in_a_thread)
        await asyncio.wait(tasks, timeout=10)

    asyncio.run(main())
    return out.get("value", "hung")


def _committing(delay: float = 0.0) -> tuple[GroupCommit[str], list[str]]:
    committed: list[str] = []

    def commit(batch: list[Pending[str]]) -> None:
        time.sleep(delay)
        for pending in batch:
            committed.append(pending.write)
            pending.settle(pending.write)

    return GroupCommit(commit, in_place=True), committed


@pytest.mark.parametrize(
    "queued", [BATCH_LIMIT, BATCH_LIMIT + 40, 2 * BATCH_LIMIT], ids=["full", "more", "two-full"]
)
def test_a_thread_that_leads_behind_the_loops_queued_writes_commits_its_own(queued: int) -> None:
    """A thread that writes before the loop's turn leads the next commit, and its batch holds
    its own write whatever the loop queued ahead of it (more than a batch takes: it said
    the write failed though it landed; exactly a batch: the pipeline hung)."""
    pipeline, committed = _committing(delay=0.002)
    assert _behind_the_loops_queued_writes(pipeline, queued, lambda: pipeline.submit("t")) == "t"
    assert sorted(committed) == sorted(["t", *(f"a{i}" for i in range(queued))])
    assert not pipeline._busy


def test_a_threads_writes_together_behind_the_loops_queued_writes_commit() -> None:
    """The same for a thread's writes made together (a worker's claims: ``submit_all``)."""
    pipeline, _ = _committing()
    made = _behind_the_loops_queued_writes(
        pipeline, BATCH_LIMIT, lambda: pipeline.submit_all(["c1", "c2"])
    )
    assert made == ["c1", "c2"]
    assert not pipeline._busy
