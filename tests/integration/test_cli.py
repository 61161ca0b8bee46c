"""The command line: listing, showing, exit codes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import stalwart
from cli_process import stalwart as _stalwart
from stalwart import testing


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _stalwart(*args, cwd=cwd)


def test_ls_and_show(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    with stalwart.Stalwart(url) as app:

        @app.step(name="greet")
        def greet(name: str) -> str:
            return f"hello {name}"

        @app.workflow(name="hello")
        def hello(name: str) -> str:
            return greet(name)

        app.run(hello, "ada", workflow_id="run-1")
    listed = _cli("--url", url, "ls", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "run-1" in listed.stdout and "completed" in listed.stdout
    as_json = _cli("--url", url, "ls", "--json", "--status", "completed", cwd=tmp_path)
    assert json.loads(as_json.stdout.splitlines()[0])["workflow_id"] == "run-1"
    shown = _cli("--url", url, "show", "run-1", cwd=tmp_path)
    assert shown.returncode == 0
    assert "greet" in shown.stdout and '"hello ada"' in shown.stdout
    detail = json.loads(_cli("--url", url, "show", "run-1", "--json", cwd=tmp_path).stdout)
    assert [e["name"] for e in detail["journal"]] == ["started", "greet", "finished"]


def test_show_prints_each_steps_idempotency_key(tmp_path: Path) -> None:
    """Keys are numbered from 0 (the call's position) while seqs start at 1: ``show`` prints
    the key each step and compensation used, so no one derives it from ``seq``."""
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    seen: dict[str, str] = {}
    with stalwart.Stalwart(url) as app:

        def release(result: str, name: str) -> None:
            seen["undo"] = stalwart.idempotency_key()

        @app.step(name="reserve", compensate=release)
        def reserve(name: str) -> str:
            seen["reserve"] = stalwart.idempotency_key()
            return f"seat for {name}"

        @app.step(name="pay", retry=stalwart.Retry.never())
        def pay(seat: str) -> str:
            seen["pay"] = stalwart.idempotency_key()
            raise RuntimeError("card declined")

        @app.workflow(name="trip")
        def trip(name: str) -> str:
            return pay(reserve(name))

        with pytest.raises(stalwart.WorkflowFailed, match="card declined"):
            app.run(trip, "ada", workflow_id="run-7")
    assert seen == {"reserve": "run-7/0", "pay": "run-7/1", "undo": "run-7/0/undo"}

    shown = _cli("--url", url, "show", "run-7", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert any("KEY" in line.split() and "DURATION" in line.split() for line in lines)
    for name, key in (("reserve", "run-7/0"), ("pay", "run-7/1")):
        rows = [line for line in lines if f" {name} " in line and " step " in line]
        assert rows and all(key in row.split() for row in rows), (name, lines)
    [undo] = [line for line in lines if " compensation " in line]
    assert "run-7/0/undo" in undo.split()

    detail = json.loads(_cli("--url", url, "show", "run-7", "--json", cwd=tmp_path).stdout)
    keys = [(e["kind"], e["name"], e["idempotency_key"]) for e in detail["journal"]]
    assert keys == [
        ("run", "started", None),
        ("step", "reserve", "run-7/0"),
        ("step", "pay", "run-7/1"),
        ("run", "rolling_back", None),
        ("compensation", "reserve", "run-7/0/undo"),
        ("step", "reserve", "run-7/0"),  # the 'compensated' mark
        ("run", "finished", None),
    ]
    with stalwart.Stalwart(url) as app:
        assert [e.idempotency_key for e in app.journal("run-7")] == [k for _, _, k in keys]


def test_exit_codes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    absent = _cli("--url", url, "ls", cwd=tmp_path)
    assert absent.returncode == 1 and absent.stderr.startswith("error: no store at ")
    assert str(tmp_path / "cli.db") in absent.stderr and not (tmp_path / "cli.db").exists()
    stalwart.Stalwart(url).close()
    missing = _cli("--url", url, "show", "nope", cwd=tmp_path)
    assert missing.returncode == 1 and "nope" in missing.stderr
    assert _cli("no-such-command", cwd=tmp_path).returncode == 2
    bad = _cli("--url", "mysql://u:pw@h/db", "ls", cwd=tmp_path)
    assert bad.returncode == 1 and "***" in bad.stderr and "pw@" not in bad.stderr


def test_operator_commands(tmp_path: Path) -> None:

    url = f"sqlite:///{tmp_path / 'ops.db'}"
    with stalwart.Stalwart(url) as app:

        @app.workflow(name="gate")
        def gate() -> object:
            decision = stalwart.request_approval("ship it?", details={"risk": "low"})
            return decision and decision.approved

        @app.workflow(name="inbox")
        def inbox() -> object:
            return stalwart.wait_for_event("ping")

        worker = testing.worker(app, concurrency=2)
        serving = threading.Thread(target=worker.serve, daemon=True)
        serving.start()
        for wid, wf in (("g1", gate), ("g2", gate), ("i1", inbox), ("i2", inbox)):
            app.start(wf, workflow_id=wid)
        deadline = time.monotonic() + 10
        while len(app.list_workflows(status="suspended")) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        worker.stop()
        serving.join(timeout=10)

    listed = _cli("--url", url, "approvals", "--json", cwd=tmp_path)
    assert sorted(json.loads(line)["workflow_id"] for line in listed.stdout.splitlines()) == [
        "g1",
        "g2",
    ]
    approved = _cli("--url", url, "approve", "g1", "--reason", "ok", "--by", "ana", cwd=tmp_path)
    assert approved.returncode == 0 and "approved g1" in approved.stdout
    assert _cli("--url", url, "reject", "g2", cwd=tmp_path).stdout.startswith("rejected g2")
    again = _cli("--url", url, "approve", "g1", cwd=tmp_path)
    assert again.returncode == 1 and "no pending approval" in again.stderr
    sent = _cli(
        "--url", url, "send-event", "i1", "ping", '{"n": 1}', "--dedup-key", "k", cwd=tmp_path
    )
    assert sent.returncode == 0
    assert _cli("--url", url, "send-event", "i1", "ping", "{bad", cwd=tmp_path).returncode == 2
    assert _cli("--url", url, "cancel", "i2", "--by", "oncall", cwd=tmp_path).returncode == 0
    with stalwart.Stalwart(url) as app:
        assert app.handle("i2").status() == "cancelled"
        ops = {(e.name, e.by) for wid in ("g1", "i2") for e in app.journal(wid) if e.by}
        assert ops == {("approve", "ana"), ("cancel", "oncall")}
    finished = _cli("--url", url, "cancel", "i2", cwd=tmp_path)
    assert finished.returncode == 1 and "nothing to cancel" in finished.stderr


def test_fork_from_the_command_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fork.db'}"
    with stalwart.Stalwart(url) as app:

        @app.step(name="pay", irreversible=True)
        def pay() -> str:
            return "paid"

        @app.step(name="report")
        def report(x: str) -> str:
            return x.upper()

        @app.workflow(name="flow")
        def flow() -> str:
            return report(pay())

        app.run(flow, workflow_id="src")
    refused = _cli("--url", url, "fork", "src", "--from", "1", cwd=tmp_path)
    assert refused.returncode == 1 and "irreversible" in refused.stderr
    forked = _cli(
        "--url", url, "fork", "src", "--from", "2", "--new-id", "copy", "--by", "dev", cwd=tmp_path
    )
    assert forked.returncode == 0 and "copy" in forked.stdout
    shown = _cli("--url", url, "show", "src", cwd=tmp_path)
    assert "fork" in shown.stdout and "by dev" in shown.stdout
    assert _cli("--url", url, "fork", "src", cwd=tmp_path).returncode == 2  # --from is required


def test_worker_serves_only_the_queues_it_is_given(shared_url: str, tmp_path: Path) -> None:
    (tmp_path / "queued_agents.py").write_text(
        "import stalwart\n"
        "app = stalwart.Stalwart()\n"
        "app.queue('llm', concurrency=1)\n"
        "@app.workflow(name='job')\n"
        "def job(tag: str) -> str:\n"
        "    return tag\n"
    )
    env = {**os.environ, "STALWART_URL": shared_url, "PYTHONPATH": str(tmp_path)}
    with stalwart.Stalwart(shared_url) as app:

        @app.workflow(name="job")
        def job(tag: str) -> str:
            return tag

        on_llm = app.start(job, "llm", queue="llm")
        on_default = app.start(job, "default")
        worker = subprocess.Popen(
            [sys.executable, "-m", "stalwart", "worker", "queued_agents:app", "--queue", "llm"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            assert on_llm.result(timeout=30) == "llm"
            time.sleep(0.5)
            assert on_default.status() == "pending"  # not a queue this worker serves
        finally:
            worker.send_signal(signal.SIGTERM)
            output = worker.communicate(timeout=30)[0]
        assert worker.returncode == 0, output
        assert "on queues llm " in output
