"""The command line: listing, showing, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import stalwart


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stalwart", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


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


def test_exit_codes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    missing = _cli("--url", url, "show", "nope", cwd=tmp_path)
    assert missing.returncode == 1 and "nope" in missing.stderr
    assert _cli("no-such-command", cwd=tmp_path).returncode == 2
    bad = _cli("--url", "mysql://u:pw@h/db", "ls", cwd=tmp_path)
    assert bad.returncode == 1 and "***" in bad.stderr and "pw@" not in bad.stderr
