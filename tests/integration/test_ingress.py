"""app.subscribe against the real brokers (tests/brokers.py): a message starts one run or
delivers one event, a message committed but never acknowledged starts nothing again, a body
that does not fit is rejected and counted; and what app.subscribe refuses."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import stalwart
from brokers import AMQP_URL, BROKERS, REDIS_URL, WAIT_S, Broker, body, broker, wait_until
from stalwart import testing
from stalwart._ingress import Outcome, ingress_of
from stalwart.ingress import RabbitMQ, RedisStream


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
        self.worker.serve_metrics("127.0.0.1", 0)
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
    with Serving(app) as serving:
        wait_until(lambda: _counts(app, queue.name) == (3, 2), "3 accepted, 2 rejected")
        wait_until(lambda: app.count_workflows(status="completed") == 3, "3 runs completed")
        assert serving.worker.metrics is not None
        scraped = serving.worker.metrics.text()
    assert f'stalwart_ingress_messages_total{{source="{queue.name}"}} 3.0' in scraped
    assert f'stalwart_ingress_rejected_total{{source="{queue.name}"}} 2.0' in scraped
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
        wait_until(lambda: _counts(app, queue.name) == (1, 1), "1 accepted, 1 rejected")


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
        wait_until(lambda: app.count_workflows(status="completed") == 2, "both runs completed")
        wait_until(lambda: queue.unacknowledged() == 0, "both messages acknowledged")
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
    header, row = text.stdout.splitlines()
    assert row.endswith("1         1") and len(row) == len(header)  # counts right-aligned
    lines = CliRunner().invoke(cli, ["subscriptions", "--json", "--url", url]).stdout.splitlines()
    assert [json.loads(line) for line in lines] == [
        {"name": "orders", "kind": "rabbitmq", "target": "starts one", "accepted": 1, "rejected": 1}
    ]


def test_start_by_name_and_a_bad_body_names_the_whole_annotation(bare: stalwart.Stalwart) -> None:
    @bare.workflow(name="charge-order")
    def charge(order: dict[str, int]) -> int:
        return order["amount"]

    bare.subscribe(SOURCE, start="charge-order")  # the registered name
    subscription = ingress_of(bare).subscriptions["orders"]
    assert subscription.target == "starts charge-order"
    deliver = ingress_of(bare).delivery.deliver
    assert deliver(subscription, "good", b'{"amount": 3}').outcome is Outcome.ACCEPTED
    (run,) = bare.list_workflows()
    assert (run.workflow_id, run.name) == ("orders:good", "charge-order")
    verdict = deliver(subscription, "bad", b'{"amount": "lots"}')
    assert verdict.outcome is Outcome.REJECTED
    assert verdict.reason is not None
    assert verdict.reason.startswith("the body does not validate as dict[str, int]: amount:")


def test_a_broker_that_does_not_answer_is_retried_while_the_worker_serves_runs(
    bare: stalwart.Stalwart, caplog: pytest.LogCaptureFixture
) -> None:
    @bare.workflow(name="one")
    def one(body: dict[str, Any]) -> str:
        return "served"

    bare.subscribe(RabbitMQ("amqp://guest:guest@127.0.0.1:1/", "nowhere"), start=one)
    handle = bare.start(one, {}, workflow_id="plain")
    with caplog.at_level(logging.INFO, logger="stalwart"), Serving(bare):
        assert handle.result(timeout=WAIT_S) == "served"
        wait_until(lambda: "reconnecting in 1.0 s" in caplog.text, "a second try, later")
    assert "ingress nowhere: RabbitMQ amqp://guest:***@127.0.0.1:1/ queue 'nowhere' failed" in (
        caplog.text
    )
    assert "ingress nowhere: connecting to RabbitMQ" in caplog.text
    assert "consuming" not in caplog.text  # said only once a connection is up


def test_a_missing_extra_names_its_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in ("aio_pika", "nats", "redis", "redis.asyncio"):
        monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    with pytest.raises(stalwart.UsageError, match=r"need aio-pika: pip install .*\[rabbitmq\]"):
        RabbitMQ("amqp://x", "q")
    with pytest.raises(stalwart.UsageError, match=r"need nats-py: pip install .*\[nats\]"):
        stalwart.ingress.NATS("nats://x", "s")
    with pytest.raises(stalwart.UsageError, match=r"need redis-py: pip install .*\[redis\]"):
        RedisStream("redis://x", "s", group="g")


def _close_connections(kind: str, name: str) -> int:
    """Close, from the broker's side, the connections a client named ``name`` opened."""
    if kind == "rabbitmq":
        listed = subprocess.run(
            ["rabbitmqctl", "-q", "list_connections", "pid", "client_properties"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        pids = [line.split("\t")[0] for line in listed.splitlines() if name in line]
        for pid in pids:
            subprocess.run(["rabbitmqctl", "-q", "close_connection", pid, "test"], check=True)
        return len(pids)
    listed = subprocess.run(
        ["redis-cli", "client", "list"], capture_output=True, text=True, check=True
    ).stdout
    ids = [
        line.split()[0].split("=")[1] for line in listed.splitlines() if f" name={name} " in line
    ]
    for client in ids:
        subprocess.run(["redis-cli", "client", "kill", "id", client], check=True)
    return len(ids)


@pytest.mark.parametrize("kind", ["rabbitmq", "redis"])
def test_a_connection_the_broker_closes_is_opened_again_and_consumes_on(
    app: stalwart.Stalwart, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    tool = "rabbitmqctl" if kind == "rabbitmq" else "redis-cli"
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed: the broker cannot be told to close a connection")
    charge = _declare(app)
    with broker(kind) as queue:
        app.subscribe(queue.source(), start=charge, name=queue.name)
        with Serving(app):
            queue.publish([("before", body({"amount": 1}))])
            wait_until(lambda: app.count_workflows() == 1, "the first message's run")
            assert _close_connections(kind, testing.runtime_of(app).owner) >= 1
            queue.publish([("after", body({"amount": 2}))])
            wait_until(lambda: app.count_workflows() == 2, "the second run, after reconnecting")
    assert "reconnecting in" in caplog.text


def test_core_nats_without_a_stream_starts_a_run_per_message_id(app: stalwart.Stalwart) -> None:
    """Core NATS keeps nothing for a subscriber that is not there yet: the test publishes the
    same message again until the worker has subscribed, and the id makes the repeats one run."""
    from brokers import NATS_URL, require

    require("nats")
    charge = _declare(app)
    subject = f"core{time.monotonic_ns()}.orders"
    app.subscribe(stalwart.ingress.NATS(NATS_URL, subject), start=charge, name="core")

    async def publish() -> None:
        import nats

        client = await nats.connect(NATS_URL)
        try:
            await client.publish(subject, body({"amount": 5}), headers={"Nats-Msg-Id": "c1"})
            await client.flush()
        finally:
            await client.close()

    with Serving(app):
        deadline = time.monotonic() + WAIT_S
        while app.count_workflows() == 0:
            assert time.monotonic() < deadline, "no run from core NATS"
            asyncio.run(publish())
            time.sleep(0.1)
        assert app.handle("core:c1").result(timeout=WAIT_S) == 50
        asyncio.run(publish())  # once more, subscribed: the same id starts nothing
        wait_until(lambda: _counts(app, "core")[0] >= 1, "counted")
    assert app.count_workflows() == 1
    assert _counts(app, "core") == (1, 0)


def test_a_redis_entry_without_a_body_field_is_rejected_as_such(
    app: stalwart.Stalwart, caplog: pytest.LogCaptureFixture
) -> None:
    import redis

    charge = _declare(app)
    with broker("redis") as queue:
        app.subscribe(queue.source(), start=charge, name=queue.name)
        client = redis.Redis.from_url(REDIS_URL)
        try:
            client.xadd(queue.name, {"payload": body({"amount": 1})})  # not the field `body`
        finally:
            client.close()
        (good,) = queue.publish([("", body({"amount": 2}))])
        with caplog.at_level(logging.INFO, logger="stalwart"), Serving(app):
            wait_until(lambda: _counts(app, queue.name) == (1, 1), "1 accepted, 1 rejected")
            wait_until(lambda: queue.unacknowledged() == 0, "both acknowledged")
    assert "the entry has no field 'body'" in caplog.text
    assert f"ingress: consuming Redis redis://127.0.0.1:6379/0 stream {queue.name!r}" in caplog.text
    assert app.handle(f"{queue.name}:{good}").result(timeout=WAIT_S) == 20


def test_rabbitmq_gives_a_message_without_message_id_a_random_one(
    app: stalwart.Stalwart,
) -> None:
    """aiormq sets a random ``message_id`` when the publisher sets none, and a receiver cannot
    tell it from a publisher's: two identical bodies published without an id are two runs
    (docs/ingress.md says to set ``message_id``)."""
    import aio_pika

    charge = _declare(app)
    with broker("rabbitmq") as queue:
        app.subscribe(queue.source(), start=charge, name=queue.name)

        async def publish_twice() -> None:
            connection = await aio_pika.connect(AMQP_URL)
            async with connection:
                channel = await connection.channel(publisher_confirms=True)
                await channel.declare_queue(queue.name, durable=True)
                for _ in range(2):
                    message = aio_pika.Message(body({"amount": 3}))  # no message_id
                    await channel.default_exchange.publish(message, routing_key=queue.name)

        asyncio.run(publish_twice())
        with Serving(app):
            wait_until(lambda: _counts(app, queue.name) == (2, 0), "two runs, one per publish")
    assert app.count_workflows() == 2
