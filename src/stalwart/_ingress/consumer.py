"""Consuming subscriptions while a worker serves runs: one thread with an event loop of its
own, one task per subscription, the deliveries in a small pool of threads.

The messages a source has ready are delivered as one batch (``Delivery.deliver_all``: one
store call, one transaction) and only then acknowledged, or rejected when a body does not fit;
one batch of a subscription is in the store at a time, and what arrives meanwhile is the next
batch. At most ``concurrency`` messages of a subscription are in hand at once. When the broker
goes away, or a delivery fails (the store is down), the connection is closed (nothing of the
batch is acknowledged: it is delivered again, and the dedup ids make the repeat harmless), the
outage is logged and the source reconnects after a backoff that grows to 30 s; the worker
serves runs meanwhile. Stopping stops taking messages, lets the batches in hand finish and
acknowledge, then closes the connections.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections.abc import AsyncIterator, Awaitable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from .._errors import StoreError
from .delivery import Delivery, Outcome, Subscription, Verdict
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
    """One subscription's connection, and the batches of deliveries it has in hand."""

    def __init__(self, consumers: Consumers, sub: Subscription) -> None:
        self.consumers = consumers
        self.sub = sub
        self.slots = asyncio.Semaphore(sub.concurrency)
        self.ready: list[Message] = []  # taken, not yet in a batch
        self.delivering = False  # a batch is in the store: the next waits, and grows, meanwhile
        self.in_hand: set[asyncio.Task[None]] = set()
        self.failure: BaseException | None = None
        self.reader: asyncio.Task[None] | None = None

    async def read(self) -> None:
        consumers = self.consumers
        loop = asyncio.get_running_loop()
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
                if not self.ready:
                    # Runs once the reader waits: the batch is what the source had ready.
                    loop.call_soon(self.flush)
                self.ready.append(message)
        finally:
            if self.failure is None:
                self.flush()
            else:  # the connection goes: what was not acknowledged is delivered again
                for _message in self.ready:
                    self.slots.release()
                self.ready = []
            await self.drain()
            await stream.aclose()  # type: ignore[attr-defined]

    def flush(self) -> None:
        """Deliver the messages taken so far as one batch, unless a batch is in the store:
        that one's end flushes what came meanwhile (one batch at a time, as large as what
        arrives while the one before commits)."""
        if self.delivering or not self.ready:
            return
        batch, self.ready = self.ready, []
        self.delivering = True
        task = asyncio.create_task(self.handle(batch))
        self.in_hand.add(task)
        task.add_done_callback(self.in_hand.discard)

    async def drain(self) -> None:
        """Wait (``DRAIN_SECONDS`` at most) for the batches in hand, and those they flush."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DRAIN_SECONDS
        while self.in_hand and loop.time() < deadline:
            await asyncio.wait(set(self.in_hand), timeout=deadline - loop.time())

    async def handle(self, batch: list[Message]) -> None:
        """Deliver ``batch`` (committed before anything is acknowledged), then acknowledge or
        reject each message; on a failure acknowledge nothing and reconnect."""
        loop = asyncio.get_running_loop()
        consumers, sub = self.consumers, self.sub
        # ``problem``: the source knows a message cannot fit (a Redis entry without a body)
        items = [(m.id, m.body, getattr(m, "problem", None)) for m in batch]
        try:
            try:
                if sub.start is not None:  # one store call, one transaction
                    verdicts = await loop.run_in_executor(
                        consumers.pool, consumers.delivery.deliver_all, sub, items
                    )
                else:  # an event is its own store call; concurrent ones share transactions
                    verdicts = await asyncio.gather(
                        *(
                            loop.run_in_executor(
                                consumers.pool, consumers.delivery.deliver, sub, *item
                            )
                            for item in items
                        )
                    )
            finally:
                self.delivering = False
            if self.failure is None:
                self.flush()  # what came meanwhile commits while these are acknowledged
            await _settle(sub.source, batch, verdicts)
        except Exception as exc:
            if self.failure is None:
                self.failure = exc
                if self.reader is not None:
                    self.reader.cancel()  # reconnect: what is not acknowledged comes again
        finally:
            for _message in batch:
                self.slots.release()


async def _settle(source: Any, batch: list[Message], verdicts: list[Verdict]) -> None:
    """Reject the messages whose verdict is a rejection, acknowledge the others (in one call
    when the source has one: its ``_ack_all``, see ``_ingress.source``)."""
    handled: list[Message] = []
    ends: list[Awaitable[None]] = []
    for message, verdict in zip(batch, verdicts, strict=True):
        if verdict.outcome is Outcome.REJECTED:
            ends.append(message.reject(verdict.reason or "rejected"))
        else:
            handled.append(message)
    ack_all = getattr(source, "_ack_all", None)
    if ack_all is not None and handled:
        ends.append(ack_all(handled))
    else:
        ends.extend(message.ack() for message in handled)
    await asyncio.gather(*ends)


class Consumers:
    """Consumes an app's subscriptions in a thread while a worker serves (``start``/``stop``)."""

    def __init__(self, delivery: Delivery, subscriptions: list[Subscription]) -> None:
        self.delivery = delivery
        self.subscriptions = subscriptions
        self.consumer = delivery.runtime.owner
        self.stopping = False
        # Each thread a store connection: a subscription that starts runs has one batch in the
        # store at a time; one that sends events, up to ``concurrency`` deliveries.
        needs = [1 if s.start is not None else s.concurrency for s in subscriptions]
        self.threads = min(32, sum(needs))
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
