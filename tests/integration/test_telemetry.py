"""Logs, metrics and traces of a real worker process: ``stalwart worker telemetry_app:app``
started as an operator would, on SQLite and PostgreSQL, doing known work.

JSON logs are parsed line by line; ``/metrics`` is scraped with httpx and parsed with
prometheus-client's own parser; spans are written by an OpenTelemetry SDK exporter in the
worker (see ``telemetry_app.py``) and compared with a span the test started ``app.start`` in.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families
from telemetry_app import declare

import stalwart
from stalwart._errors import install_hint

HERE = Path(__file__).resolve().parent
KEYS = {"ts", "level", "msg", "workflow_id", "step", "seq", "attempt", "worker"}
PASSWORD = "s3cr3t-pw-4711"
WAIT_S = 30.0


def _with_password(url: str) -> str:
    """A PostgreSQL URL with a password (the test server trusts local connections, so any
    password is accepted; it must never be printed)."""
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{PASSWORD}@", 1)


@pytest.fixture
def worker_url(shared_url: str) -> str:
    return _with_password(shared_url) if shared_url.startswith("postgresql") else shared_url


class Worker:
    """One ``stalwart worker`` process; its stdout and stderr go to one file."""

    def __init__(
        self, tmp: Path, url: str, *args: str, env: dict[str, str] | None = None, n: int = 0
    ):
        self.out = tmp / f"worker-{n}.out"
        self.side = tmp / "side"
        self.side.mkdir(exist_ok=True)
        environ = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), *(p for p in sys.path if p)]),
            "PYTHONUNBUFFERED": "1",
            "TELEMETRY_URL": url,
            "TELEMETRY_DIR": str(self.side),
            **(env or {}),
        }
        environ.pop("STALWART_URL", None)
        with self.out.open("wb") as sink:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "stalwart", "worker", "telemetry_app:app", *args],
                stdout=sink,
                stderr=subprocess.STDOUT,
                cwd=tmp,
                env=environ,
            )

    def text(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_for(self, what: str, condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + WAIT_S
        while not condition():
            if self.proc.poll() is not None:
                pytest.fail(
                    f"the worker exited ({self.proc.returncode}) before {what}:\n{self.text()}"
                )
            if time.monotonic() > deadline:
                pytest.fail(f"{what}: not within {WAIT_S}s\n{self.text()}")
            time.sleep(0.02)

    def stop(self) -> str:
        """SIGTERM, as a deploy would; returns everything the worker wrote."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"the worker did not stop on SIGTERM:\n{self.text()}")
        assert self.proc.returncode == 0, self.text()
        return self.text()


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    started: list[Worker] = []

    def start(url: str, *args: str, env: dict[str, str] | None = None) -> Worker:
        worker = Worker(tmp_path, url, *args, env=env, n=len(started))
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.wait()


@pytest.fixture
def client(worker_url: str, tmp_path: Path) -> Iterator[tuple[stalwart.Stalwart, dict[str, Any]]]:
    """An app on the worker's store in the test process, to start runs and read results."""
    with stalwart.Stalwart(worker_url) as app:
        yield app, declare(app, tmp_path / "side")


def _settle(app: stalwart.Stalwart, handles: dict[str, Any]) -> dict[str, str]:
    """Wait until every run has an answer; their statuses."""
    deadline = time.monotonic() + WAIT_S
    statuses: dict[str, str] = {}
    while time.monotonic() < deadline:
        statuses = {key: handle.status() for key, handle in handles.items()}
        if all(s in ("completed", "failed", "needs_attention") for s in statuses.values()):
            return statuses
        time.sleep(0.05)
    pytest.fail(f"runs did not settle: {statuses}")


def _known_work(app: stalwart.Stalwart, wf: dict[str, Any]) -> dict[str, Any]:
    return {
        "ok": app.start(wf["ok_wf"], 21, workflow_id="ok-1"),
        "flaky": app.start(wf["flaky_wf"], workflow_id="flaky-1"),
        "doomed": app.start(wf["doomed_wf"], workflow_id="doomed-1"),
        "napping": app.start(wf["napping_wf"], 5, workflow_id="napping-1"),
    }


# -- logs -----------------------------------------------------------------------------------


