"""``stalwart show``: ``--full`` prints every value whole, piped or drawn; on a terminal the
``DETAIL`` column wraps instead of being cut; ``--seq N --json`` prints one JSON object. Run as
the real command: piped through a subprocess's pipes, drawn on a real pseudo-terminal."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

import stalwart

WORDS = " ".join(f"word{i:03d}" for i in range(51))  # 407 characters, the last word050
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture
def store(tmp_path: Path) -> str:
    """Run 'long': a step whose output is 407 characters, retried once after a long error."""
    url = f"sqlite:///{tmp_path / 'show.db'}"
    with stalwart.Stalwart(url) as app:
        tries: list[int] = []

        @app.step(name="write", retry=stalwart.Retry(max_attempts=2, initial_delay=0.0))
        def write() -> str:
            tries.append(1)
            if len(tries) == 1:
                raise RuntimeError("flaky: " + WORDS)
            return WORDS

        @app.workflow(name="essay")
        def essay() -> str:
            return write()

        app.run(essay, workflow_id="long")
    return url


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("STALWART_URL", "STALWART_APP")}


def _piped(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stalwart", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=_env(),
    )


def _drawn(*args: str, cwd: Path, columns: int = 120) -> list[str]:
    """The command's stdout on a pseudo-terminal ``columns`` wide, as lines without colour."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "stalwart", *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=subprocess.DEVNULL,
        env={**_env(), "COLUMNS": str(columns), "TERM": "xterm"},
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the command has exited
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    assert proc.wait(timeout=60) == 0
    text = ANSI.sub("", b"".join(chunks).decode())
    return [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]


def test_full_prints_every_value_whole_when_piped(store: str, tmp_path: Path) -> None:
    full = _piped("--url", store, "show", "long", "--full", cwd=tmp_path)
    assert full.returncode == 0, full.stderr
    assert "…" not in full.stdout
    assert json.dumps(WORDS) in full.stdout  # the output, 409 characters with its quotes
    assert f"RuntimeError: flaky: {WORDS}" in full.stdout
    cut = _piped("--url", store, "show", "long", cwd=tmp_path)
    [row] = [line for line in cut.stdout.splitlines() if " completed " in line and "write" in line]
    assert row.endswith("…") and "word050" not in row  # piped without --full: one short line


def test_full_prints_every_value_whole_on_a_terminal(store: str, tmp_path: Path) -> None:
    lines = _drawn("--url", store, "show", "long", "--full", cwd=tmp_path)
    text = " ".join(lines)
    assert "…" not in text
    for i in range(51):
        assert f"word{i:03d}" in text
    assert max(len(line) for line in lines) <= 120


def test_the_detail_column_wraps_on_a_terminal(store: str, tmp_path: Path) -> None:
    lines = _drawn("--url", store, "show", "long", cwd=tmp_path, columns=120)
    assert max(len(line) for line in lines) <= 120
    [first] = [i for i, line in enumerate(lines) if " completed " in line and "write" in line]
    detail_at = lines[first].index('"word000')
    wrapped = [lines[first][detail_at:]]
    for line in lines[first + 1 :]:  # the DETAIL column's continuation lines
        if line[:detail_at].strip():
            break
        wrapped.append(line[detail_at:].strip())
    assert len(wrapped) > 1, lines
    detail = " ".join(wrapped)
    assert "word020" in detail  # past the 90 characters a piped row keeps
    assert detail.endswith("…") and "word050" not in detail  # a value is cut at 200 unless --full


def test_seq_with_json_prints_one_object_of_that_seq(store: str, tmp_path: Path) -> None:
    done = _piped("--url", store, "show", "long", "--seq", "1", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)  # one JSON document
    whole = json.loads(_piped("--url", store, "show", "long", "--json", cwd=tmp_path).stdout)
    assert run.keys() == whole.keys() and run["workflow_id"] == "long"
    assert [(e["seq"], e["attempt"], e["status"]) for e in run["journal"]] == [
        (1, 1, "failed"),
        (1, 2, "completed"),
    ]
    assert run["journal"][1]["output"] == WORDS
    missing = _piped("--url", store, "show", "long", "--seq", "9", "--json", cwd=tmp_path)
    assert missing.returncode == 1
    assert (
        missing.stderr.splitlines()[-1] == "error: run 'long' has no entry 9; its seqs are 1 to 1"
    )
