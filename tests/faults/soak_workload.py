"""The chaos soak's workload and its worker program.

    python soak_workload.py URL WORKDIR [--concurrency N] [--lease-seconds S]

It declares the soak's workflows (one per feature the soak exercises), writes
``WORKDIR/ready-<PID>`` and serves until it is killed or SIGTERMed:

* ``pay(n)``: an irreversible ``charge`` with ``verify`` (settled exactly once);
* ``notify(n)``: an irreversible ``email`` without ``verify`` (at most once; in doubt it goes to
  ``needs_attention``);
* ``review(n)``: an approval the driver answers;
* ``family(n)``: three child runs of ``kid``, waited for;
* ``count(key)``: one compare-and-set increment of a shared counter, then an ``acked`` step;
* ``talk(n)``: a step that emits ``CHUNKS`` chunks to the run's stream;
* ``tick()``: what the soak's schedule starts;
* ``ingested(body)``: what a message of the soak's RabbitMQ queue starts (when
  ``$SOAK_AMQP_URL`` and ``$SOAK_QUEUE`` name one, the worker subscribes to it).

The world outside the store is :class:`EffectLog`: every process (worker or driver) appends
JSON lines to its own file ``WORKDIR/log-<PID>.jsonl``, one ``write`` per line on a file opened
with ``O_APPEND``, so a SIGKILL loses at most the line being written and never interleaves two.
A line is ``{"t", "pid", "op", ...}``: effects (``charge``, ``email``), acknowledgements
(``inc_ack``), and the driver's calls and their acknowledgements (``start``/``started``, ...).
Each effect step writes its line through :meth:`EffectLog.effect` right after a
``stalwart.heartbeat(details)`` (a store write that fails once the lease is lost): a worker
paused or cut off past its lease does not make the call after another worker took the run over.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import os
import random
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import stalwart
import stalwart.ingress

__all__ = [
    "AMQP_ENV",
    "CHUNKS",
    "KIDS",
    "LEASE_S",
    "QUEUE_ENV",
    "RETRY",
    "EffectLog",
    "declare",
    "main",
    "read_logs",
]

AMQP_ENV, QUEUE_ENV = "SOAK_AMQP_URL", "SOAK_QUEUE"  # the RabbitMQ queue to subscribe to
CHUNKS = 12  # chunks a talk run emits
KIDS = 3  # children of a family run
LEASE_S = 4.0
# A crash charges the interrupted attempt; the attempt budget is not what the soak is about.
RETRY = stalwart.Retry(max_attempts=30, initial_delay=0.05, max_delay=0.5)


class EffectLog:
    """This process's append-only log in ``workdir`` (see the module docstring)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._fd: int | None = None
        self._pid = 0

    def write(self, op: str, **fields: Any) -> None:
        """Append one line ``{"t", "pid", "op", **fields}``."""
        pid = os.getpid()
        if self._fd is None or self._pid != pid:
            path = self.workdir / f"log-{pid}.jsonl"
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._pid = pid
        line = json.dumps({"t": time.time(), "pid": pid, "op": op, **fields}) + "\n"
        os.write(self._fd, line.encode())

    def effect(self, op: str) -> str:
        """Make the effect ``op`` of the current step (a line naming its run and key) and
        return its id; a lost lease stops it first."""
        stalwart.heartbeat({"effect": op})
        key = stalwart.idempotency_key()
        self.write(op, wid=stalwart.workflow_id(), key=key)
        return f"{op}:{key}"

    def find(self, op: str, key: str) -> str | None:
        """The id of effect ``op`` with ``key`` if any process made it (a read of the logs)."""
        for line in read_logs(self.workdir):
            if line.get("op") == op and line.get("key") == key:
                return f"{op}:{key}"
        return None