def test_json_logs_are_one_object_per_line_with_the_runs_fields(
    worker_url: str, client: tuple[stalwart.Stalwart, dict[str, Any]], start_worker: Any
) -> None:
    app, wf = client
    worker = start_worker(worker_url, "--log-format", "json")
    worker.wait_for("serving", lambda: "serving the store" in worker.text())
    handles = _known_work(app, wf)
    assert _settle(app, handles) == {
        "ok": "completed",
        "flaky": "completed",
        "doomed": "failed",
        "napping": "completed",
    }
    text = worker.stop()
    lines = [json.loads(line) for line in text.splitlines()]  # every line is JSON
    assert lines and all(set(line) >= KEYS for line in lines), text
    assert all(line["ts"].endswith("Z") and "T" in line["ts"] for line in lines)
    assert PASSWORD not in text

    first = lines[0]["msg"]
    assert "serving the store" in first
    if worker_url.startswith("postgresql"):
        assert "postgres:***@127.0.0.1" in first, first
    else:
        assert worker_url in first, first

    def about(wid: str) -> list[dict[str, Any]]:
        """The run's own story: a stop that came while the worker still held a run that had
        just ended adds a "worker ...: run ... is off this worker" line, the worker's."""
        return [
            line
            for line in lines
            if line["workflow_id"] == wid and not line["msg"].startswith("worker ")
        ]

    ok = [line["msg"] for line in about("ok-1")]
    assert ok == ["run ok-1: started (workflow ok_wf)", "run ok-1: completed"], ok

    (retry,) = [line for line in about("flaky-1") if line["level"] == "WARNING"]
    assert (retry["step"], retry["seq"], retry["attempt"]) == ("flaky", 1, 1)
    assert "ConnectionError: 503 from the tool server" in retry["msg"]
    assert "next attempt in 0.01 s" in retry["msg"]
    assert about("flaky-1")[-1]["msg"] == "run flaky-1: completed"

    gave_up, ended = [line for line in about("doomed-1") if line["level"] == "WARNING"]
    assert (gave_up["step"], gave_up["attempt"]) == ("doomed", 1)
    assert "ValueError: the account is closed; no attempt is left" in gave_up["msg"]
    assert ended == about("doomed-1")[-1]  # a failed run's end is a WARNING too
    assert ended["msg"].startswith("run doomed-1: failed: StepFailed: ")
    assert "ValueError: the account is closed" in ended["msg"]

    napping = [line["msg"] for line in about("napping-1")]
    assert napping[0] == "run napping-1: started (workflow napping_wf)"
    assert napping[1].startswith("run napping-1: suspended, waiting for a timer until 20")
    assert napping[2:] == [
        "run napping-1: resumed (workflow napping_wf)",
        "run napping-1: completed",
    ]
    # The replay of the recorded first step says nothing: no line names a step of this run.
    assert [line for line in about("napping-1") if line["step"] is not None] == []
    owners = {line["worker"] for line in lines if line["workflow_id"]}
    assert len(owners) == 1 and None not in owners
    # The worker's own lines (serving, SIGTERM received, stopped) carry its id too.
    (stopping,) = [line for line in lines if "SIGTERM received" in line["msg"]]
    assert {line["worker"] for line in lines} == owners, stopping


def test_text_logs_at_warning_show_only_the_failures(
    worker_url: str, client: tuple[stalwart.Stalwart, dict[str, Any]], start_worker: Any
) -> None:
    app, wf = client
    worker = start_worker(worker_url, "--log-level", "warning")
    handles = {"ok": app.start(wf["ok_wf"], 1), "doomed": app.start(wf["doomed_wf"])}
    _settle(app, handles)
    text = worker.stop()
    assert PASSWORD not in text
    lines = text.splitlines()
    assert lines and all(" WARNING " in line for line in lines), text
    assert any("step doomed (seq 1) attempt 1 failed: ValueError" in line for line in lines)


