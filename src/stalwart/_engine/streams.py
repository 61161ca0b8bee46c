"""``stalwart.emit``: a run's stream chunks, written in batches, never one transaction each.

A chunk waits in its invocation's ``RunStream`` until one of two writers takes it:

- the step outcome (or the deferred outcomes) journaled next takes the run's waiting chunks
  into its own transaction (``Invocation.append``);
- the process's background flusher (one thread per store object, started by the first emit)
  writes every run's waiting chunks in one stream-only transaction, at most every
  ``FLUSH_EVERY`` seconds while chunks wait: a chunk is durable and visible within about
  that long of its emit, and a busy process spends at most 1 / ``FLUSH_EVERY`` stream-only
  transactions a second, however many runs emit.

Before a wait is recorded, the run suspends or ends, the engine writes the waiting chunks
itself (``flush_stream``), so nothing a run emitted is ever behind its own next state. A
flush that fails (the store is unreachable) puts the chunks back and tries again; meanwhile
``emit`` buffers up to ``MAX_BUFFERED`` bytes per run, then blocks.

Workflow code replays: its emits are named by the journal position of the call that follows
them (and how many came before at that position), so a replayed emit finds its chunk written
already and adds nothing. A step attempt's emits are named by the invocation and a counter:
a retried or recovered attempt runs again and appends after what the earlier one wrote.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from typing import Any

from .._signals import LeaseLost
from .._store.base import NewChunk, RunChunks, Store
from .buffer import RunStream
from .invocation import Invocation, StepScope, flush_outcomes

__all__ = ["FLUSH_EVERY", "MAX_CHUNK", "close_streams", "emit", "flush_stream"]

log = logging.getLogger("stalwart")

MAX_CHUNK = 1024 * 1024  # the largest chunk, encoded
FLUSH_EVERY = 0.025  # seconds between two stream-only flushes while chunks wait
_RETRY_FIRST, _RETRY_LONGEST = 0.05, 1.0  # a failed flush is tried again after these pauses


def emit(inv: Invocation, scope: StepScope | None, data: Any, stream: str) -> None:
    """Queue ``data`` for run ``inv``'s stream ``stream`` (``scope``: the step attempt that
    emits it, ``None`` in workflow code)."""
    if not isinstance(stream, str) or not stream:
        raise ValueError(f"stalwart.emit(stream={stream!r}): a stream is named by a non-empty str")
    payload = inv.runtime.codec.encode(data)
    if len(payload) > MAX_CHUNK:
        raise ValueError(
            f"stalwart.emit(): a chunk of {len(payload)} bytes encoded is over the 1 MiB limit; "
            "emit it in smaller pieces (or store it as a step result)"
        )
    if not inv.writes_streams:
        return
    buffer = inv.stream
    if buffer is None:
        buffer = inv.stream = RunStream(inv.workflow_id, inv.owner, _flusher(inv).ready)
    if scope is None:
        if inv.defers():
            # The step outcomes (and values) this code went on past are journaled first: a chunk the
            # flusher writes at once may show them, and must not outlive them in a crash
            # (the step would run again and the stream keep what its first attempt said).
            flush_outcomes(inv)
        position = inv.peek_position()
        n = buffer.at_position.get(position, 0)
        buffer.at_position[position] = n + 1
        seq, attempt, origin = None, 0, f"w{position}#{n}"
    else:
        seq, attempt, origin = scope.seq, scope.attempt, buffer.origin()
    buffer.add(NewChunk(stream, seq, attempt, origin, payload, inv.runtime.clock.time()))


def flush_stream(inv: Invocation) -> None:
    """Write run ``inv``'s waiting chunks now (before a wait, a suspension or the run's end);
    ``LeaseLost`` if its lease is gone, ``StoreFailed`` if the store is."""
    buffer = inv.stream
    if buffer is None or not buffer.has_pending():
        return
    with inv.journaling():
        held = buffer.write_with(lambda chunks: _write(inv, chunks))
    if not held:
        inv.lease_lost.set()
        raise LeaseLost()
    inv.runtime.store.stream_changes.push()  # readers in this process (no version moves)


def _write(inv: Invocation, chunks: list[NewChunk]) -> bool:
    """``chunks`` written, if any (the background writer may have written them meanwhile);
    whether the lease still held."""
    if not chunks:
        return True
    return inv.store.append_chunks([RunChunks(inv.workflow_id, inv.owner, chunks)])[0]


def close_streams(store: Store) -> None:
    """Write what waits and stop the store's flusher (the app closes)."""
    flusher = _FLUSHERS.pop(store, None)
    if flusher is not None:
        flusher.close()


