"""A worker whose async steps share one module-level ``httpx.AsyncClient``, as agents share
``openai.AsyncOpenAI()``.

    python async_client_agent.py URL WORKDIR [--concurrency N] [--lease-seconds S] ...

The client is created when this module is imported, before any event loop exists; the server it
calls is ``$ASYNC_AGENT_SERVER`` (a local HTTP server the test runs). Each run makes one call,
waits durably for the event ``go`` (it suspends and is resumed, maybe by another worker), and
makes a second call through the same client. The test process imports this module too, to
declare the workflow it starts runs of; it never uses the client.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import httpx

import stalwart

__all__ = ["WORKFLOW", "declare"]

WORKFLOW = "client_agent"
client = httpx.AsyncClient(
    base_url=os.environ.get("ASYNC_AGENT_SERVER", "http://127.0.0.1:9"), timeout=20.0
)


def declare(app: stalwart.Stalwart) -> Any:
    """The workflow (and its step) on ``app``."""

    @app.step(name="ask")
    async def ask(run: str, n: int) -> dict[str, Any]:
        body = {"run": run, "n": n, "key": stalwart.idempotency_key(), "pid": os.getpid()}
        response = await client.post("/call", json=body)
        response.raise_for_status()
        return dict(response.json())

    @app.workflow(name=WORKFLOW)
    async def agent(run: str) -> list[int]:
        first = await ask(run, 1)
        await stalwart.wait_for_event_async("go")
        second = await ask(run, 2)
        return [first["n"], second["n"]]

    return agent


def main(argv: list[str]) -> int:
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("workdir")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--lease-seconds", type=float, default=30.0)
    parser.add_argument("--max-recoveries", type=int, default=5)
    opts = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(process)d %(message)s")
    with stalwart.Stalwart(
        opts.url, lease_seconds=opts.lease_seconds, max_recoveries=opts.max_recoveries
    ) as app:
        declare(app)
        (Path(opts.workdir) / f"ready-{os.getpid()}").touch()
        app.serve(concurrency=opts.concurrency)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
