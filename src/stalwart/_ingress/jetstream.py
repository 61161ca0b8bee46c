"""NATS as a source, over nats-py (``pip install 'stalwart[nats]'``): JetStream (durable,
acknowledged) when a stream is given, else core NATS (a queue group, at most once)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

from .._errors import UsageError, install_hint, mask_url
from .source import Message, connected, message_id

__all__ = ["NATS"]

FETCH_SECONDS = 1.0


def _nats() -> Any:
    try:
        import nats
    except ImportError:
        raise UsageError(f"NATS subscriptions need nats-py: {install_hint('nats')}") from None
    return nats


class _JetStreamMessage:
    """A JetStream message as a :class:`Message`."""

    def __init__(self, msg: Any, client: Any) -> None:
        self.msg = msg
        self.client = client  # the connection it came by
        self.body: bytes = msg.data
        headers = msg.headers or {}
        self.id = message_id(headers.get("Nats-Msg-Id"), self.body)

    async def ack(self) -> None:
        await self.msg.ack_sync()  # the server confirms: a lost ack would redeliver anyway

    async def reject(self, reason: str) -> None:
        await self.msg.term()  # never redelivered; the server publishes a TERM advisory


class _CoreMessage(_JetStreamMessage):
    """A core NATS message: nothing to acknowledge (core NATS delivers at most once)."""

    async def ack(self) -> None:
        return None

    async def reject(self, reason: str) -> None:
        return None


async def _quiet(error: Exception) -> None:
    """nats-py's error callback: the consumer logs the outage itself."""


class NATS:
    """Messages published on a NATS subject: ``NATS("nats://localhost:4222", "orders.new",
    stream="ORDERS")``.

    With ``stream``, JetStream: the stream is created for the subject when missing, and the
    workers share the durable consumer ``durable`` (by default ``stalwart-`` and the subject),
    created to deliver all that the stream holds, acknowledged explicitly, redelivered after
    the app's ``lease_seconds`` when unacknowledged; a rejected message is terminated. The
    message id is the ``Nats-Msg-Id`` header (which JetStream also deduplicates on publish),
    else the SHA-256 of the body. Without ``stream``, core NATS: the workers form a queue
    group, and a message published while none listens, or in hand when one dies, is lost.
    """

    kind = "nats"

    def __init__(
        self, url: str, subject: str, *, stream: str | None = None, durable: str | None = None
    ) -> None:
        if not isinstance(url, str) or not url.startswith(("nats://", "tls://", "ws://", "wss://")):
            raise UsageError(f"NATS(url={url!r}): pass a nats:// URL")
        if not isinstance(subject, str) or not subject:
            raise UsageError(f"NATS(subject={subject!r}): pass the subject to consume")
        for label, value in (("stream", stream), ("durable", durable)):
            if value is not None and (not isinstance(value, str) or not value):
                raise UsageError(f"NATS({label}={value!r}): pass a non-empty name, or None")
        if durable is not None and stream is None:
            raise UsageError("NATS(durable=...): a durable consumer needs stream= (JetStream)")
        _nats()
        self.url = url
        self.subject = subject
        self.stream = stream
        self.durable = durable or "stalwart-" + re.sub(r"[^A-Za-z0-9_-]", "_", subject)

    @property
    def default_name(self) -> str:
        """The stream's name, else the subject."""
        return self.stream or self.subject

    def describe(self) -> str:
        """The subject (and stream) at its server, for logs."""
        where = f" stream {self.stream!r}" if self.stream else ""
        return f"NATS {mask_url(self.url)} subject {self.subject!r}{where}"

    def __repr__(self) -> str:
        return f"NATS({mask_url(self.url)!r}, {self.subject!r}, stream={self.stream!r})"

    async def _ack_all(self, messages: list[Message]) -> None:
        """Acknowledge ``messages`` (all of one connection) with one round trip: each ack
        published, then a flush the server answers once it has read them. An ack lost after
        that is a message delivered again, which its dedup id makes harmless."""
        if self.stream is None:
            return  # core NATS: nothing to acknowledge
        client = None
        for message in messages:
            assert isinstance(message, _JetStreamMessage)
            await message.msg.ack()
            client = message.client
        if client is not None:
            await client.flush()

    async def messages(
        self, consumer: str, *, lease_seconds: float, prefetch: int
    ) -> AsyncIterator[Message]:
        """Connect (and declare the stream and consumer when missing); yield messages."""
        nats = _nats()
        client = await nats.connect(
            self.url, name=consumer, allow_reconnect=False, connect_timeout=5, error_cb=_quiet
        )
        try:
            if self.stream is None:
                async for msg in self._core(client):
                    yield msg
            else:
                async for msg in self._jetstream(client, lease_seconds, prefetch):
                    yield msg
        finally:
            await client.close()

    async def _core(self, client: Any) -> AsyncIterator[Message]:
        subscription = await client.subscribe(self.subject, queue=self.durable)
        connected(self)
        async for msg in subscription.messages:
            yield _CoreMessage(msg, client)
        raise ConnectionError("the subscription ended")

    async def _jetstream(
        self, client: Any, lease_seconds: float, prefetch: int
    ) -> AsyncIterator[Message]:
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
        from nats.js.errors import NotFoundError

        js = client.jetstream()
        try:
            await js.stream_info(self.stream)
        except NotFoundError:
            await js.add_stream(name=self.stream, subjects=[self.subject])
        config = ConsumerConfig(
            durable_name=self.durable,
            deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=lease_seconds,
            filter_subject=self.subject,
        )
        pull = await js.pull_subscribe(
            self.subject, durable=self.durable, stream=self.stream, config=config
        )
        connected(self)
        while client.is_connected:
            try:
                batch = await pull.fetch(prefetch, timeout=FETCH_SECONDS)
            except TimeoutError:  # nothing came within FETCH_SECONDS (nats-py raises either
                continue  # its own subclass or asyncio's, depending on where it waited)
            for msg in batch:
                yield _JetStreamMessage(msg, client)
        raise ConnectionError("the connection closed")
