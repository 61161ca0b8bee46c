"""RabbitMQ (AMQP 0-9-1) as a source, over aio-pika (``pip install 'stalwart[rabbitmq]'``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from .._errors import UsageError, install_hint, mask_url
from .source import Message, connected, message_id

__all__ = ["RabbitMQ"]


def _aio_pika() -> Any:
    try:
        import aio_pika
    except ImportError:
        raise UsageError(
            f"RabbitMQ subscriptions need aio-pika: {install_hint('rabbitmq')}"
        ) from None
    return aio_pika


class _Delivery:
    """An AMQP delivery as a :class:`Message`."""

    def __init__(self, incoming: Any) -> None:
        self.incoming = incoming
        self.body: bytes = incoming.body
        self.id = message_id(incoming.message_id, self.body)

    async def ack(self) -> None:
        await self.incoming.ack()

    async def reject(self, reason: str) -> None:
        await self.incoming.reject(requeue=False)  # to the queue's dead-letter exchange, if any


class RabbitMQ:
    """Messages of a RabbitMQ queue: ``RabbitMQ("amqp://guest:guest@localhost/", "orders")``.

    The queue is declared durable when it does not exist (one that exists is used as it is,
    arguments and all); each worker holds at most ``prefetch`` unacknowledged messages (by
    default the subscription's ``concurrency``). The message id is the AMQP ``message_id``
    property, else the SHA-256 of the body. A rejected message is dead-lettered when the queue
    has a dead-letter exchange, else dropped.
    """

    kind = "rabbitmq"

    def __init__(self, url: str, queue: str, *, prefetch: int | None = None) -> None:
        if not isinstance(url, str) or not url.startswith(("amqp://", "amqps://")):
            raise UsageError(f"RabbitMQ(url={url!r}): pass an amqp:// or amqps:// URL")
        if not isinstance(queue, str) or not queue:
            raise UsageError(f"RabbitMQ(queue={queue!r}): pass the queue's name")
        if prefetch is not None and (
            isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1
        ):
            raise UsageError(f"RabbitMQ(prefetch={prefetch!r}): pass an int >= 1, or None")
        _aio_pika()
        self.url = url
        self.queue = queue
        self.prefetch = prefetch

    @property
    def default_name(self) -> str:
        """The queue's name."""
        return self.queue

    def describe(self) -> str:
        """The queue at its broker, for logs."""
        return f"RabbitMQ {mask_url(self.url)} queue {self.queue!r}"

    def __repr__(self) -> str:
        return f"RabbitMQ({mask_url(self.url)!r}, {self.queue!r})"

    async def _queue(self, connection: Any) -> Any:
        aio_pika = _aio_pika()
        channel = await connection.channel()
        try:
            return channel, await channel.declare_queue(self.queue, passive=True)
        except aio_pika.exceptions.ChannelClosed:  # no such queue (the channel is closed)
            channel = await connection.channel()
            return channel, await channel.declare_queue(self.queue, durable=True)

    async def messages(
        self, consumer: str, *, lease_seconds: float, prefetch: int
    ) -> AsyncIterator[Message]:
        """Connect, declare the queue when missing, and yield its messages."""
        aio_pika = _aio_pika()
        connection = await aio_pika.connect(
            self.url, client_properties={"connection_name": consumer}
        )
        try:
            channel, queue = await self._queue(connection)
            await channel.set_qos(prefetch_count=self.prefetch or prefetch)
            connected(self)
            async with queue.iterator() as incoming:
                async for delivery in incoming:
                    yield _Delivery(delivery)
        finally:
            await connection.close()
