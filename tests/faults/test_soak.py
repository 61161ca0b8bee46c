"""The chaos soak (issue 26 item 3): 4 workers over PostgreSQL, a mixed workload, random faults,
then the history checker. ``soak_driver`` says what it does, ``soak_checker`` what it checks.

It runs ``$STALWART_SOAK_SECONDS`` seconds of chaos (2 minutes by default, the form ``make test``
runs; ``make soak`` runs 10), prints the faults injected, the runs, the effects and the
violations (``-s`` shows them), and fails on any violation.

With the fault lab (``lab.py``: root, iproute2, iptables, PostgreSQL's server programs) the
workers run in network namespaces of their own over the lab's PostgreSQL, so the soak also cuts
a worker off from the database and restarts the database twice. Without it the soak runs on a
schema of ``$STALWART_TEST_POSTGRES_URL`` with SIGKILL and SIGSTOP only, and says so (under
``CI=true`` a missing lab fails the test instead).
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from lab import LabDatabase, Namespace, missing, shared_postgres
from lab_relay import Relay
from soak_driver import Lab, Publisher, run_soak

from store_urls import postgres_schema_url

SECONDS = float(os.environ.get("STALWART_SOAK_SECONDS", "120"))
SETTLE_S = 240.0
LAB_TOOLS = ("ip", "iptables", "tc", "postgres", "runuser")
AMQP_URL = os.environ.get("STALWART_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")


class RabbitPublisher:
    """Publishes to a fresh durable queue of the soak's own (deleted by :meth:`close`), each
    message with its ``message_id``, waiting for the broker's confirm. Its event loop runs only
    while it publishes, so the broker may drop the idle connection (missed heartbeats): it
    connects again then."""

    def __init__(self, url: str) -> None:
        import aio_pika

        self.url = url
        self.queue = f"stalwart-soak-{uuid.uuid4().hex[:8]}"
        self._aio_pika = aio_pika
        self._loop = asyncio.new_event_loop()
        self._connection: Any = None
        self._channel: Any = None
        self._connect()

    def _connect(self) -> None:
        async def connect() -> tuple[Any, Any]:
            connection = await self._aio_pika.connect(self.url, timeout=5)
            channel = await connection.channel(publisher_confirms=True)
            await channel.declare_queue(self.queue, durable=True)
            return connection, channel

        self._connection, self._channel = self._loop.run_until_complete(connect())

    def _call(self, what: Callable[[], Any]) -> Any:
        try:
            return self._loop.run_until_complete(what())
        except (ConnectionError, RuntimeError):  # aio-pika: AMQPError, ChannelInvalidStateError
            self._connect()
            return self._loop.run_until_complete(what())

    def publish(self, message_id: str, body: dict[str, Any]) -> None:
        message = self._aio_pika.Message(
            json.dumps(body).encode(), message_id=message_id, delivery_mode=2
        )
        self._call(lambda: self._channel.default_exchange.publish(message, routing_key=self.queue))

    def close(self) -> None:
        try:
            self._call(lambda: self._channel.queue_delete(self.queue))
            self._loop.run_until_complete(self._connection.close())
        finally:
            self._loop.close()


class SoakLab:
    """The soak's :class:`soak_driver.Lab`: a namespace per worker slot over one database of
    the lab's PostgreSQL."""

    def __init__(self, db: LabDatabase, netns: Callable[[], Namespace]) -> None:
        self.db = db
        self._netns = netns
        self.namespaces: dict[int, Namespace] = {}
        self.relays: list[Relay] = []

    def worker(self, index: int, amqp_url: str | None) -> tuple[str, list[str], str | None]:
        ns = self.namespaces.get(index)
        if ns is None:
            ns = self.namespaces[index] = self._netns()
        if amqp_url is not None:  # the broker listens on the host's loopback: relay to it
            parts = urlsplit(amqp_url)
            relay = Relay(ns.host_addr, (parts.hostname or "127.0.0.1", parts.port or 5672))
            self.relays.append(relay)
            netloc = parts.netloc.rsplit("@", 1)[0] + f"@{ns.host_addr}:{relay.port}"
            amqp_url = parts._replace(netloc=netloc).geturl()
        return self.db.url_in(ns), ns.wrap, amqp_url

    def partition(self, index: int) -> None:
        self.namespaces[index].cut()

    def heal(self, index: int) -> None:
        self.namespaces[index].heal()

    def restart_database(self) -> None:
        self.db.server.restart()

    def close(self) -> None:
        for relay in self.relays:
            relay.close()


@pytest.fixture
def soak_store(request: pytest.FixtureRequest) -> Iterator[tuple[str, Lab | None]]:
    """The soak's store URL (seen from the test process) and its lab, or ``None`` when the
    lab's tools are missing (a schema of the test database then)."""
    reason = missing(*LAB_TOOLS)
    if reason is None:
        server = shared_postgres()
        db = LabDatabase(server, server.create_database())
        netns: Callable[[], Namespace] = request.getfixturevalue("netns")
        lab = SoakLab(db, netns)
        try:
            yield db.url, lab
        finally:
            lab.close()
            db.server.drop_database(db.name)
        return
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    print(f"\n(no fault lab: {reason}; partitions and database restarts are left out)")
    for url in postgres_schema_url():
        yield url, None


@pytest.fixture
def publisher() -> Iterator[Publisher | None]:
    """A publisher to RabbitMQ at ``$STALWART_TEST_AMQP_URL`` (default: guest on 127.0.0.1), or
    ``None`` when no broker answers (the soak then starts no run from a queue, and says so)."""
    try:
        rabbit = RabbitPublisher(AMQP_URL)
    except (TimeoutError, OSError, ConnectionError) as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no RabbitMQ at {AMQP_URL}: {exc}")
        print(f"\n(no RabbitMQ at {AMQP_URL}: {exc}; no run is started from a queue)")
        yield None
        return
    try:
        yield rabbit
    finally:
        rabbit.close()


@pytest.mark.faults
@pytest.mark.timeout(SECONDS + SETTLE_S + 180)
def test_chaos_soak(
    tmp_path: Path, soak_store: tuple[str, Lab | None], publisher: Publisher | None
) -> None:
    url, lab = soak_store
    report = run_soak(url, tmp_path, SECONDS, lab=lab, publisher=publisher, settle_timeout=SETTLE_S)
    summary = report.summary()
    print("\n" + summary)
    (tmp_path / "summary.txt").write_text(summary)
    assert not report.violations, summary
    assert sum(report.faults.values()) >= SECONDS / 8, f"too few faults injected\n{summary}"
    assert report.statuses["completed"] >= SECONDS, f"too little work done\n{summary}"
