"""The worker program of the fault lab's scenarios: the worker scenarios' workflows, plus an
irreversible payment settled by ``verify`` and a scheduled job, then it serves.

    python lab_agent.py URL WORKDIR [--concurrency N] [--lease-seconds S] [--hang STEP ...]

As ``worker_agent.py`` (whose workflows it declares too, with the same side files), except that a
step named by ``--hang`` is *held*, not hung: it creates ``WORKDIR/running-<WORKFLOW_ID>-<STEP>``
and waits until the test creates ``WORKDIR/release-<WORKFLOW_ID>`` (a worker partitioned inside
it can go on once the link heals), then returns as usual.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crash_agent import Recorder
from worker_agent import Downstream
from worker_agent import declare as declare_worker_scenarios

import stalwart

__all__ = ["LAB_AGENT", "declare", "lab_app", "main", "release"]

HOLD_S = 120.0
LAB_AGENT = Path(__file__)


@contextlib.contextmanager
def lab_app(url: str, workdir: Path) -> Iterator[tuple[stalwart.Stalwart, dict[str, Any]]]:
    """An app on ``url`` in the test process declaring the lab's workflows (to start runs and
    read results; it executes none)."""
    with stalwart.Stalwart(url) as app:
        yield app, declare(app, Recorder(workdir, []))


def release(workdir: Path, workflow_id: str) -> None:
    """Let a held step of ``workflow_id`` return."""
    (workdir / f"release-{workflow_id}").touch()


def _hold(rec: Recorder, step: str) -> None:
    if step not in rec.hang:
        return
    wid = stalwart.workflow_id()
    (rec.workdir / f"running-{wid}-{step}").touch()
    deadline = time.monotonic() + HOLD_S
    while not (rec.workdir / f"release-{wid}").exists() and time.monotonic() < deadline:
        time.sleep(0.02)


def declare(app: stalwart.Stalwart, rec: Recorder) -> dict[str, Any]:
    """Declare the lab's workflows on ``app``; returns them by name."""
    workflows = declare_worker_scenarios(app, rec)
    downstream = Downstream(rec.workdir / "downstream.db")

    def find_payment(order_id: str, amount: int) -> str | None:
        return downstream.find(stalwart.idempotency_key())

    @app.step(name="pay", irreversible=True, verify=find_payment)
    def pay(order_id: str, amount: int) -> str:
        charge_id = downstream.charge(stalwart.idempotency_key(), order_id, amount)
        rec.executed("pay", charge_id=charge_id)
        _hold(rec, "pay")  # the effect happened; the journal does not know yet
        return charge_id

    @app.step(name="pay_fenced", irreversible=True, verify=find_payment)
    def pay_fenced(order_id: str, amount: int) -> str:
        _hold(rec, "pay_fenced")  # a worker frozen here has not charged yet
        stalwart.heartbeat()  # raises once another worker took the run over
        charge_id = downstream.charge(stalwart.idempotency_key(), order_id, amount)
        rec.executed("pay_fenced", charge_id=charge_id)
        return charge_id

    @app.workflow(name="pay_fenced_agent")
    def pay_fenced_agent(order_id: str, amount: int) -> dict[str, Any]:
        charge_id = pay_fenced(order_id, amount)
        return {"charge": charge_id, "receipt": pay_receipt(charge_id)}

    @app.step(name="pay_unfenced", irreversible=True, verify=find_payment)
    def pay_unfenced(order_id: str, amount: int) -> str:
        _hold(rec, "pay_unfenced")  # frozen here, it calls when it wakes: only the key dedups
        charge_id = downstream.charge(stalwart.idempotency_key(), order_id, amount)
        rec.executed("pay_unfenced", charge_id=charge_id)
        return charge_id

    @app.workflow(name="pay_unfenced_agent")
    def pay_unfenced_agent(order_id: str, amount: int) -> dict[str, Any]:
        return {"charge": pay_unfenced(order_id, amount)}  # its outcome commits with the end

    @app.step(name="pay_receipt")
    def pay_receipt(charge_id: str) -> str:
        rec.executed("pay_receipt")
        return f"receipt-for-{charge_id}"

    @app.workflow(name="pay_agent")
    def pay_agent(order_id: str, amount: int) -> dict[str, Any]:
        charge_id = pay(order_id, amount)
        return {"charge": charge_id, "receipt": pay_receipt(charge_id)}

    @app.step(name="tick_work")
    def tick_work() -> str:
        rec.executed("tick_work")
        return stalwart.workflow_id()

    @app.workflow(name="tick_job")
    def tick_job() -> str:
        return tick_work()

    @app.step(name="slow_link")
    def slow_link(i: int, pause: float) -> int:
        rec.executed("slow_link", i=i)
        _hold(rec, "slow_link")
        time.sleep(pause)
        return i

    @app.workflow(name="slow_chain")
    def slow_chain(n: int, pause: float) -> int:
        return sum(slow_link(i, pause) for i in range(n))

    @app.step(name="big_result")
    def big_result(size: int) -> str:
        rec.executed("big_result")
        return stalwart.workflow_id() + ":" + "x" * size  # stored apart, as a payload row

    @app.workflow(name="big_agent")
    def big_agent(size: int) -> int:
        return len(big_result(size))

    return {
        **workflows,
        "big_agent": big_agent,
        "pay_agent": pay_agent,
        "pay_fenced_agent": pay_fenced_agent,
        "pay_unfenced_agent": pay_unfenced_agent,
        "tick_job": tick_job,
        "slow_chain": slow_chain,
    }


def main(argv: list[str]) -> int:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the harness dumps a stuck worker
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("workdir")
    parser.add_argument("--hang", action="append", default=[])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--lease-seconds", type=float, default=30.0)
    parser.add_argument("--max-recoveries", type=int, default=5)
    opts = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(process)d %(threadName)s %(message)s"
    )
    workdir = Path(opts.workdir)
    rec = Recorder(workdir, opts.hang)
    with stalwart.Stalwart(
        opts.url, lease_seconds=opts.lease_seconds, max_recoveries=opts.max_recoveries
    ) as app:
        declare(app, rec)
        (workdir / f"ready-{os.getpid()}").touch()
        app.serve(concurrency=opts.concurrency)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
