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