# -- metrics --------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
    assert response.status_code == 200
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_metrics_count_this_workers_work_and_gauge_the_fleet(
    worker_url: str, client: tuple[stalwart.Stalwart, dict[str, Any]], start_worker: Any
) -> None:
    app, wf = client
    port = _free_port()
    worker = start_worker(worker_url, "--metrics-port", str(port))
    worker.wait_for(
        "metrics", lambda: f"metrics at http://127.0.0.1:{port}/metrics" in worker.text()
    )
    handles = _known_work(app, wf)
    handles["ok2"] = app.start(wf["ok_wf"], 2)
    handles["chat"] = app.start(wf["chat_wf"], "hi")
    handles["breaker"] = app.start(wf["breaker_wf"])
    handles["undone"] = app.start(wf["undone_wf"])
    app.start(wf["ok_wf"], 3, workflow_id="elsewhere-1", queue="elsewhere")  # nobody serves it
    _settle(app, handles)
    m = _scrape(port)

    def value(name: str, **labels: str) -> float:
        return m.get((name, tuple(sorted(labels.items()))), 0.0)

    assert value("stalwart_runs_started_total", workflow="ok_wf") == 2
    assert value("stalwart_runs_started_total", workflow="napping_wf") == 2  # began, resumed
    assert value("stalwart_runs_finished_total", workflow="ok_wf", status="completed") == 2
    assert value("stalwart_runs_finished_total", workflow="doomed_wf", status="failed") == 1
    assert value("stalwart_runs_finished_total", workflow="napping_wf", status="completed") == 1
    assert value("stalwart_step_attempts_total", step="flaky", outcome="failed") == 1
    assert value("stalwart_step_attempts_total", step="flaky", outcome="completed") == 1
    assert value("stalwart_step_attempts_total", step="doomed", outcome="failed") == 1
    # a compensation's attempts count as its step's: booked once, its undo failed then done
    assert value("stalwart_step_attempts_total", step="booked", outcome="completed") == 2
    assert value("stalwart_step_attempts_total", step="booked", outcome="failed") == 1
    # ok_wf twice, napping_wf twice: its replayed first step is not counted again.
    assert value("stalwart_step_attempts_total", step="double", outcome="completed") == 4
    assert value("stalwart_step_duration_seconds_count", step="double") == 4
    assert value("stalwart_run_schedule_to_start_seconds_count") >= 8
    assert value("stalwart_lease_takeovers_total") == 0
    assert value("stalwart_usage_tokens_total", kind="input") == 120
    assert value("stalwart_usage_tokens_total", kind="output") == 30
    assert value("stalwart_usage_cost_total") == pytest.approx(0.25)
    # Fleet-wide, from the store: the run on a queue this worker does not serve counts too.
    assert value("stalwart_runs", status="completed", queue="default") == 5
    assert value("stalwart_runs", status="failed", queue="default") == 3
    assert value("stalwart_runs", status="pending", queue="elsewhere") == 1
    assert value("stalwart_runs", status="needs_attention", queue="default") == 0
    assert value("stalwart_breaker_open", breaker="llm") == 1
    worker.stop()


def test_a_takeover_is_logged_and_counted_with_the_interrupted_attempt(
    worker_url: str,
    client: tuple[stalwart.Stalwart, dict[str, Any]],
    start_worker: Any,
    tmp_path: Path,
) -> None:
    app, wf = client
    doomed = start_worker(worker_url, env={"TELEMETRY_HANG": "1"})
    handle = app.start(wf["slow_wf"], workflow_id="slow-1")
    doomed.wait_for("slow running", (tmp_path / "side" / "slow-running").exists)
    doomed.proc.kill()  # SIGKILL mid-step: the run stays 'running', held by a dead process
    doomed.proc.wait()
    port = _free_port()
    heir = start_worker(worker_url, "--log-format", "json", "--metrics-port", str(port))
    assert handle.result(timeout=WAIT_S) == "done"
    m = _scrape(port)
    text = heir.stop()
    assert m[("stalwart_lease_takeovers_total", ())] == 1
    assert m[("stalwart_step_attempts_total", (("outcome", "interrupted"), ("step", "slow")))] == 1
    assert m[("stalwart_step_attempts_total", (("outcome", "completed"), ("step", "slow")))] == 1
    lines = [json.loads(line) for line in text.splitlines()]
    warnings = [line for line in lines if line["level"] == "WARNING"]
    assert [line["workflow_id"] for line in warnings] == ["slow-1", "slow-1"], text
    assert "taken over from " in warnings[0]["msg"]
    assert warnings[1]["msg"].startswith("run slow-1: step slow (seq 1) attempt 1 interrupted: ")
    assert (warnings[1]["step"], warnings[1]["attempt"]) == ("slow", 1)


def test_metrics_without_prometheus_client_exit_1_with_the_install_hint(
    tmp_path: Path, start_worker: Any
) -> None:
    blocker = tmp_path / "blocked" / "prometheus_client"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text(
        "raise ImportError('prometheus_client is not installed')\n"
    )
    url = f"sqlite:///{tmp_path / 'm.db'}"
    worker = start_worker(
        url,
        "--metrics-port",
        str(_free_port()),
        env={"PYTHONPATH": os.pathsep.join([str(blocker.parent), str(HERE), *sys.path])},
    )
    assert worker.proc.wait(timeout=WAIT_S) == 1
    lines = worker.text().splitlines()
    assert lines == [f"error: serving metrics needs prometheus-client: {install_hint('metrics')}"]


# -- traces ---------------------------------------------------------------------------------


