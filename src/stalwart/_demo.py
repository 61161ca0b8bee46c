"""``stalwart demo``: a refund agent that survives ``kill -9`` right after it moved money.

The agent runs in a worker process (``python -m stalwart._demo worker DB WORKDIR``) on the
embedded SQLite store. It plans with a scripted stand-in for an LLM, waits for a manager's
approval (given from a second process through the CLI), and refunds through a local fake payment
service that honours idempotency keys. The demo SIGKILLs the worker right after the payment
service accepted the refund and before the worker recorded it, starts a new worker, and shows
that the customer was refunded exactly once.

The demo keeps what it did in ``./.stalwart/`` (the journal in ``demo.db``, the payment service
and the demo's marker files in ``demo/``), so that ``stalwart show`` can read the run afterwards.
Each run starts by deleting them: the run id stays ``refund-T-1042`` and a second ``make demo``
tells the same story.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import stalwart

from ._format import timeline

WORKFLOW_ID = "refund-T-1042"
STORE = Path(".stalwart") / "demo.db"  # relative to the working directory, like the default store
WORKDIR = Path(".stalwart") / "demo"  # the fake payment service and the demo's marker files
TICKET = {"id": "T-1042", "customer": "ada@example.com", "order": "O-77", "amount": 129}
_PLAN = {  # what the scripted "LLM" answers: deterministic, no network
    "action": "refund",
    "reason": "package lost in transit; carrier confirmed",
}


class PaymentService:
    """A local stand-in for a payment provider: a refund per idempotency key, never two."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with sqlite3.connect(path) as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS refunds (key TEXT PRIMARY KEY, refund_id TEXT, "
                "order_id TEXT, amount INTEGER, calls INTEGER)"
            )

    def refund(self, key: str, order_id: str, amount: int) -> str:
        """Refund once per ``key``; a repeated key returns the first refund's id."""
        with sqlite3.connect(self.path, isolation_level="IMMEDIATE") as db:
            row = db.execute("SELECT refund_id FROM refunds WHERE key = ?", (key,)).fetchone()
            if row:
                db.execute("UPDATE refunds SET calls = calls + 1 WHERE key = ?", (key,))
                return str(row[0])
            refund_id = f"re_{abs(hash(key)) % 10**8:08d}"
            db.execute(
                "INSERT INTO refunds VALUES (?, ?, ?, ?, 1)", (key, refund_id, order_id, amount)
            )
            return refund_id

    def counts(self) -> tuple[int, int]:
        """(refunds made, calls received)."""
        with sqlite3.connect(self.path) as db:
            made, calls = db.execute(
                "SELECT count(*), coalesce(sum(calls), 0) FROM refunds"
            ).fetchone()
        return int(made), int(calls)


def build_app(db_url: str, workdir: Path) -> tuple[stalwart.Stalwart, Any]:
    """The demo's app and its refund agent."""
    app = stalwart.Stalwart(db_url)
    payments = PaymentService(workdir / "payments.db")

    @app.step(name="plan")
    def plan(ticket: dict[str, Any]) -> dict[str, Any]:
        return {**_PLAN, "amount": ticket["amount"]}

    @app.step(name="refund")
    def refund(order_id: str, amount: int) -> str:
        refund_id = payments.refund(stalwart.idempotency_key(), order_id, amount)
        armed = workdir / "kill-after-refund"
        if armed.exists():  # the demo's crash point: the money moved, nothing is recorded yet
            armed.unlink()
            (workdir / "refunded").touch()
            time.sleep(60)
        return refund_id

    @app.step(name="notify")
    def notify(customer: str, refund_id: str) -> str:
        return f"emailed {customer}: refund {refund_id} is on its way"

    @app.workflow(name="refund_agent")
    def refund_agent(ticket: dict[str, Any]) -> dict[str, Any]:
        decision = plan(ticket)
        approval = stalwart.request_approval(
            f"refund {ticket['amount']} EUR on {ticket['order']}", details=decision
        )
        if approval is None or not approval.approved:
            return {"refunded": False, "by": approval and approval.by}
        refund_id = refund(ticket["order"], decision["amount"])
        return {
            "refunded": True,
            "refund_id": refund_id,
            "approved_by": approval.by,
            "notice": notify(ticket["customer"], refund_id),
        }

    return app, refund_agent


def _serve(db_url: str, workdir: str) -> None:
    app, _agent = build_app(db_url, Path(workdir))
    with app:
        app.serve(concurrency=2)


