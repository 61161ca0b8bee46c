"""app.subscribe against the real brokers (tests/brokers.py): a message starts one run or
delivers one event, a message committed but never acknowledged starts nothing again, a body
that does not fit is rejected and counted; and what app.subscribe refuses."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import stalwart
from brokers import BROKERS, Broker, body, broker
from stalwart import testing
from stalwart._ingress import Outcome, ingress_of
from stalwart.ingress import RabbitMQ, RedisStream

WAIT_S = 60.0


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {WAIT_S}s"
        time.sleep(0.05)


@pytest.fixture(params=BROKERS)
def queue(request: pytest.FixtureRequest) -> Iterator[Broker]:
    with broker(request.param) as made:
        yield made


@pytest.fixture
def app(tmp_path: Path) -> Iterator[stalwart.Stalwart]:
    # a short lease: a message a dead consumer held comes back soon (JetStream, Redis)
    with stalwart.Stalwart(f"sqlite:///{tmp_path / 'runs.db'}", lease_seconds=1.0) as made:
        yield made


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


def _counts(app: stalwart.Stalwart, name: str) -> tuple[int, int]:
    (info,) = [s for s in app.subscriptions() if s.name == name]
    return info.accepted, info.rejected


def _declare(app: stalwart.Stalwart) -> Any:
    @app.workflow(name="charge")
    def charge(order: dict[str, int]) -> int:
        return order["amount"] * 10

    return charge


def test_each_message_starts_one_run_and_a_body_that_does_not_fit_is_rejected_and_counted(
    app: stalwart.Stalwart, queue: Broker
) -> None:
    charge = _declare(app)
    app.subscribe(queue.source(), start=charge, name=queue.name)
    ids = queue.publish(
        [
            ("o1", body({"amount": 1})),
            ("o2", body({"amount": 2})),
            ("bad-json", b"{not json"),
            ("bad-shape", body({"amount": "lots"})),  # dict[str, int] rejects it
            ("o3", body({"amount": 4})),
        ]
    )
    with Serving(app):
        _wait(lambda: _counts(app, queue.name) == (3, 2), "3 accepted, 2 rejected")
        _wait(lambda: app.count_workflows(status="completed") == 3, "3 runs completed")
    good = [ids[0], ids[1], ids[4]]
    runs = {i.workflow_id: app.handle(i.workflow_id).result() for i in app.list_workflows()}
    assert runs == {
        f"{queue.name}:{good[0]}": 10,
        f"{queue.name}:{good[1]}": 20,
        f"{queue.name}:{good[2]}": 40,
    }
    assert queue.unacknowledged() == 0  # the rejected ones too: never delivered again
    (info,) = app.subscriptions()
    assert (info.kind, info.target) == (queue.kind, "starts charge")


def test_an_event_goes_to_the_run_that_to_names_and_an_unknown_run_is_rejected(
    app: stalwart.Stalwart, queue: Broker
) -> None:
    @app.workflow(name="await_payment")
    def await_payment() -> Any:
        return stalwart.wait_for_event("paid")

    handle = app.start(await_payment, workflow_id="order-7")
    app.subscribe(queue.source(), event="paid", to=lambda b: b["order"], name=queue.name)
    queue.publish(
        [
            ("p1", body({"order": "order-7", "amount": 12})),
            ("p2", body({"order": "no-such-run"})),
        ]
    )
    with Serving(app):
        assert handle.result(timeout=WAIT_S) == {"order": "order-7", "amount": 12}
        _wait(lambda: _counts(app, queue.name) == (1, 1), "1 accepted, 1 rejected")


def test_a_message_committed_but_never_acknowledged_starts_nothing_again(
    app: stalwart.Stalwart, queue: Broker
) -> None:
    charge = _declare(app)
    app.subscribe(queue.source(), start=charge, name=queue.name)
    queue.publish([("h1", body({"amount": 1})), ("h2", body({"amount": 2}))])
    # A consumer took both and died; it had committed the first one's run.
    held = queue.hold(2, lease_seconds=1.0)
    assert len(held) == 2
    subscription = ingress_of(app).subscriptions[queue.name]
    first = ingress_of(app).delivery.deliver(subscription, held[0][0], held[0][1])
    assert first.outcome is Outcome.ACCEPTED
    with Serving(app):
        _wait(lambda: app.count_workflows(status="completed") == 2, "both runs completed")
        _wait(lambda: queue.unacknowledged() == 0, "both messages acknowledged")
    assert sorted(info.workflow_id for info in app.list_workflows()) == sorted(
        f"{queue.name}:{mid}" for mid, _ in held
    )
    assert _counts(app, queue.name) == (2, 0)  # the redelivery counted nothing
    again = ingress_of(app).delivery.deliver(subscription, held[0][0], held[0][1])
    assert (again.outcome, again.workflow_id) == (Outcome.DUPLICATE, first.workflow_id)


# -- what app.subscribe refuses (no broker needed) -----------------------------------------


@pytest.fixture
def bare(tmp_path: Path) -> Iterator[stalwart.Stalwart]:
    with stalwart.Stalwart(f"sqlite:///{tmp_path / 'bare.db'}") as made:
        yield made


SOURCE = RabbitMQ("amqp://guest:guest@127.0.0.1:5672/", "orders")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of start= (a workflow) and event="),
        ({"start": "one", "event": "paid", "to": str}, "exactly one of start="),
        ({"event": "paid"}, "event= needs to="),
        ({"start": "one", "to": str}, "to= goes with event="),
        ({"start": "two"}, "must take the decoded body as its one argument"),
        ({"start": "one", "concurrency": 0}, "concurrency=0: pass an int >= 1"),
        ({"event": "", "to": str}, "pass the event's name"),
    ],
)
def test_subscribe_refuses_what_cannot_work(
    bare: stalwart.Stalwart, kwargs: dict[str, Any], message: str
) -> None:
    @bare.workflow(name="one")
    def one(body: dict[str, Any]) -> None: ...

    @bare.workflow(name="two")
    def two(a: int, b: int) -> None: ...

    with pytest.raises(stalwart.UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        bare.subscribe(SOURCE, **kwargs)
    assert bare.subscriptions() == []


def test_subscribe_refuses_a_name_taken_and_what_is_not_a_source(bare: stalwart.Stalwart) -> None:
    @bare.workflow(name="one")
    def one(body: dict[str, Any]) -> None: ...

    bare.subscribe(SOURCE, start=one)
    with pytest.raises(stalwart.RegistrationError, match="'orders' is already declared"):
        bare.subscribe(RedisStream("redis://127.0.0.1:6379/0", "orders", group="g"), start=one)
    with pytest.raises(TypeError, match="is not a message source"):
        bare.subscribe("amqp://localhost/orders", start=one)
    (info,) = bare.subscriptions()
    assert (info.name, info.kind, info.accepted, info.rejected) == ("orders", "rabbitmq", 0, 0)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: RabbitMQ("http://x", "q"), "pass an amqp:// or amqps:// URL"),
        (lambda: RabbitMQ("amqp://x", "q", prefetch=0), "prefetch=0"),
        (lambda: stalwart.ingress.NATS("nats://x", "s", durable="d"), "needs stream="),
        (lambda: RedisStream("redis://x", "s", group=""), "group=''"),
    ],
)
def test_sources_refuse_bad_arguments(make: Callable[[], Any], message: str) -> None:
    with pytest.raises(stalwart.UsageError, match=message):
        make()


def test_the_cli_lists_subscriptions_with_their_counts(
    bare: stalwart.Stalwart, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from stalwart._cli import cli

    @bare.workflow(name="one")
    def one(body: dict[str, Any]) -> None: ...

    bare.subscribe(SOURCE, start=one)
    subscription = ingress_of(bare).subscriptions["orders"]
    assert ingress_of(bare).delivery.deliver(subscription, "m1", b"{}").outcome is Outcome.ACCEPTED
    assert ingress_of(bare).delivery.deliver(subscription, "m2", b"[").outcome is Outcome.REJECTED
    url = bare.url
    text = CliRunner().invoke(cli, ["subscriptions", "--url", url])
    assert text.exit_code == 0, text.output
    assert "orders" in text.stdout and "starts one" in text.stdout
    lines = CliRunner().invoke(cli, ["subscriptions", "--json", "--url", url]).stdout.splitlines()
    assert [json.loads(line) for line in lines] == [
        {"name": "orders", "kind": "rabbitmq", "target": "starts one", "accepted": 1, "rejected": 1}
    ]