def test_the_workers_spans_continue_the_trace_app_start_was_called_in(
    worker_url: str,
    client: tuple[stalwart.Stalwart, dict[str, Any]],
    start_worker: Any,
    tmp_path: Path,
) -> None:
    app, wf = client
    exporter = InMemorySpanExporter()
    provider = TracerProvider()  # this test's own, not the process-global one
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("test").start_as_current_span("handle request"):
        handles = {
            "ok": app.start(wf["ok_wf"], 4, workflow_id="traced-ok"),
            "flaky": app.start(wf["flaky_wf"], workflow_id="traced-flaky"),
            "napping": app.start(wf["napping_wf"], 1, workflow_id="traced-nap"),
        }
    untraced = app.start(wf["ok_wf"], 5, workflow_id="untraced")
    (request,) = exporter.get_finished_spans()
    trace_id = f"{request.context.trace_id:032x}"
    request_id = f"{request.context.span_id:016x}"

    spans_file = tmp_path / "spans.jsonl"
    worker = start_worker(worker_url, env={"TELEMETRY_SPANS": str(spans_file)})
    _settle(app, {**handles, "untraced": untraced})
    worker.stop()
    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]

    def of(wid: str) -> list[dict[str, Any]]:
        return [s for s in spans if s["attributes"].get("stalwart.workflow_id") == wid]

    (run,) = [s for s in of("traced-ok") if s["name"] == "run ok_wf"]
    assert (run["trace_id"], run["parent_id"]) == (trace_id, request_id)
    assert run["attributes"]["stalwart.run.status"] == "completed"
    (step,) = [s for s in of("traced-ok") if s["name"] == "step double"]
    assert step["trace_id"] == trace_id and step["parent_id"] == run["span_id"]
    assert step["attributes"] == {
        "stalwart.workflow_id": "traced-ok",
        "stalwart.step.name": "double",
        "stalwart.step.seq": 1,
        "stalwart.step.attempt": 1,
        "stalwart.step.outcome": "completed",
    }

    attempts = [s["attributes"] for s in of("traced-flaky") if s["name"] == "step flaky"]
    assert [(a["stalwart.step.attempt"], a["stalwart.step.outcome"]) for a in attempts] == [
        (1, "failed"),
        (2, "completed"),
    ]

    # Each execution of the napping run is a run span of the same trace: the first ends
    # suspended on the sleep, the second replays the first step (no span) and completes.
    naps = of("traced-nap")
    runs = [s for s in naps if s["name"] == "run napping_wf"]
    assert [r["attributes"]["stalwart.run.status"] for r in runs] == ["suspended", "completed"]
    assert {(r["trace_id"], r["parent_id"]) for r in runs} == {(trace_id, request_id)}
    waits = [s["attributes"]["stalwart.wait.outcome"] for s in naps if s["name"] == "wait sleep"]
    assert waits == ["suspended", "timer"]
    steps = [s["attributes"]["stalwart.step.seq"] for s in naps if s["name"] == "step double"]
    assert steps == [1, 3]

    (alone,) = [s for s in of("untraced") if s["name"] == "run ok_wf"]
    assert alone["trace_id"] != trace_id and alone["parent_id"] is None


def test_without_opentelemetry_nothing_of_it_is_imported(tmp_path: Path) -> None:
    code = (
        "import sys, stalwart\n"
        f"app = stalwart.Stalwart('sqlite:///{tmp_path / 'o.db'}')\n"
        "@app.step\n"
        "def one() -> int:\n"
        "    return 1\n"
        "@app.workflow\n"
        "def wf() -> int:\n"
        "    return one()\n"
        "assert app.run(wf) == 1\n"
        "app.start(wf, workflow_id='later')\n"
        "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry', 'prometheus'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=WAIT_S, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_the_worker_names_a_relative_sqlite_store_absolutely(
    tmp_path: Path, start_worker: Any
) -> None:
    worker = start_worker("sqlite:///rel.db")  # runs in tmp_path
    worker.wait_for("serving", lambda: "serving the store" in worker.text())
    text = worker.stop()
    assert f"serving the store sqlite:///{tmp_path / 'rel.db'}: " in text, text


def test_a_takeover_with_no_holder_left_says_what_happened(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run an interrupted ``app.run`` released has no holder: its takeover says so, instead of
    'taken over from None'."""
    app = stalwart.Stalwart(f"sqlite:///{tmp_path / 'takeover.db'}")
    interrupt = True

    @app.step
    def effect() -> str:
        if interrupt:
            raise KeyboardInterrupt  # Ctrl-C in app.run: the run is released, not crashed
        return "done"

    @app.workflow
    def wf() -> str:
        return effect()

    with pytest.raises(KeyboardInterrupt):
        app.run(wf, workflow_id="released-1")
    interrupt = False
    with caplog.at_level(logging.WARNING, logger="stalwart"):
        assert app.run(wf, workflow_id="released-1") == "done"
    app.close()
    taken = [r.getMessage() for r in caplog.records if "taken over" in r.getMessage()]
    assert taken == [
        "run released-1: taken over again: its last execution stopped without recording an outcome"
    ]
