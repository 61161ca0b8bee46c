"""Durable streams on every backend: what a run emits, read back in order; replay writes
nothing again; a retried attempt appends after the one before; readers follow a live run."""

from __future__ import annotations

import asyncio
import datetime as dt
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import stalwart
from stalwart import StreamChunk, stream_text

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def app(store_url: str) -> Iterator[stalwart.Stalwart]:
    """Waits and followers need time to pass: the real clock."""
    with stalwart.Stalwart(store_url) as instance:
        yield instance


def _chunks(app: stalwart.Stalwart, wid: str, stream: str = "default") -> list[StreamChunk]:
    return list(app.stream(wid, stream=stream, follow=False))


def test_a_runs_emits_are_read_back_in_order_with_their_step_and_attempt(
    app: stalwart.Stalwart,
) -> None:
    @app.step
    def talk(words: list[str]) -> int:
        for word in words:
            stalwart.emit(word)
        stalwart.emit({"tokens": len(words)}, stream="usage")
        return len(words)

    @app.workflow
    def agent() -> int:
        stalwart.emit("> ")
        return talk(["hello", " ", "world"])

    assert app.run(agent, workflow_id="s1") == 3
    chunks = _chunks(app, "s1")
    assert [c.offset for c in chunks] == [0, 1, 2, 3]
    assert [(c.seq, c.attempt) for c in chunks] == [(None, 0)] + [(1, 1)] * 3
    assert stream_text(chunks) == "> hello world"
    assert all(c.at.tzinfo is dt.UTC for c in chunks)
    assert [c.data for c in _chunks(app, "s1", "usage")] == [{"tokens": 3}]
    assert [c.offset for c in app.stream("s1", after=1, follow=False)] == [2, 3]


def test_replay_writes_nothing_again(app: stalwart.Stalwart) -> None:
    calls = 0

    @app.step
    def think() -> None:
        nonlocal calls
        calls += 1
        stalwart.emit("thought ")

    @app.workflow
    def agent() -> str:
        stalwart.emit("a ")
        stalwart.emit("b ")
        think()
        stalwart.sleep(dt.timedelta(milliseconds=50))  # resumed by replaying from the top
        stalwart.emit("c")
        return "done"

    assert app.run(agent, workflow_id="r1") == "done"
    assert calls == 1
    assert stream_text(_chunks(app, "r1")) == "a b thought c"
    assert [c.offset for c in _chunks(app, "r1")] == [0, 1, 2, 3]


def test_a_retried_attempt_appends_after_the_one_before(app: stalwart.Stalwart) -> None:
    @app.step(retry=stalwart.Retry(max_attempts=3, initial_delay=0.0))
    def answer() -> str:
        stalwart.emit(f"try {stalwart.attempt()}: ")
        if stalwart.attempt() < 2:
            stalwart.emit("oops")
            raise RuntimeError("flaky")
        stalwart.emit("fine")
        return "ok"

    @app.workflow
    def agent() -> str:
        return answer()

    assert app.run(agent, workflow_id="t1") == "ok"
    chunks = _chunks(app, "t1")
    assert [(c.offset, c.attempt, c.data) for c in chunks] == [
        (0, 1, "try 1: "),
        (1, 1, "oops"),
        (2, 2, "try 2: "),
        (3, 2, "fine"),
    ]
    assert stream_text(chunks) == "try 2: fine"


def test_a_follower_sees_chunks_as_they_come_and_ends_with_the_run(
    app: stalwart.Stalwart,
) -> None:
    release = threading.Event()

    @app.step
    def slow() -> None:
        stalwart.emit("first ")
        assert release.wait(10)
        stalwart.emit("second")

    @app.workflow
    def agent() -> None:
        slow()

    worker = threading.Thread(target=app.run, args=(agent,), kwargs={"workflow_id": "f1"})
    worker.start()
    while app.list_workflows() == []:
        time.sleep(0.005)
    seen: list[str] = []
    for chunk in app.stream("f1", timeout=10):
        seen.append(chunk.data)
        release.set()  # the first chunk came before the step's outcome: let it go on
    worker.join(10)
    assert seen == ["first ", "second"]


