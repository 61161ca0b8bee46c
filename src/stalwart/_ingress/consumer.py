"""Consuming subscriptions while a worker serves runs: one thread with an event loop of its
own, one task per subscription, the deliveries in a small pool of threads.

Each message is delivered (``Delivery.deliver``, which commits) and only then acknowledged, or
rejected when its body does not fit. At most ``concurrency`` messages of a subscription are in
hand at once. When the broker goes away, or a delivery fails (the store is down), the
connection is closed (what was not acknowledged is delivered again, and the dedup ids make the
repeat harmless), the outage is logged and the source reconnects after a backoff that grows to
30 s; the worker serves runs meanwhile. Stopping stops taking messages, lets the deliveries in
hand finish and acknowledge, then closes the connections.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from .._errors import StoreError
from .delivery import Delivery, Outcome, Subscription
from .source import Message

if TYPE_CHECKING:
    from .._metrics import Metrics

__all__ = ["Consumers"]

log = logging.getLogger("stalwart")

FIRST_BACKOFF = 0.5
MAX_BACKOFF = 30.0
DRAIN_SECONDS = 10.0


class _Broken(Exception):
    """A delivery failed for a reason other than the body: reconnect."""


class _Session:
    """One subscription's connection, and the deliveries it has in hand."""

    def __init__(self, consumers: Consumers, sub: Subscription) -> None:
        self.consumers = consumers
        self.sub = sub
        self.slots = asyncio.Semaphore(sub.concurrency)
        self.in_hand: set[asyncio.Task[None]] = set()
        self.failure: BaseException | None = None
        self.reader: asyncio.Task[None] | None = None

    async def read(self) -> None:
        consumers = self.consumers
        stream: AsyncIterator[Message] = self.sub.source.messages(
            consumers.consumer,
            lease_seconds=consumers.delivery.runtime.lease_seconds,
            prefetch=self.sub.concurrency,
        )
        try:
            async for message in stream:
                await self.slots.acquire()
                if consumers.stopping:
                    self.slots.release()
                    break  # not acknowledged: delivered again, to a worker that serves
                consumers.reset_backoff(self.sub.name)
                task = asyncio.create_task(self.handle(message))
                self.in_hand.add(task)
                task.add_done_callback(self.in_hand.discard)
        finally:
            await self.drain()
            await stream.aclose()  # type: ignore[attr-defined]

    async def drain(self) -> None:
        if self.in_hand:
            await asyncio.wait(set(self.in_hand), timeout=DRAIN_SECONDS)

    async def handle(self, message: Message) -> None:
        loop = asyncio.get_running_loop()
        try:
            verdict = await loop.run_in_executor(
                self.consumers.pool,
                self.consumers.delivery.deliver,
                self.sub,
                message.id,
                message.body,
                getattr(message, "problem", None),  # e.g. a Redis entry without a body
            )
            if verdict.outcome is Outcome.REJECTED:
                await message.reject(verdict.reason or "rejected")
            else:
                await message.ack()
        except Exception as exc:
            if self.failure is None:
                self.failure = exc
                if self.reader is not None:
                    self.reader.cancel()  # reconnect: what is not acknowledged comes again
        finally:
            self.slots.release()


class Consumers:
    """Consumes an app's subscriptions in a thread while a worker serves (``start``/``stop``)."""

    def __init__(self, delivery: Delivery, subscriptions: list[Subscription]) -> None:
        self.delivery = delivery
        self.subscriptions = subscriptions
        self.consumer = delivery.runtime.owner
        self.stopping = False
        self.threads = min(32, sum(s.concurrency for s in subscriptions))  # each a connection
        self.pool = ThreadPoolExecutor(self.threads, thread_name_prefix="stalwart-in")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._backoff: dict[str, float] = {}
        self._sessions: dict[str, _Session] = {}  # each subscription's current connection

    def start(self, metrics: Metrics | None) -> None:
        """Declare each subscription in the store's listing and start consuming."""
        self.delivery.metrics = metrics
        runtime = self.delivery.runtime
        for sub in self.subscriptions:
            log.info(
                "ingress %s: connecting to %s (%s, %d at once)",
                sub.name,
                sub.source.describe(),
                sub.target,
                sub.concurrency,
                extra={"subscription": sub.name},
            )
            try:  # listed by `stalwart subscriptions` from now on, counts kept
                runtime.store.count_ingress(
                    sub.name,
                    kind=sub.kind,
                    target=sub.target,
                    accepted=0,
                    rejected=0,
                    now=runtime.clock.time(),
                )
            except StoreError as exc:  # the first message's count lists it instead
                log.warning("ingress %s: listing it in the store failed: %s", sub.name, exc)
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(loop, ready), name="stalwart-ingress", daemon=True
        )
        self._thread.start()
        ready.wait()
        self._loop = loop

    def _serve(self, loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        for sub in self.subscriptions:
            self._tasks.append(loop.create_task(self._consume(sub)))
        loop.call_soon(ready.set)
        loop.run_forever()
        loop.close()

    def reset_backoff(self, name: str) -> None:
        """A message arrived: the next outage of ``name`` waits the shortest time again."""
        self._backoff.pop(name, None)

    async def _consume(self, sub: Subscription) -> None:
        while not self.stopping:
            session = self._sessions[sub.name] = _Session(self, sub)
            session.reader = asyncio.create_task(session.read())
            try:
                await session.reader
                error: BaseException | None = session.failure
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if (task is not None and task.cancelling()) or session.failure is None:
                    raise
                error = session.failure
            except Exception as exc:
                error = session.failure or exc
            if self.stopping:
                return
            delay = self._backoff.get(sub.name, FIRST_BACKOFF)
            self._backoff[sub.name] = min(MAX_BACKOFF, delay * 2)
            log.warning(
                "ingress %s: %s %s; reconnecting in %.1f s (the worker serves runs meanwhile)",
                sub.name,
                sub.source.describe(),
                f"failed: {type(error).__name__}: {error}" if error else "closed the connection",
                delay,
                extra={"subscription": sub.name},
            )
            await asyncio.sleep(delay * (0.5 + random.random() / 2))

    async def _stop(self) -> None:
        self.stopping = True  # a reader takes no message from now on
        # The deliveries in hand acknowledge on open connections first: cancelling a reader
        # closes its connection (the source's iterator ends), and an acknowledgement in flight
        # would be lost with it, its message delivered again for nothing.
        in_hand = {task for session in self._sessions.values() for task in session.in_hand}
        if in_hand:
            await asyncio.wait(in_hand, timeout=DRAIN_SECONDS)
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=DRAIN_SECONDS + 5.0)

    def stop(self) -> None:
        """Stop taking messages, finish those in hand, close the connections."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._loop = None
        try:
            asyncio.run_coroutine_threadsafe(self._stop(), loop).result(DRAIN_SECONDS + 10.0)
        except Exception:
            log.warning("ingress: stopping the consumers took too long", exc_info=True)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10.0)
        self.pool.shutdown(wait=False)
        self.delivery.metrics = None
