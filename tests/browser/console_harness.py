"""What the console's browser tests run against: a real SQLite store, real worker processes
(``console_agent.py``), a real ``stalwart ui`` server, and the system's Chromium.

``require_chromium()`` decides at import whether the browser tests can run: without Chromium
(or Playwright) they skip with one line, except in CI (``CI=true``), where that is a failure.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import stalwart

__all__ = ["AGENT", "TOKEN", "Fleet", "require_chromium", "screenshot"]

AGENT = Path(__file__).with_name("console_agent.py")
TOKEN = "console-test-token"
START_S = 30.0
ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "docs" / "img" / "console"


def require_chromium() -> str:
    """The path of the system's Chromium; skips the module (fails it in CI) when there is none."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    reason = None
    if found is None:
        reason = "no chromium on this machine (apt-get install chromium); the browser tests need it"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            reason = "playwright is not installed (pip install -e '.[dev]')"
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true: {reason}", pytrace=False)
        pytest.skip(reason, allow_module_level=True)
    assert found is not None
    return found


def screenshot(page: Any, name: str) -> None:
    """With STALWART_SCREENSHOTS=1, save the page as docs/img/console/NAME.png."""
    if os.environ.get("STALWART_SCREENSHOTS") != "1":
        return
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.wait_for_timeout(300)  # let the last refresh paint
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


class Fleet:
    """A store, its workers and the console's server, all real processes; ``close`` kills
    (by pid) every process it started."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.workdir = root / "work"
        self.workdir.mkdir()
        self.url = f"sqlite:///{root / 'runs.db'}"
        self.app = stalwart.Stalwart(self.url)
        self.workflows = stalwart_workflows(self.app, self.workdir)
        self._procs: list[tuple[subprocess.Popen[bytes], Path]] = []
        self._readers: list[threading.Thread] = []
        self.console_url = ""

    # -- processes ----------------------------------------------------------------------

    def _spawn(
        self, args: list[str], log_name: str, *, stdout: Any = None
    ) -> subprocess.Popen[bytes]:
        log = self.root / log_name
        out = log.open("ab")
        env = {
            k: v for k, v in os.environ.items() if k not in ("STALWART_URL", "STALWART_UI_TOKEN")
        }
        env["PYTHONPATH"] = os.pathsep.join([str(AGENT.parent), env.get("PYTHONPATH", "")])
        proc = subprocess.Popen(
            args, stdout=stdout or out, stderr=out, cwd=self.root, env=env, start_new_session=True
        )
        out.close()
        self._procs.append((proc, log))
        return proc

    def start_worker(self, queues: str, name: str) -> subprocess.Popen[bytes]:
        """A worker process serving ``queues`` (comma-separated); returns once it is spawned
        (``wait_ready`` waits until it serves)."""
        return self._spawn(
            [sys.executable, str(AGENT), self.url, str(self.workdir), "--queues", queues],
            f"{name}.log",
        )

    def wait_ready(self, *procs: subprocess.Popen[bytes]) -> None:
        """Wait until each worker touched its ready file."""
        for proc in procs:
            self.wait_for(
                lambda p=proc: (self.workdir / f"ready-{p.pid}").exists(),
                f"worker {proc.pid} ready",
            )

    def start_console(self) -> str:
        """Start ``stalwart ui`` on a free port; its URL once it listens."""
        proc = self._spawn(
            [
                sys.executable,
                "-m",
                "stalwart",
                "--url",
                self.url,
                "ui",
                "--port",
                "0",
                "--token",
                TOKEN,
            ],
            "ui.log",
            stdout=subprocess.PIPE,
        )
        assert proc.stdout is not None
        lines: queue.Queue[str] = queue.Queue()

        def read(stream: Any = proc.stdout) -> None:
            for raw in stream:
                lines.put(raw.decode(errors="replace"))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        self._readers.append(reader)
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                assert proc.poll() is None, f"stalwart ui exited {proc.returncode}\n{self.logs()}"
                continue
            found = re.match(r"console: (http://\S+)", line)
            if found:
                self.console_url = found.group(1)
                return self.console_url
        raise AssertionError(f"stalwart ui did not say where it listens\n{self.logs()}")

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL one process this fleet started, and reap it."""
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=START_S)

    def close(self) -> None:
        """Kill every process still running (by pid) and close the test's app."""
        for proc, _ in self._procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=START_S)
        for reader in self._readers:
            reader.join(timeout=START_S)  # the pipe is at its end once its process is gone
        for proc, _ in self._procs:
            if proc.stdout is not None:
                proc.stdout.close()
        self.app.close()

    def logs(self) -> str:
        """Every process's output, for a failure's message."""
        return "\n".join(
            f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}" for _, log in self._procs
        )

    # -- runs -----------------------------------------------------------------------------

    def start(self, workflow: str, *args: Any, workflow_id: str) -> str:
        """Start a run of ``workflow``; its id."""
        self.app.start(self.workflows[workflow], *args, workflow_id=workflow_id)
        return workflow_id

    def status(self, workflow_id: str) -> str:
        return str(self.app.handle(workflow_id).status())

    def wait_status(self, workflow_id: str, status: str, timeout: float = START_S) -> None:
        """Wait until the run has ``status``."""
        self.wait_for(
            lambda: self.status(workflow_id) == status, f"{workflow_id} {status}", timeout
        )

    def wait_for(self, condition: Callable[[], bool], what: str, timeout: float = START_S) -> None:
        """Poll ``condition`` until it holds; fail with every process's output after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}\n{self.logs()}")
            time.sleep(0.05)


def stalwart_workflows(app: stalwart.Stalwart, workdir: Path) -> dict[str, Any]:
    """The agents' workflows declared on the test's own app (to start runs and read them)."""
    from console_agent import declare

    return declare(app, workdir)
