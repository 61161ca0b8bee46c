"""A worker consuming a broker subscription, for the crash tests of ingress.

    python ingress_agent.py URL WORKDIR [--concurrency N] [--lease-seconds S]

``$INGRESS_KIND`` (``rabbitmq``, ``nats``, ``redis``) and ``$INGRESS_NAME`` name the queue,
stream or subject of ``tests/brokers.py``; each message ``{"i": n}`` starts a run of
``double`` whose step ``work`` takes ``$INGRESS_PAUSE`` seconds (so a kill lands mid-stream)
and returns ``2 * n``. The test process imports ``declare`` to read the runs.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from worker_main import serve

import stalwart

__all__ = ["declare"]

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for brokers.py


def declare(app: stalwart.Stalwart, *, subscribe: bool = True) -> Any:
    """The workflow (and with ``subscribe`` the subscription) on ``app``."""
    pause = float(os.environ.get("INGRESS_PAUSE", "0.05"))

    @app.step(name="work")
    def work(n: int) -> int:
        time.sleep(pause)
        return 2 * n

    @app.workflow(name="double")
    def double(body: dict[str, int]) -> int:
        return work(body["i"])

    if subscribe:
        from brokers import Broker

        queue = Broker(os.environ["INGRESS_KIND"], os.environ["INGRESS_NAME"])
        app.subscribe(queue.source(), start=double, name=queue.name, concurrency=4)
    return double


def main(argv: list[str]) -> int:
    """Serve the subscription (see ``worker_main``)."""
    return serve(argv, declare, __doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
