"""A worker consuming a real broker is killed with SIGKILL mid-stream; another finishes the
stream. Every message yields exactly one run, none lost, none twice, and the broker holds
nothing unacknowledged at the end (RabbitMQ requeues at once what the dead worker held,
JetStream after the ack wait, Redis when the next worker claims the dead consumer's pending
entries after ``lease_seconds``); the fleet-wide count says exactly how many were accepted."""

from __future__ import annotations

from pathlib import Path

import pytest
from fault_harness import WorkerHarness

import stalwart
from brokers import BROKERS, body, broker

AGENT = Path(__file__).with_name("ingress_agent.py")
MESSAGES = 40
WAIT_S = 90.0


@pytest.mark.parametrize("kind", BROKERS)
def test_a_consumer_killed_mid_stream_loses_no_message_and_starts_none_twice(
    workers: WorkerHarness, kind: str
) -> None:
    with broker(kind) as queue, stalwart.Stalwart(workers.url) as app:
        ids = queue.publish([(f"m{i}", body({"i": i})) for i in range(MESSAGES)])
        env = {"INGRESS_KIND": kind, "INGRESS_NAME": queue.name, "INGRESS_PAUSE": "0.1"}
        first = workers.start(program=AGENT, env=env, lease_seconds=2.0, concurrency=4)
        workers.wait_for(lambda: app.count_workflows() >= 8, "8 runs started", WAIT_S, [first])
        workers.kill(first)
        second = workers.start(program=AGENT, env=env, lease_seconds=2.0, concurrency=4)
        workers.wait_for(
            lambda: app.count_workflows(status="completed") == MESSAGES,
            f"{MESSAGES} runs completed",
            WAIT_S,
            [second],
            interval=0.1,
        )
        workers.wait_for(
            lambda: queue.unacknowledged() == 0, "every message acknowledged", WAIT_S, [second]
        )
        runs = {info.workflow_id: info for info in app.list_workflows(limit=1000)}
        assert sorted(runs) == sorted(f"{queue.name}:{mid}" for mid in ids)
        results = {wid: app.handle(wid).result() for wid in runs}
        assert sorted(results.values()) == [2 * i for i in range(MESSAGES)]
        (info,) = app.subscriptions()
        # counted in each run's own transaction: a kill never separates a run from its count
        assert (info.accepted, info.rejected) == (MESSAGES, 0), info


@pytest.mark.parametrize("kind", BROKERS)
def test_events_from_a_consumer_killed_mid_stream_each_arrive_once(
    tmp_path: Path, kind: str
) -> None:
    """The same with events: 30 messages go to one waiting run as event ``item``; the run
    ends with each message's payload exactly once (SQLite only: the store's side is the
    dedup_key, which the start test already covers on PostgreSQL)."""
    workers = WorkerHarness(tmp_path)
    try:
        with broker(kind) as queue, stalwart.Stalwart(workers.url) as app:
            from ingress_agent import declare

            collect = declare(app, subscribe=False)["collect"]
            count = 30
            handle = app.start(collect, count, workflow_id="collector")
            queue.publish([(f"e{i}", body({"i": i})) for i in range(count)])
            env = {
                "INGRESS_KIND": kind,
                "INGRESS_NAME": queue.name,
                "INGRESS_MODE": "event",
                "INGRESS_PAUSE": "0.05",
            }
            first = workers.start(program=AGENT, env=env, lease_seconds=2.0)
            workers.wait_for(lambda: _accepted(app) >= 5, "5 events delivered", WAIT_S, [first])
            workers.kill(first)
            assert _accepted(app) < count  # mid-stream
            second = workers.start(program=AGENT, env=env, lease_seconds=2.0)
            assert handle.result(timeout=WAIT_S) == list(range(count)), workers.describe()
            workers.wait_for(
                lambda: queue.unacknowledged() == 0, "every message acknowledged", WAIT_S, [second]
            )
            assert _accepted(app) == count
    finally:
        workers.close()


def _accepted(app: stalwart.Stalwart) -> int:
    return sum(info.accepted for info in app.subscriptions())
