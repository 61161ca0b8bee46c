"""Writes made together through a store's write pipeline, for the tests of its batches."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from stalwart._store.sql.pipeline import Write

__all__ = ["batch_sizes", "committing_threads", "held", "queued", "together", "traced_answers"]


WAIT_S = 30.0  # the most a test waits for the pipeline to reach a state


def held(store: Any) -> tuple[threading.Event, threading.Thread]:
    """A commit under way until the returned event is set (a write alone that waits for it),
    and the thread whose write it is."""
    gate = threading.Event()
    blocker = threading.Thread(
        target=store._batched, args=(Write("blocker", lambda _conn: True, gate.wait),)
    )
    blocker.start()
    queued(store, busy=True)
    return gate, blocker


def queued(store: Any, writes: int = 0, *, busy: bool = False) -> None:
    """Wait until ``writes`` writes wait in the store's pipeline (and a commit is under way,
    with ``busy``)."""
    deadline = time.monotonic() + WAIT_S
    pipeline = store._pipeline
    while len(pipeline._queue) < writes or (busy and not pipeline._busy):
        if time.monotonic() > deadline:
            raise AssertionError(f"the pipeline never had {writes} writes waiting")
        time.sleep(0.001)


@contextlib.contextmanager
def committing_threads(store: Any) -> Iterator[list[int]]:
    """The thread that leads each batch the store's pipeline commits meanwhile, in order."""
    threads: list[int] = []
    real = store._pipeline._commit

    def noted(batch: Any) -> None:
        threads.append(threading.get_ident())
        real(batch)

    store._pipeline._commit = noted
    try:
        yield threads
    finally:
        store._pipeline._commit = real


@contextlib.contextmanager
def batch_sizes(store: Any) -> Iterator[list[int]]:
    """The sizes of the batches of more than one write the store's pipeline commits together
    meanwhile (a batch of one is done alone)."""
    batches: list[int] = []
    real = store._write_together

    def counted(writes: list[Write]) -> list[Any]:
        batches.append(len(writes))
        return real(writes)

    store._write_together = counted
    try:
        yield batches
    finally:
        del store._write_together


def together(
    store: Any, calls: list[Callable[[], Any]], writes: int | None = None
) -> tuple[list[Any], list[int]]:
    """Run ``calls`` in threads while a commit is under way, so they queue for the next one
    (``writes`` of them, by default one a call); what each returned (or raised), and the sizes
    of the batches committed together."""
    results: list[Any] = [None] * len(calls)

    def call(i: int) -> None:
        try:
            results[i] = calls[i]()
        except Exception as exc:
            results[i] = exc

    with batch_sizes(store) as batches:
        gate, blocker = held(store)
        threads = [threading.Thread(target=call, args=(i,)) for i in range(len(calls))]
        for thread in threads:
            thread.start()
        queued(store, writes or len(calls))
        gate.set()
        for thread in [blocker, *threads]:
            thread.join(timeout=30)
    return results, batches


def traced_answers(store: Any, tmp_path: Path, call: Callable[[], Any]) -> tuple[Any, int]:
    """What ``call`` returned, and how many answers (ReadyForQuery) the PostgreSQL store's
    connections read meanwhile, from libpq's trace."""
    trace = tmp_path / "verb.trace"
    real = store._connection

    @contextlib.contextmanager
    def traced() -> Iterator[Any]:
        with real() as conn, trace.open("a") as out:
            conn.pgconn.trace(out.fileno())
            try:
                yield conn
            finally:
                conn.pgconn.untrace()

    store._connection = traced
    try:
        value = call()
    finally:
        del store._connection
    text = trace.read_text() if trace.exists() else ""
    return value, sum("ReadyForQuery" in line for line in text.splitlines())
