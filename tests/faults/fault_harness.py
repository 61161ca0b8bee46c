"""The harness of the crash tests: agents run in child processes and are killed with SIGKILL.

A child runs ``crash_agent.py`` (see its docstring). The ``agent`` fixture spawns children on a
SQLite file in ``tmp_path``, waits for the marker of the step to kill, sends a real SIGKILL,
reruns the same workflow id in a new process and reads the side file of step executions.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from crash_agent import FAILED_EXIT, NEEDS_ATTENTION_EXIT

import stalwart

__all__ = [
    "AGENT",
    "FAILED_EXIT",
    "NEEDS_ATTENTION_EXIT",
    "Exited",
    "Harness",
    "WorkerHarness",
    "cli",
    "completed_twice",
    "step_entries",
]

AGENT = Path(__file__).with_name("crash_agent.py")
MARKER_WAIT_S = 30.0
CHILD_WAIT_S = 40.0


@dataclass(frozen=True)
class Exited:
    """A finished child: how it ended and what it printed."""

    returncode: int
    stdout: str
    stderr: str
    elapsed: float  # from spawn to exit, interpreter start included

    @property
    def killed(self) -> bool:
        return self.returncode == -signal.SIGKILL

    @property
    def outcome(self) -> dict[str, Any]:
        """The JSON outcome the agent printed last."""
        lines = [line for line in self.stdout.splitlines() if line.startswith("{")]
        assert lines, (
            f"the agent printed no outcome (exit {self.returncode}):\n{self.stdout}\n{self.stderr}"
        )
        return json.loads(lines[-1])  # type: ignore[no-any-return]

    def describe(self) -> str:
        return f"exit {self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


class Harness:
    """Spawns, kills and reruns agents against one SQLite file."""

    def __init__(self, root: Path, url: str | None = None) -> None:
        # tmp_path is absolute: sqlite:////tmp/...
        self.url = url or f"sqlite:///{root / 'runs.db'}"
        self.workdir = root / "work"
        self.workdir.mkdir()
        self.log = self.workdir / "executions.log"
        self._children: list[subprocess.Popen[str]] = []

    # -- children -------------------------------------------------------------------------

    @staticmethod
    def _env() -> dict[str, str]:
        env = dict(os.environ)
        env.pop("STALWART_URL", None)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def spawn(
        self,
        scenario: str,
        workflow_id: str,
        *,
        hang: Sequence[str] = (),
        lease_seconds: float = 30.0,
        extra: Sequence[str] = (),
    ) -> subprocess.Popen[str]:
        """Start an agent process; it runs (or resumes) ``workflow_id``."""
        cmd = [
            sys.executable,
            str(AGENT),
            scenario,
            self.url,
            str(self.workdir),
            workflow_id,
            "--lease-seconds",
            str(lease_seconds),
            *extra,
        ]
        for step in hang:
            cmd += ["--hang", step]
        return self.spawn_program(cmd)

    def spawn_program(self, cmd: list[str]) -> subprocess.Popen[str]:
        """Start ``cmd`` as a child this harness kills and reaps (in the work directory, with
        this interpreter's path)."""
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=self.workdir,
            env=self._env(),
        )
        self._children.append(proc)
        return proc

    def finish(
        self, proc: subprocess.Popen[str], started: float, timeout: float = CHILD_WAIT_S
    ) -> Exited:
        """Wait for ``proc``; a child still running after ``timeout`` is killed and fails."""
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGUSR1)  # crash_agent dumps every thread's stack
            time.sleep(0.5)
            os.kill(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            pytest.fail(f"the agent did not finish within {timeout}s:\n{out}\n{err}")
        return Exited(proc.returncode, out, err, time.monotonic() - started)

    def run(self, scenario: str, workflow_id: str, **kwargs: Any) -> Exited:
        """Run an agent to its end in a new process."""
        started = time.monotonic()
        proc = self.spawn(scenario, workflow_id, **kwargs)
        return self.finish(proc, started)

    def marker(self, workflow_id: str, step: str) -> Path:
        return self.workdir / f"running-{workflow_id}-{step}"

    def wait_until_running(
        self, proc: subprocess.Popen[str], workflow_id: str, steps: Sequence[str]
    ) -> None:
        """Block until every step in ``steps`` has created its marker (it is running now)."""
        markers = [self.marker(workflow_id, step) for step in steps]
        deadline = time.monotonic() + MARKER_WAIT_S
        while not all(m.exists() for m in markers):
            if proc.poll() is not None:
                out, err = proc.communicate()
                pytest.fail(
                    f"the agent exited ({proc.returncode}) before {list(steps)} were all "
                    f"running:\n{out}\n{err}"
                )
            if time.monotonic() > deadline:
                pytest.fail(f"{list(steps)} did not start within {MARKER_WAIT_S}s")
            time.sleep(0.005)

    def crash(
        self,
        scenario: str,
        workflow_id: str,
        *,
        at: Sequence[str],
        also: Callable[[], bool] | None = None,
        **kwargs: Any,
    ) -> Exited:
        """Run an agent and SIGKILL it while every step in ``at`` is running.

        With ``also``, the kill waits until ``also()`` is true as well (say, until a concurrent
        step's result is in the journal).
        """
        started = time.monotonic()
        proc = self.spawn(scenario, workflow_id, hang=at, **kwargs)
        self.wait_until_running(proc, workflow_id, at)
        deadline = time.monotonic() + MARKER_WAIT_S
        while also is not None and not also():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("the agent never reached the state to kill it in")
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        exited = self.finish(proc, started)
        assert exited.killed, exited.describe()
        return exited

    def close(self) -> None:
        """Kill (by pid) and reap every child this harness started that is still running."""
        for proc in self._children:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.communicate()

    # -- observations ---------------------------------------------------------------------

    def executions(self, workflow_id: str) -> list[dict[str, Any]]:
        """The side file's lines for ``workflow_id``: one per real step execution."""
        if not self.log.exists():
            return []
        lines = [json.loads(line) for line in _complete_lines(self.log) if line]
        return [line for line in lines if line["wid"] == workflow_id]

    def counts(self, workflow_id: str) -> Counter[str]:
        """How many times each step of ``workflow_id`` actually executed."""
        return Counter(line["step"] for line in self.executions(workflow_id))

    @contextmanager
    def app(self) -> Iterator[stalwart.Stalwart]:
        """An app on the same store, in the test process, to read statuses and journals."""
        with stalwart.Stalwart(self.url) as app:
            yield app


def step_entries(app: stalwart.Stalwart, workflow_id: str, name: str) -> list[Any]:
    """The journal entries of the step ``name`` in ``workflow_id``, in order."""
    return [e for e in app.journal(workflow_id) if e.kind == "step" and e.name == name]


# -- workers ------------------------------------------------------------------------------

WORKER_AGENT = Path(__file__).with_name("worker_agent.py")
WORKER_READY_S = 30.0


class WorkerHarness:
    """Starts ``worker_agent.py`` workers on one SQLite file, kills them, reads side files.

    A worker's stdout and stderr go to ``WORKDIR/worker-<n>.out`` (a pipe nobody reads could
    fill up and block a busy worker); ``describe`` shows them when a test fails.
    """

    def __init__(self, root: Path, url: str | None = None) -> None:
        # tmp_path is absolute: sqlite:////tmp/...
        self.url = url or f"sqlite:///{root / 'runs.db'}"
        self.workdir = root / "work"
        self.workdir.mkdir()
        self.log = self.workdir / "executions.log"
        self._workers: list[tuple[subprocess.Popen[bytes], Path]] = []
        self._apps: list[stalwart.Stalwart] = []

    # -- workers --------------------------------------------------------------------------

    def start(
        self,
        *,
        concurrency: int = 8,
        lease_seconds: float = 30.0,
        hang: Sequence[str] = (),
        ready: bool = True,
        max_recoveries: int | None = None,
        program: Path = WORKER_AGENT,
        env: dict[str, str] | None = None,
        wrap: Sequence[str] = (),
        url: str | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start a worker process (``program``, by default ``worker_agent.py``, with extra
        environment ``env``, on ``url``, by default the harness's); with ``ready`` wait until
        it is about to serve. ``wrap`` prefixes the command (the fault lab's ``ip netns exec
        NAME`` runs it in a network namespace; the pid is still the worker's)."""
        cmd = [
            *wrap,
            sys.executable,
            str(program),
            url or self.url,
            str(self.workdir),
            "--concurrency",
            str(concurrency),
            "--lease-seconds",
            str(lease_seconds),
        ]
        if max_recoveries is not None:
            cmd += ["--max-recoveries", str(max_recoveries)]
        for step in hang:
            cmd += ["--hang", step]
        out = self.workdir / f"worker-{len(self._workers)}.out"
        with out.open("wb") as sink:
            proc = subprocess.Popen(
                cmd,
                stdout=sink,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env={**Harness._env(), **(env or {})},
            )
        self._workers.append((proc, out))
        if ready:
            self.wait_ready(proc)
        return proc

    def wait_ready(self, proc: subprocess.Popen[bytes]) -> None:
        marker = self.workdir / f"ready-{proc.pid}"
        self.wait_for(marker.exists, f"worker {proc.pid} ready", WORKER_READY_S, [proc])

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL a worker and reap it (a reaped pid is gone: its leases are free at once)."""
        assert proc.poll() is None, f"worker {proc.pid} already exited\n{self.describe()}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=CHILD_WAIT_S)
        assert proc.returncode == -signal.SIGKILL, proc.returncode

    def output(self, proc: subprocess.Popen[bytes]) -> str:
        for child, out in self._workers:
            if child is proc:
                return out.read_text(errors="replace")
        raise KeyError(proc.pid)

    def describe(self) -> str:
        """Every worker's exit status and the tail of its output."""
        parts = []
        for proc, out in self._workers:
            text = out.read_text(errors="replace") if out.exists() else ""
            parts.append(f"--- worker {proc.pid} (exit {proc.poll()})\n{text[-4000:]}")
        return "\n".join(parts)

    def wait_for(
        self,
        condition: Callable[[], bool],
        what: str,
        timeout: float,
        alive: Sequence[subprocess.Popen[bytes]] = (),
        interval: float = 0.01,
    ) -> float:
        """Poll ``condition`` until true; fail if it takes ``timeout`` s or a worker of
        ``alive`` exits meanwhile. Returns the monotonic time it became true."""
        deadline = time.monotonic() + timeout
        while True:
            if condition():
                return time.monotonic()
            for proc in alive:
                if proc.poll() is not None:
                    pytest.fail(f"worker {proc.pid} exited before {what}\n{self.describe()}")
            if time.monotonic() > deadline:
                self.dump_stacks()
                pytest.fail(f"{what}: not reached within {timeout}s\n{self.describe()}")
            time.sleep(interval)

    def dump_stacks(self) -> None:
        """Ask every live worker to print all its threads' stacks (to its output file)."""
        for proc, _out in self._workers:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGUSR1)
        time.sleep(0.3)

    def threads(self, proc: subprocess.Popen[bytes]) -> int:
        """The worker's current number of OS threads (``Threads:`` of /proc/PID/status)."""
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
        raise AssertionError(f"no Threads: line for pid {proc.pid}")

    def close(self) -> None:
        """Kill (by pid) and reap every worker still running; close the test's apps."""
        for app in self._apps:
            app.close()
        for proc, _out in self._workers:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait()

    # -- the test's side ------------------------------------------------------------------

    def app(self) -> tuple[stalwart.Stalwart, dict[str, Any]]:
        """An app on the same store in the test process, declaring the workers' workflows
        (to start runs and read results; it never executes them). Closed by ``close``."""
        from worker_agent import WorkerRecorder, declare

        app = stalwart.Stalwart(self.url)
        self._apps.append(app)
        return app, declare(app, WorkerRecorder(self.workdir, []))

    def marker(self, workflow_id: str, step: str) -> Path:
        return self.workdir / f"running-{workflow_id}-{step}"

    def executions(self, workflow_id: str | None = None) -> list[dict[str, Any]]:
        """The side file's lines (of ``workflow_id``): one per real step execution."""
        if not self.log.exists():
            return []
        lines = [json.loads(line) for line in _complete_lines(self.log) if line]
        return [line for line in lines if workflow_id is None or line["wid"] == workflow_id]

    def counts(self, workflow_id: str) -> Counter[str]:
        """How many times each step of ``workflow_id`` actually executed."""
        return Counter(line["step"] for line in self.executions(workflow_id))


def _complete_lines(log: Path) -> list[str]:
    """The lines of a side file a worker appends to, without a last line it is still writing
    (one with no newline yet)."""
    text = log.read_text()
    return text[: text.rfind("\n") + 1].splitlines()


def cli(url: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run ``python -m stalwart --url URL ARGS...`` in a new process, as an operator would."""
    return subprocess.run(
        [sys.executable, "-m", "stalwart", "--url", url, *args],
        cwd=cwd,
        env=Harness._env(),
        capture_output=True,
        text=True,
        timeout=CHILD_WAIT_S,
        check=False,
    )


def completed_twice(app: stalwart.Stalwart, workflow_id: str) -> list[Any]:
    """Journal positions of ``workflow_id`` with more than one 'completed' entry."""
    per_seq = Counter(
        e.seq for e in app.journal(workflow_id) if e.seq is not None and e.status == "completed"
    )
    return [seq for seq, n in per_seq.items() if n > 1]
