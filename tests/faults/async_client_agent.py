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

import os
import sys
from typing import Any

import httpx
from worker_main import serve

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
    """Serve this agent's workflows (see ``worker_main``)."""
    return serve(argv, declare, __doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
