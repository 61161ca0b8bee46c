"""A breaker's half-open probe lost with its worker (SIGKILL) does not leave it half-open.

Runs call a local provider through ``breaker_agent``'s step (``Breaker("provider",
failures=5, cooldown=2)``) on workers with a 3 s lease. The provider is down until the breaker
opens; then it holds every call it gets without answering, so the half-open probe hangs in
the worker that took it. That worker is SIGKILLed (with any other whose call hangs). The
provider comes back; a worker that is still alive, or one started after every worker was
killed, probes again once the lost probe's lease has passed and the cooldown after it: the
breaker closes and every run completes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from breaker_agent import declare
from fault_harness import WorkerHarness

import stalwart

AGENT = Path(__file__).with_name("breaker_agent.py")
RUNS, CONCURRENCY, LEASE_S = 6, 4, 3.0

pytestmark = pytest.mark.timeout(150)


class Provider:
    """``down`` answers 503, ``hang`` holds the call until the test ends, ``up`` answers."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.mode = "down"
        self.release = threading.Event()
        self.calls: list[tuple[str, dict[str, Any]]] = []  # (mode, body)

    def hanging(self) -> list[dict[str, Any]]:
        with self.lock:
            return [body for mode, body in self.calls if mode == "hang"]


@pytest.fixture
def provider() -> Iterator[tuple[str, Provider]]:
    state = Provider()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                mode = state.mode
                state.calls.append((mode, body))
            if mode == "hang":
                state.release.wait()
            status = 200 if mode == "up" else 503
            data = json.dumps({"answer": f"ok {body['run']}"}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", state
    finally:
        state.release.set()
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("survivor", [True, False], ids=["another-worker", "restarted"])
def test_a_probe_lost_with_its_worker_is_probed_again(
    workers: WorkerHarness, provider: tuple[str, Provider], survivor: bool
) -> None:
    base, state = provider
    env = {"BREAKER_AGENT_SERVER": base}

    def worker() -> Any:
        return workers.start(program=AGENT, env=env, concurrency=CONCURRENCY, lease_seconds=LEASE_S)

    fleet = [worker(), worker()]
    app = stalwart.Stalwart(workers.url)
    agent = declare(app)
    try:
        handles = [app.start(agent, f"r{i}", workflow_id=f"r{i}") for i in range(RUNS)]

        def state_is(*states: str) -> bool:
            return any(b.name == "provider" and b.state in states for b in app.breakers())

        workers.wait_for(lambda: state_is("open", "half_open"), "the breaker opened", 30, fleet)
        with state.lock:
            state.mode = "hang"
        workers.wait_for(lambda: state_is("half_open"), "a probe taken", 30, fleet)
        workers.wait_for(lambda: bool(state.hanging()), "the probe's call", 30, fleet)
        # The first call to hang is the probe's; under load a later one can hang too (a probe
        # taken after the first one's deadline passed), on the other worker.
        prober = state.hanging()[0]["pid"]
        doomed = [p for p in fleet if p.pid == prober or not survivor]
        for proc in doomed:
            workers.kill(proc)
        alive = [p for p in fleet if p not in doomed]
        with state.lock:
            state.mode = "up"
        if not survivor:
            alive = [worker()]
        for handle in handles:
            assert handle.result(timeout=60) == f"ok {handle.workflow_id}", workers.describe()
        (final,) = app.breakers()
        assert (final.state, final.failures) == ("closed", 0), final
        assert all(proc.poll() is None for proc in alive), workers.describe()
    finally:
        app.close()
