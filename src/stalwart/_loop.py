"""One event loop per app, in a daemon thread of its own, and a way to run coroutines on it.

Loop-bound objects that user code creates once (``openai.AsyncOpenAI()``, an
``httpx.AsyncClient``, an asyncpg pool) bind to the first loop that uses them. If every
execution of an async run had a loop of its own, such a client would break on the second run
("Event loop is closed", "bound to a different event loop"). So an app keeps one loop for as
long as it lives: ``app.run`` from sync code and every worker slot submit their async runs to
it, and block only their own thread while the run executes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["AppLoop", "run_on"]

T = TypeVar("T")


class _Carried(BaseException):
    """A ``KeyboardInterrupt`` or ``SystemExit`` raised on the loop, carried to the thread
    waiting for the coroutine (raised as itself on the loop, it would stop the loop)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(repr(error))
        self.error = error


async def _carrying(coro: Coroutine[Any, Any, T]) -> T:
    try:
        return await coro
    except (KeyboardInterrupt, SystemExit) as exc:
        raise _Carried(exc) from None


def run_on(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on ``loop`` (which runs in another thread) and wait for its outcome."""
    future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(_carrying(coro), loop)
    try:
        return future.result()
    except _Carried as carried:
        raise carried.error from None
    except BaseException:
        # Interrupted here (KeyboardInterrupt): don't leave the coroutine running unseen.
        if not future.done():
            future.cancel()
        raise


class AppLoop:
    """A long-lived event loop in a daemon thread, started on first use."""

    def __init__(self, prepare: Callable[[asyncio.AbstractEventLoop], None]) -> None:
        self._prepare = prepare  # called with each new loop before anything runs on it
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The loop, started if it is not running yet."""
        with self._lock:
            if self._closed:
                raise RuntimeError("this stalwart app was closed; its event loop is gone")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._prepare(loop)
                ready = threading.Event()
                thread = threading.Thread(
                    target=self._serve, args=(loop, ready), name="stalwart-loop", daemon=True
                )
                thread.start()
                ready.wait()
                self._loop, self._thread = loop, thread
            return self._loop

    @property
    def closing(self) -> bool:
        """Whether :meth:`close` was called (it then cancels every task on the loop)."""
        return self._closed

    def in_loop_thread(self) -> bool:
        """Whether the caller is this loop's own thread (where blocking on it deadlocks)."""
        return self._thread is not None and threading.current_thread() is self._thread

    @staticmethod
    def _serve(loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        loop.call_soon(ready.set)
        loop.run_forever()

    def close(self) -> None:
        """Cancel what still runs on the loop, stop it and close it."""
        with self._lock:
            self._closed = True
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return

        async def shut_down() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=5.0)
            await loop.shutdown_asyncgens()
            loop.stop()

        if thread is threading.current_thread():
            loop.stop()
            return
        asyncio.run_coroutine_threadsafe(shut_down(), loop)
        thread.join(timeout=10.0)
        if not thread.is_alive():
            loop.close()

    def forget(self) -> None:
        """In a forked child: the parent's loop thread does not exist here; start afresh."""
        self._lock = threading.Lock()
        self._loop = None
        self._thread = None
