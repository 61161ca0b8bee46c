"""A worker whose retention sweeper prunes while it serves (test_sweeper_in_worker.py).

    python sweep_agent.py URL READY_FILE

Declares the app of ``declare`` (the test declares the same), sweeps every ``SWEEP`` seconds
instead of every minute, writes READY_FILE and serves until SIGTERM, logging to stderr.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import stalwart
from stalwart import _prune

__all__ = ["RETENTION", "declare"]

RETENTION = 2.0  # seconds a `brief` run is kept once it ended
SWEEP = 0.3


def declare(url: str) -> stalwart.Stalwart:
    """The app: ``brief`` runs are kept ``RETENTION`` seconds, ``kept`` ones forever, and a
    ``live`` run waits for an event, then runs a step."""
    app = stalwart.Stalwart(url)

    @app.step
    def double(i: int) -> int:
        return 2 * i

    @app.workflow(name="brief", retention=RETENTION)
    def brief(i: int) -> int:
        return double(i)

    @app.workflow(name="kept")
    def kept(i: int) -> int:
        return double(i)

    @app.workflow(name="live")
    def live(i: int) -> dict[str, Any]:
        got = stalwart.wait_for_event("go")
        return {"doubled": double(i), "got": got}

    return app


def main() -> None:
    url, ready = sys.argv[1:3]
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    _prune.SWEEP_SECONDS = SWEEP
    app = declare(url)
    Path(ready).write_text("serving")
    app.serve(concurrency=4)


if __name__ == "__main__":
    main()
