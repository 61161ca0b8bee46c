"""Who may do what: reads on loopback need no token, writes need the bearer token (never a
cookie, never the URL), a non-loopback bind needs a token for reads too and is refused at start
without one; the answers carry the security headers."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from ui_harness import Scene, _env, cli, ui_server

import stalwart
from stalwart._errors import install_hint


def test_reads_need_no_token_on_loopback_and_writes_need_the_right_one(ui: Scene) -> None:
    assert ui.reader().get("/api/v1/runs").status_code == 200
    assert ui.reader().get("/api/v1/runs/paid").status_code == 200
    client = ui.reader()
    attempts = {
        "no token": client.post("/api/v1/runs/paid/cancel"),
        "wrong token": client.post(
            "/api/v1/runs/paid/cancel", headers={"Authorization": "Bearer not-it"}
        ),
        "token as a prefix": client.post(
            "/api/v1/runs/paid/cancel", headers={"Authorization": f"Bearer {ui.token}x"}
        ),
        "basic auth": client.post("/api/v1/runs/paid/cancel", auth=("ui", ui.token)),
        "cookie": client.post(
            "/api/v1/runs/paid/cancel",
            headers={"Cookie": f"token={ui.token}; Authorization=Bearer {ui.token}"},
        ),
        "query": client.post("/api/v1/runs/paid/cancel", params={"token": ui.token}),
    }
    for how, answer in attempts.items():
        assert answer.status_code == 401, how
        assert answer.json()["error"]["type"] == "Unauthorized", how
        assert answer.headers["www-authenticate"] == "Bearer", how
    # the right token passes the check, and the action is then judged on its own (409)
    assert ui.writer().post("/api/v1/runs/paid/cancel").status_code == 409
    # 401 comes before any look at the body or the run
    assert client.post("/api/v1/runs/nope/fork", json={"from_seq": -1}).status_code == 401


def test_another_host_name_is_refused_on_loopback(ui: Scene) -> None:
    rebound = ui.reader().get("/api/v1/runs", headers={"Host": "evil.example:8377"})
    assert rebound.status_code == 400 and rebound.json()["error"]["type"] == "BadRequest"
    for host in ("localhost:1", "127.0.0.1", "[::1]:8377"):
        assert ui.reader().get("/api/v1/health", headers={"Host": host}).status_code == 200


def test_answers_carry_the_security_headers(ui: Scene) -> None:
    page = ui.reader().get("/")
    assert page.headers["content-type"].startswith("text/html")
    assert page.headers["content-security-policy"].startswith("default-src 'self'")
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-content-type-options"] == "nosniff"
    api = ui.reader().get("/api/v1/runs")
    assert api.headers["x-content-type-options"] == "nosniff"
    assert api.headers["cache-control"] == "no-store"
    assert "access-control-allow-origin" not in api.headers
    preflight = ui.reader().options(
        "/api/v1/runs/paid/cancel",
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert "access-control-allow-origin" not in preflight.headers


def _store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'auth.db'}"
    stalwart.Stalwart(url).close()
    return url


def test_a_non_loopback_bind_without_a_token_is_refused_before_binding(tmp_path: Path) -> None:
    url = _store(tmp_path)
    with socket.socket() as taken:  # the port is taken: binding first would fail otherwise
        taken.bind(("0.0.0.0", 0))
        port = str(taken.getsockname()[1])
        refused = cli("ui", "--url", url, "--host", "0.0.0.0", "--port", port)
    assert refused.returncode == 1
    assert refused.stderr.splitlines() == [
        "error: --host 0.0.0.0 is reachable from other machines: give a token with --token T "
        "(or STALWART_UI_TOKEN), or bind to 127.0.0.1"
    ]
    assert refused.stdout == ""


def test_a_store_that_does_not_exist_is_refused(tmp_path: Path) -> None:
    missing = cli("ui", "--url", f"sqlite:///{tmp_path / 'none.db'}", "--port", "0")
    assert missing.returncode == 1
    assert missing.stderr.startswith(f"error: no store at {tmp_path / 'none.db'}")
    assert not (tmp_path / "none.db").exists()


def test_without_the_extra_ui_says_how_to_install_it(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['fastapi'] = None; sys.argv = ['stalwart', 'ui']; "
        "from stalwart._cli import main; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=_env(), check=False
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"error: the console needs the ui extra (FastAPI and uvicorn): {install_hint('ui')}"
    ]


def test_on_loopback_without_a_token_one_is_generated_and_printed(tmp_path: Path) -> None:
    with ui_server(_store(tmp_path)) as server:
        assert server.stdout[0].startswith("console: http://127.0.0.1:")
        assert server.token is not None and len(server.token) >= 32
        assert server.token not in server.stdout[0]  # never in the URL
        with server.client() as reader, server.client(server.token) as writer:
            assert reader.get("/api/v1/runs").status_code == 200
            assert reader.post("/api/v1/runs/x/cancel").status_code == 401
            assert writer.post("/api/v1/runs/x/cancel").status_code == 404
    assert server.process.returncode == 0  # Ctrl-C stops it cleanly


@pytest.mark.parametrize("how", ["--token", "STALWART_UI_TOKEN"])
def test_a_non_loopback_bind_with_a_token_needs_it_for_reads_too(tmp_path: Path, how: str) -> None:
    url = _store(tmp_path)
    args = ["--host", "0.0.0.0"] + (["--token", "tok-1"] if how == "--token" else [])
    env = _env(STALWART_UI_TOKEN="tok-1") if how != "--token" else None
    with ui_server(url, *args, env=env) as server:
        assert server.token is None  # a token given is not printed
        base = server.base.replace("0.0.0.0", "127.0.0.1")
        server.base = base
        with server.client() as anyone, server.client("tok-1") as operator:
            refused = anyone.get("/api/v1/runs")
            assert refused.status_code == 401
            assert refused.json()["error"]["type"] == "Unauthorized"
            assert operator.get("/api/v1/runs").status_code == 200
            assert operator.get("/api/v1/health").json()["reads_need_token"] is True
            assert anyone.get("/api/v1/health").status_code == 200  # says what it needs
