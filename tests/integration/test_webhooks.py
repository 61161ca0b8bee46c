"""Webhooks over real HTTP: ``stalwart worker hooks_agent:app --http-port`` and ``stalwart ui
--app hooks_agent:app`` in subprocesses, posted to with httpx, signed as GitHub and Stripe sign;
and a worker killed with SIGKILL between deliveries, whose sender delivers again."""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

import stalwart
from stalwart._signatures import TOLERANCE, sign

pytest.importorskip("uvicorn")

HERE = Path(__file__).resolve().parent
GITHUB_SECRET = "gh-s3cret"  # as hooks_agent.py declares them
STRIPE_SECRET = "whsec_test"
START_TIMEOUT = 60.0
WORKER_READY = re.compile(r"webhooks at (http://\S+?)api/v1/hooks/")
UI_READY = re.compile(r"^console: (http://\S+)$")


@dataclass
class Served:
    """A running ``stalwart`` server process and its base URL."""

    process: subprocess.Popen[str]
    base: str

    def post(
        self, hook: str, body: Any, *, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        sent = {"Content-Type": "application/json", **(headers or {})}
        return httpx.post(f"{self.base}api/v1/hooks/{hook}", content=raw, headers=sent, timeout=30)


def _env(url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("STALWART_URL", "STALWART_APP")}
    env["STALWART_URL"] = url
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), *(p for p in sys.path if p)])
    env["PYTHONUNBUFFERED"] = "1"
    return env


