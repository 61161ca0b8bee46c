"""A circuit breaker is shared by the whole fleet: three worker processes, one store.

Thirty runs call a local provider that is down (503) through a step with
``Breaker("provider", failures=5, cooldown=2)``. The breaker opens after the first failures
counted by any worker; from then on the provider sees one probe per cooldown, fleet-wide,
never two at once; no run spends an attempt while it waits; when the provider comes back,
the next probe closes the breaker, the waiting runs are woken, and every run completes.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from breaker_agent import BREAKER, declare
from fault_harness import WorkerHarness

import stalwart

AGENT = Path(__file__).with_name("breaker_agent.py")
RUNS, WORKERS, CONCURRENCY = 30, 3, 4
DOWN_SECONDS = 7.0

pytestmark = pytest.mark.timeout(120)


class Provider:
    """A provider the test takes down and brings back; it records every call."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.down = True
        self.calls: list[tuple[float, dict[str, Any], int]] = []  # (when, body, status)


@pytest.fixture
def provider() -> Iterator[tuple[str, Provider]]:
    state = Provider()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                status = 503 if state.down else 200
                state.calls.append((time.monotonic(), body, status))
            data = json.dumps(
                {"answer": f"ok {body['run']}"} if status == 200 else {"error": "overloaded"}
            ).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", state
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.exclusive  # a call delayed by a busy machine reads as an early probe
def test_three_workers_share_one_breaker(
    workers: WorkerHarness, provider: tuple[str, Provider]
) -> None:
    base, state = provider
    env = {"BREAKER_AGENT_SERVER": base}
    procs = [
        workers.start(program=AGENT, env=env, concurrency=CONCURRENCY, ready=False)
        for _ in range(WORKERS)
    ]
    for proc in procs:
        workers.wait_ready(proc)
    app = stalwart.Stalwart(workers.url)
    agent = declare(app)
    try:
        began = time.monotonic()
        handles = [app.start(agent, f"r{i}", workflow_id=f"r{i}") for i in range(RUNS)]

        def opened() -> bool:
            return any(b.name == "provider" and b.state != "closed" for b in app.breakers())

        workers.wait_for(opened, "the breaker opened", 30, procs)
        time.sleep(max(0.0, DOWN_SECONDS - (time.monotonic() - began)))
        with state.lock:
            state.down = False
            back = time.monotonic()
        for handle in handles:
            assert handle.result(timeout=60) == f"ok {handle.workflow_id}", workers.describe()
        finished = time.monotonic()
        assert all(proc.poll() is None for proc in procs), workers.describe()

        with state.lock:
            calls = list(state.calls)
        down_calls = [when for when, _, status in calls if status == 503]
        # Until the breaker opened, each attempt in flight could fail: at most the failures
        # that trip it plus every run slot of the fleet. After that, only probes: one per
        # cooldown, each alone, so the calls are a cooldown apart.
        burst = 1
        while burst < len(down_calls) and down_calls[burst] - down_calls[burst - 1] < 1.5:
            burst += 1
        assert burst <= BREAKER.failures + WORKERS * CONCURRENCY, (burst, down_calls)
        probes = down_calls[burst:]
        assert probes, "no probe went out while the provider was down"
        gaps = [b - a for a, b in zip(down_calls[burst - 1 :], probes, strict=False)]
        assert all(gap >= BREAKER.cooldown * 0.9 for gap in gaps), gaps
        assert len(probes) <= (back - down_calls[burst - 1]) / BREAKER.cooldown + 1, probes
        # No run spent an attempt while it waited: each run journaled exactly the attempts
        # the provider received from it.
        for handle in handles:
            wid = handle.workflow_id
            journaled = [e for e in app.journal(wid) if e.kind == "step"]
            received = [body for _, body, _ in calls if body["run"] == wid]
            assert [e.attempt for e in journaled] == [b["attempt"] for b in received], wid
        waited = [
            h.workflow_id
            for h in handles
            if any(
                e.kind == "run"
                and e.name == "suspended"
                and e.output["waiting_for"] == "breaker:provider"
                for e in app.journal(h.workflow_id)
            )
        ]
        assert len(waited) >= RUNS - BREAKER.failures - WORKERS * CONCURRENCY, waited
        (final,) = app.breakers()
        assert (final.state, final.failures) == ("closed", 0)
        # The last probe closed it, and it woke the waiting runs: they did not sleep out their
        # timers (a probe's deadline is the 30 s lease).
        assert finished - back < 20, finished - back
    finally:
        app.close()