def read_logs(workdir: Path) -> Iterator[dict[str, Any]]:
    """Every complete line of every process's log in ``workdir`` (a last line a killed process
    left half-written is skipped)."""
    for path in sorted(workdir.glob("log-*.jsonl")):
        text = path.read_text()
        for line in text[: text.rfind("\n") + 1].splitlines():
            if line:
                yield json.loads(line)


def _nap(pause: float) -> None:
    time.sleep(pause * random.uniform(0.5, 1.5))


def declare(app: stalwart.Stalwart, workdir: Path, pause: float = 0.25) -> dict[str, Any]:
    """Declare the soak's workflows and steps on ``app``; returns the workflows by name."""
    log = EffectLog(workdir)

    @app.step(name="hop", retry=RETRY)
    def hop(v: int) -> int:
        _nap(pause)
        return (v * 31 + 7) % 1_000_003

    def find_charge(n: int) -> str | None:
        return log.find("charge", stalwart.idempotency_key())

    @app.step(name="charge", irreversible=True, verify=find_charge, retry=RETRY)
    def charge(n: int) -> str:
        _nap(pause)
        done = log.effect("charge")
        _nap(pause)  # the charge is made; the journal does not know yet
        return done

    @app.step(name="email", irreversible=True)
    def email(n: int) -> str:
        _nap(pause)
        done = log.effect("email")
        _nap(pause)
        return done

    @app.step(name="acked", retry=RETRY)
    def acked(key: str, version: int) -> None:
        log.write("inc_ack", wid=stalwart.workflow_id(), key=key, version=version)

    @app.step(name="speak", retry=RETRY)
    def speak(n: int) -> int:
        for i in range(CHUNKS):
            stalwart.emit(f"{n}.{i} ")
            _nap(pause / 4)
        return CHUNKS

    @app.workflow(name="pay")
    def pay(n: int) -> str:
        v = hop(n)
        receipt = charge(n)
        hop(v)
        return receipt

    @app.workflow(name="notify")
    def notify(n: int) -> str:
        hop(n)
        return email(n)

    @app.workflow(name="review")
    def review(n: int) -> bool:
        hop(n)
        decision = stalwart.request_approval(f"soak review {n}")
        return bool(decision and decision.approved)

    @app.workflow(name="kid")
    def kid(n: int, i: int) -> int:
        return hop(n * 10 + i)

    @app.workflow(name="family")
    def family(n: int) -> int:
        children = [stalwart.start_child(kid, n, i) for i in range(KIDS)]
        return sum(child.result() for child in children)

    @app.workflow(name="count")
    def count(key: str) -> int:
        while True:
            current = stalwart.shared_get(key)
            written = stalwart.shared_set(key, (current.value or 0) + 1, if_version=current.version)
            if written is not None:
                break
        acked(key, written.version)
        return written.version

    @app.workflow(name="talk")
    def talk(n: int) -> int:
        hop(n)
        return speak(n)

    @app.workflow(name="tick")
    def tick() -> int:
        return hop(1)

    @app.workflow(name="ingested")
    def ingested(body: dict[str, Any]) -> int:
        return hop(int(body["n"]))

    return {
        "pay": pay,
        "notify": notify,
        "review": review,
        "family": family,
        "kid": kid,
        "count": count,
        "talk": talk,
        "tick": tick,
        "ingested": ingested,
    }


def main(argv: list[str]) -> int:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the driver dumps a stuck worker
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("workdir")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--lease-seconds", type=float, default=LEASE_S)
    opts = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(process)d %(threadName)s %(message)s"
    )
    workdir = Path(opts.workdir)
    with stalwart.Stalwart(opts.url, lease_seconds=opts.lease_seconds) as app:
        workflows = declare(app, workdir)
        if os.environ.get(AMQP_ENV):
            source = stalwart.ingress.RabbitMQ(os.environ[AMQP_ENV], os.environ[QUEUE_ENV])
            app.subscribe(source, start=workflows["ingested"])
        (workdir / f"ready-{os.getpid()}").touch()
        app.serve(concurrency=opts.concurrency)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
