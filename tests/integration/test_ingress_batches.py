"""Batches of messages against the real brokers (tests/brokers.py): the messages a source has
ready are delivered together (one store transaction, then the acknowledgements). A batch that
mixes good and bad bodies starts the good ones' runs and rejects and counts the bad; a batch
whose commit fails acknowledges nothing, and every message of it comes again and starts exactly
one run."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import stalwart
from brokers import BROKERS, Broker, body, broker, wait_until
from stalwart import testing
from stalwart._ingress import Outcome, ingress_of


@pytest.fixture(params=BROKERS)
def queue(request: pytest.FixtureRequest) -> Iterator[Broker]:
    with broker(request.param) as made:
        yield made


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "runs.db"


@pytest.fixture
def app(db: Path) -> Iterator[stalwart.Stalwart]:
    # a short lease: what a consumer held unacknowledged comes back soon (JetStream, Redis)
    with stalwart.Stalwart(f"sqlite:///{db}", lease_seconds=1.0) as made:
        yield made


def _declare(app: stalwart.Stalwart) -> Any:
    @app.workflow(name="charge")
    def charge(order: dict[str, int]) -> int:
        return order["amount"] * 10

    return charge


def _counts(app: stalwart.Stalwart, name: str) -> tuple[int, int]:
    (info,) = [s for s in app.subscriptions() if s.name == name]
    return info.accepted, info.rejected


class Serving:
    """A worker of the app in a thread of the test."""

    def __init__(self, app: stalwart.Stalwart) -> None:
        self.worker = testing.worker(app, concurrency=4)
        self.thread = threading.Thread(target=self.worker.serve, daemon=True)

    def __enter__(self) -> Serving:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.worker.stop()
        self.thread.join(timeout=60)
        assert not self.thread.is_alive()


def test_one_batch_of_good_and_bad_bodies_gives_a_verdict_each_in_order(
    app: stalwart.Stalwart,
) -> None:
    charge = _declare(app)
    app.subscribe(Broker("redis").source(), start=charge, name="orders")  # never connected
    sub, core = ingress_of(app).subscriptions["orders"], ingress_of(app).delivery
    batch = [
        ("a", body({"amount": 1}), None),
        ("b", b"{not json", None),
        ("c", body({"amount": "lots"}), None),
        ("d", body({"amount": 2}), None),
        ("e", b"", "the entry has no field 'body'"),
    ]
    verdicts = core.deliver_all(sub, batch)
    assert [v.outcome for v in verdicts] == [
        Outcome.ACCEPTED,
        Outcome.REJECTED,
        Outcome.REJECTED,
        Outcome.ACCEPTED,
        Outcome.REJECTED,
    ]
    assert [v.workflow_id for v in verdicts] == [f"orders:{m}" for m, _, _ in batch]
    assert verdicts[1].reason is not None and "not JSON" in verdicts[1].reason
    assert verdicts[4].reason == "the entry has no field 'body'"
    assert _counts(app, "orders") == (2, 3)
    again = core.deliver_all(sub, [*batch[:1], ("f", body({"amount": 3}), None)])
    assert [v.outcome for v in again] == [Outcome.DUPLICATE, Outcome.ACCEPTED]
    assert _counts(app, "orders") == (3, 3)  # a repeat counts nothing
    assert sorted(i.workflow_id for i in app.list_workflows()) == [
        "orders:a",
        "orders:d",
        "orders:f",
    ]


def test_a_batch_of_good_and_bad_bodies_starts_the_good_and_rejects_the_bad(
    app: stalwart.Stalwart, queue: Broker
) -> None:
    charge = _declare(app)
    app.subscribe(queue.source(), start=charge, name=queue.name, concurrency=32)
    good = [(f"g{i}", body({"amount": i})) for i in range(12)]
    bad = [(f"b{i}", b"{not json" if i % 2 else body({"amount": "x"})) for i in range(6)]
    mixed = [m for i, g in enumerate(good) for m in ([g, bad[i]] if i < len(bad) else [g])]
    ids = dict(zip((mid for mid, _ in mixed), queue.publish(mixed), strict=True))
    with Serving(app):
        wait_until(lambda: _counts(app, queue.name) == (12, 6), "12 accepted, 6 rejected")
        wait_until(lambda: app.count_workflows(status="completed") == 12, "12 runs completed")
        wait_until(lambda: queue.unacknowledged() == 0, "every message acknowledged or rejected")
    assert sorted(i.workflow_id for i in app.list_workflows()) == sorted(
        f"{queue.name}:{ids[mid]}" for mid, _ in good
    )


class _FailingCommits:
    """A trigger in the app's SQLite file that makes every run's insert fail (a store that
    refuses the batch's transaction), until ``heal``."""

    def __init__(self, db: Path) -> None:
        self.db = db
        with sqlite3.connect(db) as conn:
            conn.execute("CREATE TABLE test_refuse (x INTEGER)")
            conn.execute("INSERT INTO test_refuse VALUES (1)")
            conn.execute(
                "CREATE TRIGGER test_refuse_runs BEFORE INSERT ON runs "
                "WHEN EXISTS (SELECT 1 FROM test_refuse) "
                "BEGIN SELECT RAISE(ABORT, 'the test refuses this commit'); END"
            )

    def heal(self) -> None:
        with sqlite3.connect(self.db) as conn:
            conn.execute("DROP TRIGGER test_refuse_runs")
            conn.execute("DROP TABLE test_refuse")


def test_a_batch_whose_commit_fails_is_not_acknowledged_and_comes_again_once(
    app: stalwart.Stalwart, db: Path, queue: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    charge = _declare(app)
    app.subscribe(queue.source(), start=charge, name=queue.name, concurrency=32)
    messages = [(f"m{i}", body({"amount": i})) for i in range(20)]
    ids = queue.publish(messages)
    refusing = _FailingCommits(db)
    with caplog.at_level(logging.WARNING, logger="stalwart"), Serving(app):
        wait_until(lambda: "the test refuses this commit" in caplog.text, "a batch's commit failed")
        assert app.count_workflows() == 0
        if queue.kind != "rabbitmq":  # RabbitMQ requeues at once: it counts none in hand
            assert queue.unacknowledged() > 0  # held, none acknowledged
        refusing.heal()
        wait_until(lambda: app.count_workflows(status="completed") == 20, "20 runs completed")
        wait_until(lambda: queue.unacknowledged() == 0, "every message acknowledged")
    assert sorted(i.workflow_id for i in app.list_workflows()) == sorted(
        f"{queue.name}:{mid}" for mid in ids
    )
    assert _counts(app, queue.name) == (20, 0)