def test_a_follower_times_out_without_chunks_and_an_unknown_run_is_refused(
    app: stalwart.Stalwart,
) -> None:
    @app.workflow
    def waits() -> None:
        stalwart.wait_for_event("go")

    handle = app.start(waits, workflow_id="w1")
    with pytest.raises(TimeoutError, match="w1"):
        list(app.stream(handle.workflow_id, timeout=0.2))
    with pytest.raises(stalwart.WorkflowNotFound):
        app.stream("nope")
    with pytest.raises(ValueError, match="after"):
        app.stream("w1", after=-2)


def test_stream_async_reads_like_stream(app: stalwart.Stalwart) -> None:
    @app.workflow
    def agent() -> None:
        for word in ("one ", "two"):
            stalwart.emit(word)

    app.run(agent, workflow_id="a1")

    async def read() -> list[StreamChunk]:
        return [chunk async for chunk in app.stream_async("a1", timeout=5)]

    assert stream_text(asyncio.run(read())) == "one two"


def test_emit_refuses_what_it_cannot_keep(app: stalwart.Stalwart) -> None:
    with pytest.raises(stalwart.InvalidOperation, match="inside a workflow or a step"):
        stalwart.emit("nowhere")

    @app.workflow
    def big() -> None:
        stalwart.emit("x" * (1024 * 1024 + 1))

    with pytest.raises(stalwart.WorkflowFailed, match="ValueError: .*over the 1 MiB limit"):
        app.run(big, workflow_id="b1")


def test_on_postgres_chunks_wake_stream_readers_and_not_idle_workers() -> None:
    """A flush notifies with its own payload: a reader's ``stream_changes`` moves, the
    ``changes`` idle workers wait on does not (each flush would wake every worker else)."""
    from stalwart import testing
    from stalwart._store.base import NewChunk, RunChunks
    from stalwart._store.rows import Entry
    from store_urls import postgres_schema_url

    for url in postgres_schema_url():
        with stalwart.Stalwart(url) as writer, stalwart.Stalwart(url) as reader:
            store, other = testing.store_of(writer), testing.store_of(reader)
            other.changes.current()  # starts the reader's listener
            deadline = time.monotonic() + 30
            while not other.changes.live:  # LISTENing: the insert below is heard, not missed
                assert time.monotonic() < deadline, "the reader's listener did not connect"
                other.changes.wait(other.changes.version, 0.05)
            seen = other.changes.version
            started = Entry(kind="run", name="started", status="completed")
            assert store.create_run(
                workflow_id="n1", name="agent", status="running", queue="default",
                priority=0, input=b"Jnull", now=1.0, owner="w1", lease_until=2e9, entry=started,
            )  # fmt: skip
            assert other.changes.wait(seen, 5.0) != seen  # the run's insert, heard
            runs, streams = other.changes.version, other.stream_changes.current()
            chunk = NewChunk("default", 1, 1, "o.0", b'J"x"', 1.0)
            assert store.append_chunks([RunChunks("n1", "w1", [chunk])]) == [True]
            assert other.stream_changes.wait(streams, 5.0) != streams
            time.sleep(0.2)
            assert other.changes.version == runs


def test_a_follower_ends_when_the_run_needs_attention(app: stalwart.Stalwart) -> None:
    @app.step
    def think(i: int) -> None:
        stalwart.emit(f"step {i} ")

    @app.workflow(budget=stalwart.Budget(max_steps=1))
    def agent() -> None:
        think(1)
        think(2)  # past the budget: the run waits for an operator

    with pytest.raises(stalwart.NeedsAttention):
        app.run(agent, workflow_id="n1")
    assert app.handle("n1").status() == "needs_attention"
    assert stream_text(app.stream("n1", timeout=5)) == "step 1 "