def _spawn_worker(db_url: str, workdir: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "stalwart._demo", "worker", db_url, str(workdir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _stop(worker: subprocess.Popen[bytes]) -> None:
    """SIGTERM (a graceful stop), then SIGKILL if it is not gone in 30 s."""
    if worker.poll() is not None:
        return
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(timeout=30)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()


def _wait_for(what: str, check: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"demo: gave up waiting for {what}")
        time.sleep(0.02)


def _say(step: str, text: str) -> None:
    print(f"{step:>3}  {text}", flush=True)


def _fresh_start() -> None:
    """Delete what a previous demo left, so that this one starts from an empty store."""
    for old in STORE.parent.glob(f"{STORE.name}*"):  # the database and its WAL files
        old.unlink()
    shutil.rmtree(WORKDIR, ignore_errors=True)
    WORKDIR.mkdir(parents=True)


def _cli_command() -> str:
    """How the user who started this demo runs the CLI (``.venv/bin/stalwart`` from ``make``)."""
    argv0 = Path(sys.argv[0])
    if argv0.name == "stalwart":
        found = shutil.which("stalwart")
        if found and Path(found).resolve() == argv0.resolve():
            return "stalwart"
        return str(argv0)
    return f"{sys.executable} -m stalwart"


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def run_demo() -> None:
    """Run the refund demo in ``./.stalwart/`` and narrate it."""

    started = time.monotonic()
    _fresh_start()
    workdir = WORKDIR
    db_url = f"sqlite:///{STORE}"
    app, agent = build_app(db_url, workdir)
    payments = PaymentService(workdir / "payments.db")
    (workdir / "kill-after-refund").touch()
    worker = _spawn_worker(db_url, workdir)
    _say("1.", f"worker pid {worker.pid} started on the embedded store ({db_url})")
    try:
        app.start(agent, TICKET, workflow_id=WORKFLOW_ID)
        _say("2.", f"ticket {TICKET['id']}: customer asks for a refund of {TICKET['amount']} EUR")
        _wait_for("the approval request", app.approvals)
        request = app.approvals()[0]
        _say(
            "3.",
            f"the agent planned '{request.details['action']}' ({request.details['reason']})"
            f" and waits for approval: {request.subject!r}",
        )
        _say("", f"   run status: {app.handle(WORKFLOW_ID).status()} (it holds no worker thread)")
        approving = subprocess.run(
            [
                sys.executable,
                "-m",
                "stalwart",
                "--url",
                db_url,
                "approve",
                WORKFLOW_ID,
                "--by",
                "manager@example.com",
                "--reason",
                "carrier confirmed the loss",
            ],
            check=False,
            capture_output=True,
            text=True,
        )
        if approving.returncode != 0:
            raise RuntimeError(f"stalwart approve failed: {approving.stderr.strip()}")
        _say(
            "4.",
            "a manager approved it from another process: "
            "stalwart approve refund-T-1042 --by manager@example.com",
        )
        _wait_for("the refund", (workdir / "refunded").exists)
        made, calls = payments.counts()
        _say("5.", f"the payment service refunded the order ({made} refund) ...")
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        _say("", "   ... and the worker was killed with SIGKILL before it could record that")
        worker = _spawn_worker(db_url, workdir)
        _say("6.", f"a new worker (pid {worker.pid}) picks the run up from its journal")
        result = app.handle(WORKFLOW_ID).result(timeout=30)
    finally:  # whichever worker is alive stops, even when the demo gives up
        _stop(worker)
    made, calls = payments.counts()
    _say("7.", f"done: {result['notice']}")
    _say(
        "",
        f"   refunds made by the payment service: {made} (calls it received: {calls}; "
        "the retry reused the idempotency key)",
    )
    _say("8.", f"the run's timeline ({app.handle(WORKFLOW_ID).status()}):")
    for line in timeline(app.journal(WORKFLOW_ID)).lines():
        print(f"     {line}")
    app.close()
    print(f"\ndemo finished in {time.monotonic() - started:.1f} s", flush=True)
    cli = f"{_cli_command()} --url {db_url}"
    print(
        f"\nThe run is kept in {STORE}. Look at it with:\n"
        f"    {cli} ls\n"
        f"    {cli} show {WORKFLOW_ID}\n"
        f"The demo's code is in {_shown(Path(__file__))}.",
        flush=True,
    )
    if made != 1:
        raise SystemExit(f"demo: expected exactly one refund, found {made}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "worker":
        _serve(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit("usage: python -m stalwart._demo worker DB_URL WORKDIR")
