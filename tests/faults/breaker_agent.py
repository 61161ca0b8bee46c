"""A worker whose runs call one provider through a step guarded by a shared breaker.

    python breaker_agent.py URL WORKDIR [--concurrency N] [--lease-seconds S] ...

The provider is ``$BREAKER_AGENT_SERVER`` (a local HTTP server the test runs and takes down
and up). Each run makes one call, as ``POST /call`` with its workflow id and attempt, through
a step with ``Retry.llm()`` and ``Breaker("provider")``. The test process imports this module
too, to declare the workflow it starts runs of.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import httpx
from worker_main import serve

import stalwart

__all__ = ["BREAKER", "WORKFLOW", "declare"]

WORKFLOW = "breaker_agent"
BREAKER = stalwart.Breaker("provider", failures=5, window=30.0, cooldown=2.0)
RETRY = stalwart.Retry.llm(max_attempts=30, initial_delay=0.1, max_delay=0.5)

client = httpx.Client(
    base_url=os.environ.get("BREAKER_AGENT_SERVER", "http://127.0.0.1:9"), timeout=10.0
)


def declare(app: stalwart.Stalwart) -> Any:
    """The workflow (and its step) on ``app``."""

    @app.step(name="call_provider", retry=RETRY, breaker=BREAKER)
    def call_provider(run: str) -> str:
        body = {"run": run, "attempt": stalwart.attempt(), "pid": os.getpid()}
        response = client.post("/call", json=body)
        response.raise_for_status()
        return str(response.json()["answer"])

    @app.workflow(name=WORKFLOW)
    def agent(run: str) -> str:
        return call_provider(run)

    return agent


def main(argv: list[str]) -> int:
    """Serve this agent's workflows (see ``worker_main``)."""
    return serve(argv, declare, __doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
