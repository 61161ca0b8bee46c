"""Messages per second from a broker into committed runs, per broker, one worker, SQLite.

For each broker (RabbitMQ 127.0.0.1:5672, NATS JetStream 127.0.0.1:4222, Redis 127.0.0.1:6379;
one that does not answer is skipped with a line), a queue, stream or subject of its own gets
``--messages`` messages, each with an id, published as fast as the broker's client goes
(pipelined: RabbitMQ with publisher confirms awaited together, JetStream's acks awaited
together, Redis in one pipeline). That publish rate is the floor: the broker's own speed on
this machine. Then one worker (``app.serve``'s loop, in a thread of this process, on a fresh
SQLite file) consumes it with ``app.subscribe(..., concurrency=--concurrency)`` and executes
the runs (a one-step workflow); ingest = messages / seconds from the worker's start until the
last message's run is committed. Ratio = ingest / publish rate; the goal is an ingest of
2,000 messages/s or more; cpu µs/msg is the process's CPU time while ingesting, per message
(the runs' execution included), steadier than the rate on a loaded machine. Two more
references, measured in the same sitting: consume+ack, the source's client alone receiving and
acknowledging the same number of messages (no store), and the delivery core alone committing
runs from ``--concurrency`` threads (no broker).

    python bench/ingress.py [--messages 4000] [--concurrency 32] [--brokers rabbitmq,nats,redis]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import stalwart
from brokers import AMQP_URL, NATS_URL, PORTS, REDIS_URL, Broker
from stalwart import testing

GOAL = 2000.0


def _answers(kind: str) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", PORTS[kind]), timeout=2.0):
            return True
    except OSError:
        return False


async def _publish_rabbitmq(queue: Broker, bodies: list[tuple[str, bytes]]) -> None:
    import aio_pika

    connection = await aio_pika.connect(AMQP_URL)
    async with connection:
        channel = await connection.channel(publisher_confirms=True)
        await channel.declare_queue(queue.name, durable=True)
        exchange = channel.default_exchange
        await asyncio.gather(
            *(
                exchange.publish(aio_pika.Message(data, message_id=mid), routing_key=queue.name)
                for mid, data in bodies
            )
        )


async def _publish_nats(queue: Broker, bodies: list[tuple[str, bytes]]) -> None:
    import nats

    client = await nats.connect(NATS_URL)
    try:
        js = client.jetstream()
        await js.add_stream(name=queue.name, subjects=[queue.subject])
        futures = [
            await js.publish_async(queue.subject, data, headers={"Nats-Msg-Id": mid})
            for mid, data in bodies
        ]
        await asyncio.gather(*futures)
    finally:
        await client.close()


async def _publish_redis(queue: Broker, bodies: list[tuple[str, bytes]]) -> None:
    import redis.asyncio

    client = redis.asyncio.from_url(REDIS_URL)
    try:
        pipe = client.pipeline(transaction=False)
        for _mid, data in bodies:
            pipe.xadd(queue.name, {"body": data})
        await pipe.execute()
    finally:
        await client.aclose()


async def _consume_only(queue: Broker, messages: int, concurrency: int) -> float:
    """Messages/s the source's client alone receives and acknowledges, nothing delivered: the
    ceiling a consumer in one Python process reaches on this broker here."""
    stream = queue.source().messages("bench", lease_seconds=30.0, prefetch=concurrency)
    slots = asyncio.Semaphore(concurrency)
    done = asyncio.Event()
    acked = 0

    async def ack(message: Any) -> None:
        nonlocal acked
        await message.ack()
        acked += 1
        slots.release()
        if acked == messages:
            done.set()

    async def read() -> None:
        async for message in stream:
            await slots.acquire()
            tasks.add(asyncio.create_task(ack(message)))

    tasks: set[asyncio.Task[None]] = set()
    began = time.perf_counter()
    reader = asyncio.create_task(read())
    await asyncio.wait_for(done.wait(), 120.0)
    elapsed = time.perf_counter() - began
    reader.cancel()
    await asyncio.gather(reader, return_exceptions=True)
    return messages / elapsed


def _one(kind: str, messages: int, concurrency: int, folder: Path) -> dict[str, float]:
    queue = Broker(kind)
    bodies = [(f"m{i}", json.dumps({"i": i}).encode()) for i in range(messages)]
    publish = {"rabbitmq": _publish_rabbitmq, "nats": _publish_nats, "redis": _publish_redis}
    try:
        raw = Broker(kind)
        try:
            asyncio.run(publish[kind](raw, bodies))
            consumed = asyncio.run(_consume_only(raw, messages, concurrency))
        finally:
            raw.cleanup()
        began = time.perf_counter()
        asyncio.run(publish[kind](queue, bodies))
        published = time.perf_counter() - began
        with stalwart.Stalwart(f"sqlite:///{folder / (kind + '.db')}") as app:

            @app.step()
            def double(i: int) -> int:
                return 2 * i

            @app.workflow()
            def handle(body: dict[str, int]) -> int:
                return double(body["i"])

            app.subscribe(queue.source(), start=handle, concurrency=concurrency)
            worker = testing.worker(app, concurrency=8)
            thread = threading.Thread(target=worker.serve, daemon=True)
            began, cpu = time.perf_counter(), time.process_time()
            thread.start()
            deadline = began + 120.0
            while app.count_workflows() < messages and time.perf_counter() < deadline:
                time.sleep(0.01)
            ingested = time.perf_counter() - began
            cpu = time.process_time() - cpu
            created = app.count_workflows()
            worker.stop()
            thread.join()
        if created != messages:
            raise SystemExit(f"{kind}: {created} of {messages} runs after 120 s")
    finally:
        queue.cleanup()
    return {
        "publish": messages / published,
        "consume": consumed,
        "ingest": messages / ingested,
        "cpu_us": cpu / messages * 1e6,
    }


def _store_only(messages: int, concurrency: int, folder: Path) -> float:
    """Messages/s that the delivery core commits from ``concurrency`` threads, no broker:
    what the store allows on this machine now (a second reference beside the floor)."""
    from concurrent.futures import ThreadPoolExecutor

    from stalwart._ingress import ingress_of
    from stalwart.ingress import RedisStream

    with stalwart.Stalwart(f"sqlite:///{folder / 'store.db'}") as app:

        @app.workflow()
        def handle(body: dict[str, int]) -> int:
            return body["i"]

        app.subscribe(RedisStream(REDIS_URL, "unused", group="g"), start=handle)
        sub, core = ingress_of(app).subscriptions["unused"], ingress_of(app).delivery
        began = time.perf_counter()
        with ThreadPoolExecutor(concurrency) as pool:
            list(pool.map(lambda i: core.deliver(sub, f"m{i}", b'{"i": 1}'), range(messages)))
        return messages / (time.perf_counter() - began)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--brokers", default="rabbitmq,nats,redis")
    opts = parser.parse_args()
    print(f"{opts.messages} messages per broker, one worker, SQLite, {opts.concurrency} at once")
    print(
        f"{'broker':<10} {'publish/s (floor)':>18} {'consume+ack/s':>14} {'ingest/s':>10} "
        f"{'ratio':>7} {'goal':>6} {'cpu µs/msg':>11}"
    )
    below = False
    with tempfile.TemporaryDirectory() as tmp:
        store = _store_only(opts.messages, opts.concurrency, Path(tmp))
        print(f"{'(store)':<10} {'':>18} {'':>14} {store:>10,.0f}   the core alone, no broker")
        for kind in opts.brokers.split(","):
            if not _answers(kind):
                print(f"{kind:<10} skipped: nothing answers on 127.0.0.1:{PORTS[kind]}")
                continue
            rates = _one(kind, opts.messages, opts.concurrency, Path(tmp))
            ok = rates["ingest"] >= GOAL
            below |= not ok
            print(
                f"{kind:<10} {rates['publish']:>18,.0f} {rates['consume']:>14,.0f} "
                f"{rates['ingest']:>10,.0f} "
                f"{rates['ingest'] / rates['publish']:>7.2f} {'ok' if ok else 'below':>6} "
                f"{rates['cpu_us']:>11,.0f}"
            )
    print(f"goal: ingest >= {GOAL:,.0f} messages/s; ratio = ingest / the broker's publish rate")
    print("consume+ack: the broker's client alone receiving and acknowledging, no store")
    print("cpu µs/msg: this process's CPU time while ingesting, per message (the worker's runs")
    print("included): what a loaded machine's wall-clock figures hide")
    return 0


if __name__ == "__main__":
    sys.exit(main())
