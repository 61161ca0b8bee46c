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
import contextlib
import contextvars
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from ._signals import LoopClosed

__all__ = ["AppLoop", "in_own_thread", "run_on"]

T = TypeVar("T")

# Threads for the engine's own blocking calls awaited on a loop (``AppLoop.blocking``); made as
# they are needed, so an app that never needs one starts none.
BLOCKING_THREADS = 16


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
    """Run ``coro`` on ``loop`` (which runs in another thread) and wait for its outcome;
    ``LoopClosed`` if the loop is closed (``coro`` is closed unrun)."""
    if loop.is_closed():
        coro.close()
        raise LoopClosed("its event loop is closed")
    carried = _carrying(coro)
    try:
        future: concurrent.futures.Future[T] = asyncio.run_coroutine_threadsafe(carried, loop)
    except RuntimeError:  # closed meanwhile
        carried.close()
        coro.close()
        raise LoopClosed("its event loop is closed") from None
    try:
        return future.result()
    except _Carried as carried:
        raise carried.error from None
    except BaseException:
        # Interrupted here (KeyboardInterrupt): don't leave the coroutine running unseen.
        if not future.done():
            future.cancel()
        raise


async def in_own_thread(fn: Callable[[], T], name: str) -> T:
    """``fn()`` in a thread of its own (started now, not taken from a pool), awaited on the
    running loop. For a call that waits on work this loop does (``app.run_async``: the run's
    coroutines run here): in a thread of the loop's default executor, enough such calls would
    hold every thread that the work they wait for needs (a step's ``asyncio.to_thread``, a
    client's DNS lookup), and wait for ever. A cancellation of the awaiting task leaves the
    call to end on its own, as ``asyncio.to_thread`` does."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def call() -> None:
        try:
            result = context.run(fn)
        except BaseException as exc:
            _hand(loop, future, _failed, exc)
        else:
            _hand(loop, future, _succeeded, result)

    threading.Thread(target=call, name=name).start()  # (the interpreter waits for it at exit)
    return await future


def _hand(
    loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], how: Any, what: Any
) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed: nobody awaits it any more
        loop.call_soon_threadsafe(how, future, what)


def _succeeded(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():  # (cancelled meanwhile)
        future.set_result(result)


def _failed(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


class AppLoop:
    """A long-lived event loop in a daemon thread, started on first use."""

    def __init__(self, prepare: Callable[[asyncio.AbstractEventLoop], None]) -> None:
        self._prepare = prepare  # called with each new loop before anything runs on it
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._blocking: concurrent.futures.ThreadPoolExecutor | None = None

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

    def blocking(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``fn(*args)`` in a thread of the engine's own, awaited on the running loop (any
        loop: a caller's under ``run_async`` too). Not the loop's default executor, which
        user code's ``asyncio.to_thread`` calls may fill (it has a handful of threads); once
        the app closed, that default executor after all."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._blocking is None and not self._closed:
                self._blocking = concurrent.futures.ThreadPoolExecutor(
                    BLOCKING_THREADS, thread_name_prefix="stalwart-blocking"
                )
            executor = self._blocking
        try:
            return loop.run_in_executor(executor, fn, *args)
        except RuntimeError:  # shut down meanwhile: the app closes
            return loop.run_in_executor(None, fn, *args)

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
            blocking, self._blocking = self._blocking, None
        if blocking is not None:  # what it runs ends on its own (a write is never cut short)
            blocking.shutdown(wait=False)
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
        self._blocking = None
