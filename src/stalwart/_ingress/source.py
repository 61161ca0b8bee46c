"""The one shape every broker source has: an async iterator of messages.

A source (``stalwart.ingress.RabbitMQ``, ``NATS``, ``RedisStream``; Kafka or SQS later) knows
how to connect, declare what is missing and receive; nothing else. ``messages()`` connects,
then yields :class:`Message` objects until the connection ends (an outage raises; closing the
iterator closes the connection). Ids, decoding, dedup, commit-then-acknowledge, counts and
backoff are written once above it (``_ingress.delivery``, ``_ingress.consumer``), which takes
the messages a source has ready as one batch: one store transaction, then the acknowledgements.
A source whose broker acknowledges many messages in one command may say so with an internal
``async def _ack_all(self, messages)`` (Redis: one ``XACK``); others are acknowledged each.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

__all__ = ["Message", "Source", "connected", "message_id"]

log = logging.getLogger("stalwart")


def connected(source: Source) -> None:
    """Log, once a source's connection is up, that it consumes (a source calls it)."""
    log.info("ingress: consuming %s", source.describe())


def message_id(broker_id: str | bytes | None, body: bytes) -> str:
    """The message's id: the broker's own when it has one, else the SHA-256 of the body (so two
    identical bodies published without an id are one message)."""
    if isinstance(broker_id, bytes):
        broker_id = broker_id.decode("utf-8", "replace")
    if broker_id:
        return broker_id
    return hashlib.sha256(body).hexdigest()


class Message(Protocol):
    """One received message: its id (see :func:`message_id`), its body, and the two ends a
    consumer gives it once its run or event is committed (``ack``) or refused (``reject``,
    without requeue: dead-lettered where the broker has dead-lettering)."""

    id: str
    body: bytes

    async def ack(self) -> None:
        """The message is handled: the broker forgets it."""

    async def reject(self, reason: str) -> None:
        """The message can never be handled: the broker does not deliver it again."""


@runtime_checkable
class Source(Protocol):
    """Where messages come from (a queue, a stream, a subject) and how to receive them."""

    kind: str  # "rabbitmq", "nats", "redis": what listings and logs call it

    @property
    def default_name(self) -> str:
        """The subscription's name when ``app.subscribe`` is given none."""

    def describe(self) -> str:
        """Where it is, for logs (a URL's password masked)."""

    def messages(
        self, consumer: str, *, lease_seconds: float, prefetch: int
    ) -> AsyncIterator[Message]:
        """Connect and yield messages until the connection ends. ``consumer`` names this
        process to the broker; ``prefetch`` bounds the messages it holds unacknowledged; a
        message unacknowledged for ``lease_seconds`` may be taken by another consumer (where
        the broker leaves that to its clients)."""