class _Flusher:
    """The background writer of one store object's stream chunks, in this process."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._cond = threading.Condition()
        self._ready: dict[int, RunStream] = {}
        self._closed = False
        self._last = 0.0
        self.pid = os.getpid()
        self._thread = threading.Thread(target=self._loop, name="stalwart-streams", daemon=True)
        self._thread.start()

    def ready(self, buffer: RunStream) -> None:
        """``buffer`` has chunks waiting."""
        with self._cond:
            self._ready[id(buffer)] = buffer
            self._cond.notify()

    def close(self) -> None:
        """Flush what waits, then stop."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout=5.0)

    def _loop(self) -> None:
        pause = _RETRY_FIRST
        while True:
            with self._cond:
                while not self._ready and not self._closed:
                    self._cond.wait()
                if not self._ready:
                    return
                closing = self._closed
            delay = self._last + FLUSH_EVERY - time.monotonic()
            if delay > 0 and not closing:
                time.sleep(delay)
            with self._cond:
                buffers = list(self._ready.values())
                self._ready.clear()
            self._last = time.monotonic()
            if self._flush(buffers):
                pause = _RETRY_FIRST
            elif closing:
                return  # the store is gone: what waits is lost, as in a crash
            else:
                time.sleep(pause)
                pause = min(pause * 2, _RETRY_LONGEST)

    def _flush(self, buffers: list[RunStream]) -> bool:
        """One stream-only transaction for every run's waiting chunks; whether it committed."""
        taken: list[tuple[RunStream, list[NewChunk]]] = []
        try:
            for buffer in buffers:
                if not buffer.writing.acquire(blocking=False):
                    self.ready(buffer)  # its step's outcome is writing them: look again later
                    continue
                chunks = buffer.take()
                if chunks:
                    taken.append((buffer, chunks))
                else:
                    buffer.writing.release()
            if not taken:
                return True
            batch = [RunChunks(b.workflow_id, b.owner, chunks) for b, chunks in taken]
            try:
                held = self._store.append_chunks(batch)
            except Exception as exc:  # the store's outage, or anything else: tried again
                log.warning("stream chunks not written yet (tried again): %s", exc)
                for buffer, chunks in taken:
                    buffer.put_back(chunks)
                return False
            for (buffer, chunks), kept in zip(taken, held, strict=True):
                buffer.written(chunks)
                if not kept:
                    log.warning(
                        "run %s: stream chunks dropped: its lease is lost", buffer.workflow_id
                    )
            self._store.stream_changes.push()
            return True
        finally:
            for buffer, _chunks in taken:
                buffer.writing.release()


_FLUSHERS: weakref.WeakKeyDictionary[Any, _Flusher] = weakref.WeakKeyDictionary()
_FLUSHERS_LOCK = threading.Lock()


def _flusher(inv: Invocation) -> _Flusher:
    store = inv.runtime.store
    with _FLUSHERS_LOCK:
        flusher = _FLUSHERS.get(store)
        if flusher is None or flusher.pid != os.getpid():  # a forked child starts its own
            flusher = _FLUSHERS[store] = _Flusher(store)
        return flusher
