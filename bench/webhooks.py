"""Webhook deliveries per second into a worker's ``--http-port``, against the floor of the same
server answering without writing.

A worker (``stalwart worker --http-port 0``, SQLite) serves a signed hook that starts a run per
delivery. ``--clients`` threads post ``--deliveries`` signed deliveries, each with its own
delivery id, and each answer is the 202 sent after the run's commit. The floor is the same
number of posts whose signature is wrong: the same HTTP path, body read and HMAC, answered 401
with nothing written. The ratio says what the commit (and the run's start) costs on top of the
HTTP round trip.

    python bench/webhooks.py [--deliveries 2000] [--clients 8]

It is a benchmark, not a test: it exits 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

SECRET = b"bench-secret"
AGENT = """
import stalwart

app = stalwart.Stalwart()


@app.workflow(name="noop")
def noop(body: dict) -> None: ...


app.webhook("bench", start=noop, secret="bench-secret")
"""
READY = re.compile(r"webhooks at (http://\S+?)api/v1/hooks/")


def _start(folder: Path) -> tuple[subprocess.Popen[str], str]:
    (folder / "bench_hooks.py").write_text(AGENT)
    env = {**os.environ, "STALWART_URL": f"sqlite:///{folder / 'bench.db'}"}
    process = subprocess.Popen(
        [sys.executable, "-m", "stalwart", "worker", "bench_hooks:app", "--http-port", "0"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        cwd=folder,
        env=env,
    )
    stderr = process.stderr
    assert stderr is not None
    for line in stderr:
        found = READY.search(line)
        if found:
            # keep reading its log (a line per run): a full pipe would stall the worker
            threading.Thread(target=stderr.read, daemon=True).start()
            return process, f"{found.group(1)}api/v1/hooks/bench"
    raise SystemExit(f"the worker did not start (exit {process.wait()})")


def _post_all(url: str, count: int, clients: int, *, signed: bool, tag: str) -> float:
    """Post ``count`` deliveries from ``clients`` threads; the seconds it took."""
    pool = [httpx.Client(timeout=60) for _ in range(clients)]

    def post(i: int) -> int:
        body = json.dumps({"n": i}).encode()
        key = SECRET if signed else b"wrong"
        digest = hmac.new(key, body, hashlib.sha256).hexdigest()
        headers = {
            "Content-Type": "application/json",
            "X-Signature-256": f"sha256={digest}",
            "X-Delivery-Id": f"{tag}-{i}",
        }
        return pool[i % clients].post(url, content=body, headers=headers).status_code

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as executor:
        statuses = list(executor.map(post, range(count)))
    elapsed = time.perf_counter() - started
    for client in pool:
        client.close()
    expected = 202 if signed else 401
    wrong = [s for s in statuses if s != expected]
    if wrong:
        raise SystemExit(f"{len(wrong)} answers were not {expected}: {sorted(set(wrong))}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        process, url = _start(Path(tmp))
        try:
            _post_all(url, 100, args.clients, signed=True, tag="warm")
            floor = _post_all(url, args.deliveries, args.clients, signed=False, tag="floor")
            timed = _post_all(url, args.deliveries, args.clients, signed=True, tag="run")
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(60)
    n = args.deliveries
    print(f"webhooks, SQLite, one worker, {args.clients} clients, {n} deliveries in all")
    print(f"  floor (401, nothing written): {n / floor:8.0f}/s")
    print(f"  signed, run committed (202):  {n / timed:8.0f}/s")
    print(f"  ratio committed/floor: {floor / timed:.2f} of the floor's rate")


if __name__ == "__main__":
    main()
