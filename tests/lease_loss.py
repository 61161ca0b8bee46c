"""A run that loses its lease to another worker mid-run, and the warning its worker logs:
what tests of that warning share."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

import pytest

import stalwart

WAIT_S = 30.0


def lease_lost_warnings(
    app: stalwart.Stalwart, workflow: Any, workflow_id: str, caplog: pytest.LogCaptureFixture
) -> list[str]:
    """Run ``workflow`` (which gives its run to another worker) in a thread, where it waits
    for that worker until the app closes; the "lease lost" warnings logged once there is one."""
    caplog.set_level(logging.WARNING, logger="stalwart")

    def run() -> None:
        with contextlib.suppress(RuntimeError):
            app.run(workflow, workflow_id=workflow_id)

    threading.Thread(target=run, daemon=True).start()
    deadline = time.monotonic() + WAIT_S
    while not any("lease lost" in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, "the lease was never lost"
        time.sleep(0.01)
    return [r.getMessage() for r in caplog.records if "lease lost" in r.getMessage()]
