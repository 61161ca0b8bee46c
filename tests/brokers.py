"""The real brokers of the ingress tests: RabbitMQ 127.0.0.1:5672, NATS JetStream
127.0.0.1:4222, Redis 127.0.0.1:6379.

:func:`broker` gives a :class:`Broker` over a queue, stream or subject of a name unique to the
test (deleted by ``cleanup``): ``publish`` with an id, ``hold`` (a consumer that takes messages
and dies without acknowledging them) and ``source`` (the ``stalwart.ingress`` source). A broker
that does not answer skips the test with one line, except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import pytest

from stalwart.ingress import NATS, RabbitMQ, RedisStream

__all__ = [
    "AMQP_URL",
    "BROKERS",
    "REDIS_URL",
    "WAIT_S",
    "Broker",
    "broker",
    "require",
    "wait_until",
]

AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
NATS_URL = "nats://127.0.0.1:4222"
REDIS_URL = "redis://127.0.0.1:6379/0"
PORTS = {"rabbitmq": 5672, "nats": 4222, "redis": 6379}
BROKERS = sorted(PORTS)


EXTRAS = {"ui": ("fastapi", "uvicorn")}  # a docs example may need an extra, not a broker


def require(kind: str) -> None:
    """Skip (fail under ``CI=true``) when the broker ``kind`` does not answer on its port, or
    the extra ``kind`` (``ui``) is not installed."""
    if kind in EXTRAS:
        missing = [name for name in EXTRAS[kind] if importlib.util.find_spec(name) is None]
        if not missing:
            return
        message = f"the {kind} extra is not installed ({missing}): pip install -e '.[{kind}]'"
    else:
        port = PORTS[kind]
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2.0):
                return
        except OSError as exc:
            message = f"{kind} does not answer on 127.0.0.1:{port} ({exc}); start it to run this"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


WAIT_S = 60.0


def wait_until(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` until it holds; fail saying ``what`` after ``WAIT_S``."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {WAIT_S}s"
        time.sleep(0.05)


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def body(value: Any) -> bytes:
    """A JSON body."""
    return json.dumps(value).encode()


class Broker:
    """One broker's queue, stream or subject, named for one test."""

    def __init__(self, kind: str, name: str | None = None) -> None:
        self.kind = kind
        self.name = name or f"t{uuid.uuid4().hex[:10]}"
        self.subject = f"{self.name}.in"

    def source(self) -> Any:
        """The ``stalwart.ingress`` source of it."""
        if self.kind == "rabbitmq":
            return RabbitMQ(AMQP_URL, self.name)
        if self.kind == "nats":
            return NATS(NATS_URL, self.subject, stream=self.name)
        return RedisStream(REDIS_URL, self.name, group="agents")

    def publish(self, messages: list[tuple[str, bytes]]) -> list[str]:
        """Publish ``(id, body)`` pairs; the ids the consumers will see (Redis: the entry ids)."""
        return list(_run(getattr(self, f"_publish_{self.kind}")(messages)))

    async def _publish_rabbitmq(self, messages: list[tuple[str, bytes]]) -> list[str]:
        import aio_pika

        connection = await aio_pika.connect(AMQP_URL)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            await channel.declare_queue(self.name, durable=True)
            for mid, data in messages:
                await channel.default_exchange.publish(
                    aio_pika.Message(data, message_id=mid), routing_key=self.name
                )
        return [mid for mid, _ in messages]

    async def _publish_nats(self, messages: list[tuple[str, bytes]]) -> list[str]:
        import nats
        from nats.js.errors import NotFoundError

        client = await nats.connect(NATS_URL)
        try:
            js = client.jetstream()
            try:
                await js.stream_info(self.name)
            except NotFoundError:
                await js.add_stream(name=self.name, subjects=[self.subject])
            for mid, data in messages:
                await js.publish(self.subject, data, headers={"Nats-Msg-Id": mid})
        finally:
            await client.close()
        return [mid for mid, _ in messages]

    async def _publish_redis(self, messages: list[tuple[str, bytes]]) -> list[str]:
        import redis.asyncio

        client = redis.asyncio.from_url(REDIS_URL)
        try:
            ids = []
            for _mid, data in messages:
                ids.append((await client.xadd(self.name, {"body": data})).decode())
            return ids
        finally:
            await client.aclose()

    def hold(self, count: int, lease_seconds: float) -> list[tuple[str, bytes]]:
        """A consumer of the subscription's own queue, group or durable consumer takes
        ``count`` messages and dies without acknowledging them: they come again (RabbitMQ at
        once, JetStream after ``lease_seconds``, Redis when claimed after it). Their ids and
        bodies."""
        return list(_run(getattr(self, f"_hold_{self.kind}")(count, lease_seconds)))

    async def _hold_rabbitmq(self, count: int, lease_seconds: float) -> list[tuple[str, bytes]]:
        import aio_pika

        connection = await aio_pika.connect(AMQP_URL)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(self.name, durable=True)
            taken = []
            while len(taken) < count:
                msg = await queue.get(no_ack=False, fail=False, timeout=5)
                if msg is None:
                    await asyncio.sleep(0.05)
                    continue
                taken.append((msg.message_id or "", msg.body))
        return taken  # closing the connection unacknowledged requeues them

    async def _hold_nats(self, count: int, lease_seconds: float) -> list[tuple[str, bytes]]:
        import nats
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        source = self.source()
        client = await nats.connect(NATS_URL)
        try:
            js = client.jetstream()
            config = ConsumerConfig(
                durable_name=source.durable,
                deliver_policy=DeliverPolicy.ALL,
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=lease_seconds,
                filter_subject=self.subject,
            )
            pull = await js.pull_subscribe(
                self.subject, durable=source.durable, stream=self.name, config=config
            )
            msgs = await pull.fetch(count, timeout=5)
            return [(m.headers["Nats-Msg-Id"], m.data) for m in msgs]
        finally:
            await client.close()

    async def _hold_redis(self, count: int, lease_seconds: float) -> list[tuple[str, bytes]]:
        import redis.asyncio
        from redis.exceptions import ResponseError

        client = redis.asyncio.from_url(REDIS_URL)
        try:
            with suppress(ResponseError):
                await client.xgroup_create(self.name, "agents", id="0", mkstream=True)
            answer = await client.xreadgroup(
                "agents", "dead-consumer", {self.name: ">"}, count=count
            )
            return [
                (eid.decode(), fields[b"body"]) for _, entries in answer for eid, fields in entries
            ]
        finally:
            await client.aclose()

    def unacknowledged(self) -> int:
        """How many messages were delivered and not acknowledged yet (where the broker says)."""
        return int(_run(getattr(self, f"_unacknowledged_{self.kind}")()))

    async def _unacknowledged_rabbitmq(self) -> int:
        import aio_pika

        connection = await aio_pika.connect(AMQP_URL)
        async with connection:
            channel = await connection.channel()
            queue = await channel.declare_queue(self.name, passive=True)
            return int(queue.declaration_result.message_count or 0)  # ready, not yet taken

    async def _unacknowledged_nats(self) -> int:
        import nats

        client = await nats.connect(NATS_URL)
        try:
            info = await client.jetstream().consumer_info(self.name, self.source().durable)
            return int(info.num_ack_pending + info.num_pending)
        finally:
            await client.close()

    async def _unacknowledged_redis(self) -> int:
        import redis.asyncio

        client = redis.asyncio.from_url(REDIS_URL)
        try:
            pending = await client.xpending(self.name, "agents")
            return int(pending["pending"])
        finally:
            await client.aclose()

    def cleanup(self) -> None:
        """Delete the queue, stream or key."""
        _run(getattr(self, f"_cleanup_{self.kind}")())

    async def _cleanup_rabbitmq(self) -> None:
        import aio_pika

        connection = await aio_pika.connect(AMQP_URL)
        async with connection:
            channel = await connection.channel()
            await channel.queue_delete(self.name)

    async def _cleanup_nats(self) -> None:
        import nats

        client = await nats.connect(NATS_URL)
        try:
            await client.jetstream().delete_stream(self.name)
        except Exception:
            pass
        finally:
            await client.close()

    async def _cleanup_redis(self) -> None:
        import redis.asyncio

        client = redis.asyncio.from_url(REDIS_URL)
        try:
            await client.delete(self.name)
        finally:
            await client.aclose()


@contextmanager
def broker(kind: str) -> Iterator[Broker]:
    """A :class:`Broker` of ``kind`` for one test (skipped when it does not answer)."""
    require(kind)
    made = Broker(kind)
    try:
        yield made
    finally:
        made.cleanup()
