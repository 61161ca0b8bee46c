"""``stalwart ui`` as the tests run it: the real command in a subprocess, on a free port, and
a scene of runs in every state an operator acts on, worked by a real worker in a thread."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

import stalwart
from operator_agent import declare
from stalwart import testing
from stalwart.testing import FakeClock

__all__ = ["Scene", "UiServer", "cli", "scene", "ui_server", "wait_for"]

START_TIMEOUT = 30.0
FROZEN = 5  # runs created at the same instant, to page through


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``stalwart ARGS`` to its end (for the commands that refuse to start)."""
    return subprocess.run(
        [sys.executable, "-m", "stalwart", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env if env is not None else _env(),
    )


def _env(**extra: str) -> dict[str, str]:
    drop = ("STALWART_URL", "STALWART_UI_TOKEN")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **extra}


@dataclass
class UiServer:
    """A running ``stalwart ui``: where it listens, the token it printed, what it wrote."""

    process: subprocess.Popen[str]
    base: str
    token: str | None
    stdout: list[str]

    def client(self, token: str | None = None) -> httpx.Client:
        """An HTTP client of the server (with ``Authorization: Bearer token`` if given)."""
        headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
        return httpx.Client(base_url=self.base, headers=headers, timeout=30)


@contextmanager
def ui_server(
    url: str, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> Iterator[UiServer]:
    """``stalwart ui --url URL --port 0 ARGS`` (run in ``cwd``) until the block ends (then
    SIGINT)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "stalwart", "ui", "--url", url, "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env if env is not None else _env(),
        cwd=cwd,
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line.rstrip("\n"))
        lines.put(None)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + START_TIMEOUT
        base = token = None
        while token is None:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"stalwart ui did not start: {seen}") from None
            if line is None:
                process.wait(10)
                assert process.stderr is not None
                raise AssertionError(f"stalwart ui exited: {seen} {process.stderr.read()}")
            seen.append(line)
            if line.startswith("console: "):
                base = line.removeprefix("console: ")
            elif line.startswith("token: "):
                token = line.removeprefix("token: ")
        assert base is not None
        yield UiServer(process, base, None if " " in token else token, seen)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        reader.join(5)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def wait_for(what: str, check: Callable[[], Any], timeout: float = 20.0) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@dataclass
class Scene:
    """A store with runs in every state an operator acts on, a worker working it, and
    ``stalwart ui`` serving it (with the token ``TOKEN``)."""

    url: str
    app: stalwart.Stalwart
    workdir: Path
    workflows: dict[str, Any]
    server: UiServer
    token: str = "s3cret-token"
    clients: list[httpx.Client] = field(default_factory=list)

    def reader(self) -> httpx.Client:
        """A client without a token (closed when the scene ends)."""
        self.clients.append(self.server.client())
        return self.clients[-1]

    def writer(self, by: str | None = None) -> httpx.Client:
        """A client with the token (and ``X-Stalwart-By: by``), closed when the scene ends."""
        client = self.server.client(self.token)
        if by is not None:
            client.headers["X-Stalwart-By"] = by
        self.clients.append(client)
        return client

    def status(self, workflow_id: str) -> str:
        """The run's status, from the Python API."""
        return str(self.app.handle(workflow_id).status())

    def until(self, workflow_id: str, *statuses: str) -> None:
        """Wait until the worker brought the run to one of ``statuses``."""
        wait_for(f"{workflow_id} in {statuses}", lambda: self.status(workflow_id) in statuses)

    def start(self, name: str, *args: Any, workflow_id: str) -> str:
        """Start a run for the worker."""
        self.app.start(self.workflows[name], *args, workflow_id=workflow_id)
        return workflow_id


@contextmanager
def scene(url: str, workdir: Path) -> Iterator[Scene]:
    """The scene on the store ``url``: a run in doubt, a run the worker dead-letters, runs
    waiting on an approval and an event, and ``FROZEN`` runs created at one instant."""
    with stalwart.Stalwart(url, lease_seconds=2.0) as app:
        workflows = declare(app, workdir)
        (workdir / "crash").touch()
        with pytest.raises(KeyboardInterrupt):
            app.run(workflows["pay"], "o1", workflow_id="doubt")
        with pytest.raises(stalwart.NeedsAttention):
            app.run(workflows["pay"], "o1", workflow_id="doubt")
        (workdir / "crash").unlink()
        app.run(workflows["pay"], "o2", workflow_id="paid")
        with stalwart.Stalwart(url, clock=FakeClock()) as frozen:

            @frozen.workflow(name="frozen")
            def frozen_wf() -> None: ...

            for i in range(FROZEN):
                frozen.start(frozen_wf, workflow_id=f"frozen-{i}")
        worker = testing.worker(app, concurrency=4)
        thread = threading.Thread(target=worker.serve, daemon=True)
        thread.start()
        try:
            with ui_server(url, "--token", Scene.token) as server:
                served = Scene(url, app, workdir, workflows, server)
                try:
                    yield served
                finally:
                    for client in served.clients:
                        client.close()
        finally:
            worker.stop()
            thread.join(15)
