"""A Redis stream as a source, over redis-py's asyncio client (``pip install
'stalwart[redis]'``), read through a consumer group."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from .._errors import UsageError, install_hint, mask_url
from .source import Message, connected

__all__ = ["RedisStream"]

BLOCK_MS = 1000


def _redis() -> Any:
    try:
        import redis.asyncio
    except ImportError:
        raise UsageError(f"Redis subscriptions need redis-py: {install_hint('redis')}") from None
    return redis.asyncio


class _Entry:
    """A stream entry as a :class:`Message`: its id is the entry id, its body field ``body``
    (``problem`` says so when the entry has none: it is rejected)."""

    def __init__(self, source: RedisStream, client: Any, entry_id: bytes, fields: Any) -> None:
        self.source = source
        self.client = client
        self.id = entry_id.decode()
        body = (fields or {}).get(b"body")
        self.body: bytes = body if isinstance(body, bytes) else b""
        self.problem = "the entry has no field 'body'" if body is None else None

    async def ack(self) -> None:
        await self.client.xack(self.source.stream, self.source.group, self.id)

    async def reject(self, reason: str) -> None:
        await self.client.xack(self.source.stream, self.source.group, self.id)


class RedisStream:
    """Entries of a Redis stream, read through consumer group ``group``:
    ``RedisStream("redis://localhost:6379/0", "orders", group="agents")``.

    The group is created when missing, at id ``0`` (every entry the stream holds), the stream
    too. Each worker is a consumer of the group; an entry is acknowledged (``XACK``) after its
    run or event is committed, and an entry a consumer left pending for longer than the app's
    ``lease_seconds`` (it died) is claimed (``XAUTOCLAIM``) by another. The message id is the
    entry id and the body the entry's field ``body`` (only that field is read; an entry
    without it is rejected). A rejected entry is acknowledged (Redis
    has no dead-lettering: the entry stays in the stream, where ``XRANGE`` finds it).
    """

    kind = "redis"

    def __init__(self, url: str, stream: str, *, group: str) -> None:
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
            raise UsageError(f"RedisStream(url={url!r}): pass a redis:// URL")
        if not isinstance(stream, str) or not stream:
            raise UsageError(f"RedisStream(stream={stream!r}): pass the stream's key")
        if not isinstance(group, str) or not group:
            raise UsageError(f"RedisStream(group={group!r}): pass the consumer group's name")
        _redis()
        self.url = url
        self.stream = stream
        self.group = group

    @property
    def default_name(self) -> str:
        """The stream's key."""
        return self.stream

    def describe(self) -> str:
        """The stream and group at their server, for logs."""
        return f"Redis {mask_url(self.url)} stream {self.stream!r} group {self.group!r}"

    def __repr__(self) -> str:
        return f"RedisStream({mask_url(self.url)!r}, {self.stream!r}, group={self.group!r})"

    async def _ack_all(self, entries: list[Message]) -> None:
        """Acknowledge ``entries`` (all read by one connection) with one ``XACK``."""
        first = entries[0]
        assert isinstance(first, _Entry)
        await first.client.xack(self.stream, self.group, *(entry.id for entry in entries))

    async def _declare(self, client: Any) -> None:
        from redis.exceptions import ResponseError

        try:
            await client.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def messages(
        self, consumer: str, *, lease_seconds: float, prefetch: int
    ) -> AsyncIterator[Message]:
        """Connect, declare the group when missing, and yield entries: those pending too long
        with a dead consumer first, then new ones."""
        client = _redis().from_url(
            self.url, socket_timeout=BLOCK_MS / 1000 + 5, client_name=consumer
        )
        try:
            await self._declare(client)
            connected(self)
            next_claim = 0.0
            while True:
                if time.monotonic() >= next_claim:
                    next_claim = time.monotonic() + max(0.5, lease_seconds / 2)
                    async for entry in self._claim(client, consumer, lease_seconds, prefetch):
                        yield entry
                answer = await client.xreadgroup(
                    self.group, consumer, {self.stream: ">"}, count=prefetch, block=BLOCK_MS
                )
                for _stream, entries in answer or ():
                    for entry_id, fields in entries:
                        yield _Entry(self, client, entry_id, fields)
        finally:
            await client.aclose()

    async def _claim(
        self, client: Any, consumer: str, lease_seconds: float, prefetch: int
    ) -> AsyncIterator[_Entry]:
        start: Any = "0-0"
        idle_ms = int(lease_seconds * 1000)
        while True:
            answer = await client.xautoclaim(
                self.stream, self.group, consumer, idle_ms, start_id=start, count=prefetch
            )
            start, entries = answer[0], answer[1]
            for entry_id, fields in entries:
                if fields is not None:  # None: deleted from the stream while pending
                    yield _Entry(self, client, entry_id, fields)
            if start in (b"0-0", "0-0"):
                return