@contextmanager
def served(url: str, *args: str, ready: re.Pattern[str], cwd: Path) -> Iterator[Served]:
    """``stalwart ARGS`` on the store ``url`` until the block ends (SIGINT, else SIGKILL)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "stalwart", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_env(url),
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
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"stalwart {args[0]} did not start: {seen}") from None
            if line is None:
                raise AssertionError(f"stalwart {args[0]} exited: {seen}")
            seen.append(line)
            found = ready.search(line)
            if found:
                break
        yield Served(process, found.group(1))
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        reader.join(5)
        if process.stdout is not None:
            process.stdout.close()


def worker(url: str, cwd: Path, *extra: str) -> Any:
    return served(
        url, "worker", "hooks_agent:app", "--http-port", "0", *extra, ready=WORKER_READY, cwd=cwd
    )


def github(body: dict[str, Any], delivery: str, secret: str = GITHUB_SECRET) -> dict[str, str]:
    raw = json.dumps(body).encode()
    return {**sign("hmac-sha256", secret, raw, now=time.time()), "X-GitHub-Delivery": delivery}


def stripe(body: dict[str, Any], *, at: float | None = None) -> dict[str, str]:
    raw = json.dumps(body).encode()
    return sign("stripe", STRIPE_SECRET, raw, now=time.time() if at is None else at)


def runs(app: stalwart.Stalwart) -> set[str]:
    return {info.workflow_id for info in app.list_workflows(limit=1000)}


def test_a_worker_serves_signed_deliveries_once(shared_url: str, tmp_path: Path) -> None:
    with stalwart.Stalwart(shared_url) as app, worker(shared_url, tmp_path) as hooks:
        opened = {"action": "opened", "number": 7}
        first = hooks.post("github", opened, headers=github(opened, "gh-1"))
        assert first.status_code == 202, first.text
        assert first.json() == {"workflow_id": "github:gh-1"}
        assert app.handle("github:gh-1").result(timeout=60) == "triaged opened"
        again = hooks.post("github", opened, headers=github(opened, "gh-1"))
        assert again.status_code == 200 and again.json()["duplicate"] is True

        for headers in ({}, github(opened, "gh-2", secret="wrong")):
            refused = hooks.post("github", opened, headers=headers)
            assert refused.status_code == 401, refused.text
            assert refused.json()["error"]["type"] == "Unauthorized"
        event = {"id": "evt_42", "type": "checkout.session.completed"}
        stale = hooks.post("stripe", event, headers=stripe(event, at=time.time() - TOLERANCE - 60))
        assert stale.status_code == 401 and "old" in stale.json()["error"]["message"]
        assert runs(app) == {"github:gh-1"}

        paid = hooks.post("stripe", event, headers=stripe(event))
        assert paid.status_code == 202 and paid.json() == {"workflow_id": "stripe:evt_42"}
        assert app.handle("stripe:evt_42").result(timeout=60) == "fulfilled evt_42"

        app.start(app_workflow(app, "inbox"), workflow_id="waiting")
        ping = {"run": "waiting", "n": 1}
        sent = hooks.post("pings", ping, headers=github(ping, "ping-1"))
        assert sent.status_code == 202 and sent.json() == {"workflow_id": "waiting"}
        assert app.handle("waiting").result(timeout=60) == ping
        repeat = hooks.post("pings", ping, headers=github(ping, "ping-1"))
        assert repeat.status_code == 200 and repeat.json()["duplicate"] is True

        bad = hooks.post("github", b"not json", headers=github_raw(b"not json", "gh-3"))
        assert bad.status_code == 400 and bad.json()["error"]["type"] == "Rejected"
        assert hooks.post("nope", opened).status_code == 404
        # counted in the store, fleet-wide: listed by any app on it
        counts = {s.name: (s.kind, s.accepted, s.rejected) for s in app.subscriptions()}
        assert counts["github"] == ("webhook", 1, 1)
        assert counts["stripe"] == ("webhook", 1, 0)
        assert counts["pings"] == ("webhook", 1, 0)
        listed = subprocess.run(
            [sys.executable, "-m", "stalwart", "subscriptions", "--json", "--url", shared_url],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env=_env(shared_url),
        )
        by_name = {row["name"]: row for row in map(json.loads, listed.stdout.splitlines())}
        assert by_name["github"] == {
            "name": "github",
            "kind": "webhook",
            "target": "starts triage",
            "accepted": 1,
            "rejected": 1,
        }


def github_raw(raw: bytes, delivery: str) -> dict[str, str]:
    return {**sign("hmac-sha256", GITHUB_SECRET, raw, now=time.time()), "X-Delivery-Id": delivery}


def app_workflow(app: stalwart.Stalwart, name: str) -> Any:
    @app.workflow(name=name)
    def inbox() -> Any:
        return stalwart.wait_for_event("ping", timeout=3600)

    return inbox


def test_the_console_serves_hooks_reached_through_a_proxy(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ui.db'}"
    stalwart.Stalwart(url).close()
    with (
        stalwart.Stalwart(url) as app,
        served(
            url, "ui", "--app", "hooks_agent:app", "--port", "0", ready=UI_READY, cwd=tmp_path
        ) as ui,
    ):
        body = {"action": "closed"}
        proxied = {**github(body, "gh-p"), "Host": "hooks.example.com"}
        answer = ui.post("github", body, headers=proxied)
        assert answer.status_code == 202, answer.text
        assert "github:gh-p" in runs(app)
        console = httpx.get(f"{ui.base}api/v1/runs", headers={"Host": "hooks.example.com"})
        assert console.status_code == 400  # the console itself still answers loopback names only
        assert ui.post("github", body, headers={"Host": "hooks.example.com"}).status_code == 401
        unsigned = ui.post("open", {"action": "labeled"}, headers={"X-Delivery-Id": "o-1"})
        assert unsigned.status_code == 202 and unsigned.json() == {"workflow_id": "open:o-1"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_metrics_share_the_port_when_asked(tmp_path: Path) -> None:
    pytest.importorskip("prometheus_client")
    url = f"sqlite:///{tmp_path / 'm.db'}"
    port = str(_free_port())
    args = ("--metrics-port", port)
    with served(
        url,
        "worker",
        "hooks_agent:app",
        "--http-port",
        port,
        *args,
        ready=WORKER_READY,
        cwd=tmp_path,
    ) as hooks:
        body = {"action": "opened"}
        assert hooks.post("github", body, headers=github(body, "m-1")).status_code == 202
        scraped = httpx.get(f"{hooks.base}metrics", timeout=30)
        assert scraped.status_code == 200
        assert 'stalwart_ingress_messages_total{source="github"} 1.0' in scraped.text


def test_a_delivery_resent_after_a_sigkill_is_deduplicated(shared_url: str, tmp_path: Path) -> None:
    body = {"action": "opened"}
    with stalwart.Stalwart(shared_url) as app:
        with worker(shared_url, tmp_path) as first:
            assert first.post("github", body, headers=github(body, "k-1")).status_code == 202
            os.kill(first.process.pid, signal.SIGKILL)
            first.process.wait(30)
        with worker(shared_url, tmp_path) as second:
            resent = second.post("github", body, headers=github(body, "k-1"))
            assert resent.status_code == 200 and resent.json()["duplicate"] is True
            assert second.post("github", body, headers=github(body, "k-2")).status_code == 202
            assert app.handle("github:k-1").result(timeout=60) == "triaged opened"
            assert app.handle("github:k-2").result(timeout=60) == "triaged opened"
        assert runs(app) == {"github:k-1", "github:k-2"}


def test_a_webhook_is_declared_signed_or_explicitly_unsigned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with stalwart.Stalwart("memory://") as app:

        @app.workflow(name="agent")
        def agent(body: dict[str, Any]) -> None: ...

        with pytest.raises(stalwart.UsageError, match="allow_unsigned=True"):
            app.webhook("gh", start=agent)
        refusals = [
            ({"start": agent, "secret": "s", "scheme": "md5"}, "scheme='md5'"),
            ({"start": agent, "secret": ""}, "non-empty"),
            ({"start": agent, "event": "e", "secret": "s"}, "exactly one"),
            ({"event": "e", "secret": "s"}, "needs to="),
            ({"secret": "s"}, "exactly one"),
        ]
        for options, says in refusals:
            with pytest.raises(stalwart.UsageError, match=says):
                app.webhook("gh", **options)
        with pytest.raises(stalwart.UsageError, match="one segment"):
            app.webhook("a/b", start=agent, secret="s")
        app.webhook("gh", start=agent, secret="s")
        app.webhook("open", start=agent, allow_unsigned=True)
        app.webhook("paid", event="paid", to=lambda body: body["run"], secret=b"k", scheme="stripe")
        with pytest.raises(stalwart.RegistrationError, match="already declared"):
            app.webhook("gh", start=agent, secret="s")
        from stalwart._ui.asgi import create_app
        from stalwart._ui.worker_http import HookServer

        server = HookServer(app, "127.0.0.1", 0)
        with caplog.at_level(logging.WARNING, logger="stalwart"):
            create_app(app, "token")  # the console serves the hooks
            server.start(None)  # and so does a worker's --http-port
            server.stop()
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 2  # "open" once per server, the signed hooks never
        assert all(w.startswith("webhook open: served unsigned (allow_unsigned") for w in warnings)
        listed = {s.name: (s.kind, s.target, s.accepted, s.rejected) for s in app.subscriptions()}
        assert listed == {
            "gh": ("webhook", "starts agent", 0, 0),
            "open": ("webhook", "starts agent", 0, 0),
            "paid": ("webhook", "event 'paid'", 0, 0),
        }


def test_http_port_without_the_extra_names_the_install(tmp_path: Path) -> None:
    (tmp_path / "tiny.py").write_text(
        "import stalwart\n"
        f"app = stalwart.Stalwart({f'sqlite:///{tmp_path}/t.db'!r})\n"
        "@app.workflow\n"
        "def noop() -> None: ...\n"
    )
    code = (
        "import sys\n"
        "sys.modules['uvicorn'] = None\n"
        "sys.argv = ['stalwart', 'worker', 'tiny:app', '--http-port', '0']\n"
        "from stalwart._cli import main\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env=_env(f"sqlite:///{tmp_path}/t.db"),
    )
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors and errors[-1].startswith("error: --http-port needs the ui extra")


def test_a_burst_of_deliveries_takes_turns_on_the_connections_the_worker_reserved(
    tmp_path: Path,
) -> None:
    """A worker's HTTP server runs at most ``DELIVERY_THREADS`` deliveries at once, each in a
    thread with a store connection the worker reserved for it (``HookServer.threads``); the
    rest of a burst wait for a turn, and every delivery is answered."""
    from stalwart._ingress import ingress_of
    from stalwart._ui.hooks_route import DELIVERY_THREADS
    from stalwart._ui.worker_http import HookServer

    with stalwart.Stalwart(f"sqlite:///{tmp_path / 'burst.db'}") as app:

        @app.workflow
        def agent(body: Any) -> Any:
            return body

        app.webhook("open", start=agent, allow_unsigned=True)
        delivery = ingress_of(app).delivery
        real = delivery.deliver
        lock, at_once, peak = threading.Lock(), [0], [0]

        def counted(*args: Any, **kwargs: Any) -> Any:
            with lock:
                at_once[0] += 1
                peak[0] = max(peak[0], at_once[0])
            try:
                time.sleep(0.1)  # long enough for the burst to pile up
                return real(*args, **kwargs)
            finally:
                with lock:
                    at_once[0] -= 1

        delivery.deliver = counted  # type: ignore[method-assign]
        server = HookServer(app, "127.0.0.1", 0)
        assert server.threads == DELIVERY_THREADS
        server.start(None)
        try:
            burst = 3 * DELIVERY_THREADS
            answers: list[int] = []

            def post(i: int) -> None:
                headers = {"X-Delivery-Id": f"d{i}"}
                reply = httpx.post(
                    f"{server.url}api/v1/hooks/open", json={"n": i}, headers=headers, timeout=30
                )
                answers.append(reply.status_code)

            threads = [threading.Thread(target=post, args=(i,)) for i in range(burst)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)
        finally:
            server.stop()
    assert answers == [202] * burst
    assert 2 <= peak[0] <= DELIVERY_THREADS