def test_while_the_store_cannot_be_written_emit_buffers_8_mib_then_waits(tmp_path: Path) -> None:
    """Another connection holds SQLite's write lock (the store is unwritable for now): the
    step's emits return until 8 MiB wait, then block; once the lock is gone the waiting
    chunks are written, the emits go on, and the stream is whole and gap-free."""
    path = tmp_path / "locked.db"
    started, locked = threading.Event(), threading.Event()
    emitted: list[int] = []
    with stalwart.Stalwart(f"sqlite:///{path}") as app:

        @app.step
        def big() -> int:
            started.set()
            assert locked.wait(10)
            for i in range(100):
                stalwart.emit("x" * 100_000)  # about 100 KB encoded
                emitted.append(i)
            return len(emitted)

        @app.workflow
        def agent() -> int:
            return big()

        runner = threading.Thread(target=app.run, args=(agent,), kwargs={"workflow_id": "o1"})
        runner.start()
        assert started.wait(10)
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN EXCLUSIVE")
        locked.set()
        time.sleep(1.0)
        waiting = len(emitted)
        time.sleep(0.5)
        assert len(emitted) == waiting  # blocked, not slowed
        assert 80 <= waiting <= 85  # 8 MiB of 100 KB chunks
        blocker.execute("ROLLBACK")
        blocker.close()
        runner.join(30)
        chunks = list(app.stream("o1", follow=False))
    assert len(emitted) == 100
    assert [c.offset for c in chunks] == list(range(100))


def test_async_workflows_and_steps_emit_too(app: stalwart.Stalwart) -> None:
    @app.step
    async def part(name: str) -> str:
        stalwart.emit(f"<{name}>")
        await asyncio.sleep(0)
        stalwart.emit(f"</{name}>")
        return name

    @app.workflow
    async def agent() -> list[str]:
        stalwart.emit("start ")
        names = await asyncio.gather(part("a"), part("b"))
        await stalwart.sleep_async(0.05)  # resumed by replaying: the emits above add nothing
        stalwart.emit(" end")
        return list(names)

    assert app.run(agent, workflow_id="as1") == ["a", "b"]
    chunks = _chunks(app, "as1")
    assert [c.offset for c in chunks] == list(range(6))
    data = [c.data for c in chunks]
    assert data[0] == "start " and data[-1] == " end"
    assert sorted(data[1:5]) == sorted(["<a>", "</a>", "<b>", "</b>"])


def test_a_check_replays_emits_without_writing_them(app: stalwart.Stalwart) -> None:
    from stalwart import testing

    @app.step
    def think() -> None:
        stalwart.emit("thought ")

    @app.workflow
    def agent() -> None:
        stalwart.emit("before ")
        think()
        stalwart.wait_for_event("go")
        stalwart.emit("after")

    runner = threading.Thread(target=app.run, args=(agent,), kwargs={"workflow_id": "c1"})
    runner.start()
    while not app.list_workflows() or app.handle("c1").status() != "suspended":
        time.sleep(0.01)
    store = testing.store_of(app)
    writes: list[object] = []
    real = store.append_chunks
    store.append_chunks = lambda batch: writes.append(batch) or real(batch)  # type: ignore[method-assign]
    try:
        assert [r.ok for r in app.check(["c1"])] == [True]
        time.sleep(0.1)  # what a flush would have written by now
    finally:
        store.append_chunks = real  # type: ignore[method-assign]
    assert writes == []  # the check's replay emitted nothing to write
    app.send_event("c1", "go")
    runner.join(10)
    assert stream_text(_chunks(app, "c1")) == "before thought after"


def test_a_workflow_code_emit_follows_the_outcome_of_the_step_it_shows(
    app: stalwart.Stalwart,
) -> None:
    """A sync step's outcome waits for the next boundary, but a chunk emitted in workflow code
    after it is written at once: the outcome is journaled first, so a crash cannot leave a
    chunk showing a result the journal lost (the step would run again, maybe differently)."""
    seen: list[list[str]] = []

    @app.step
    def pick() -> str:
        return "forty-two"

    @app.workflow
    def answers() -> str:
        value = pick()
        stalwart.emit(f"answer={value}")
        seen.append([e.status for e in app.journal("a1") if e.kind == "step"])  # committed
        return value

    assert app.run(answers, workflow_id="a1") == "forty-two"
    assert seen == [["completed"]]
    assert stream_text(_chunks(app, "a1")) == "answer=forty-two"
