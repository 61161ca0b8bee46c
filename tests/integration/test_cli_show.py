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
import threading
import time
from pathlib import Path

import pytest

import stalwart
from cli_process import stalwart as _stalwart
from stalwart import testing

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
    return _stalwart(*args, cwd=cwd, clean=True)


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


LONG_ID = "refund-customer-00042-order-7-2026-12-04"  # 40 characters, as real ids run


def _columns(lines: list[str]) -> list[dict[str, str]]:
    """A drawn timeline's rows, each column's cell joined across its wrapped lines (no spaces:
    a folded value breaks anywhere, a wrapped one at a space)."""
    tops = [i for i, line in enumerate(lines) if line.lstrip().startswith("SEQ")]
    assert len(tops) == 1, lines  # its header drawn whole
    top = tops[0]
    heads = lines[top].split()
    assert heads == [
        *("SEQ", "KIND", "NAME", "STATUS", "TRY", "FINISHED", "DURATION", "KEY", "DETAIL")
    ], lines[top]
    starts = [0, *(lines[top].index(f" {h}") + 1 for h in heads[1:])]
    rows: list[dict[str, str]] = []
    for line in lines[top + 1 :]:
        if not line.strip() or line.startswith("store:"):
            break
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        if cells[1]:  # KIND is never wrapped: a new row
            rows.append(dict.fromkeys(heads, ""))
        for head, cell in zip(heads, cells, strict=True):
            rows[-1][head] += cell.replace(" ", "")
    return rows


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
    [row] = [row for row in _columns(lines) if row["STATUS"] == "completed" and row["TRY"]]
    assert len(row["DETAIL"]) > 100, lines  # wrapped: a line of its own is narrower
    assert "word020" in row["DETAIL"]  # past the 90 characters a piped row keeps
    assert row["DETAIL"].endswith("…") and "word050" not in row["DETAIL"]  # cut at 200


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


@pytest.mark.parametrize("full", [False, True])
def test_every_value_is_drawn_whole_with_a_long_id_on_100_columns(
    tmp_path: Path, full: bool
) -> None:
    url = f"sqlite:///{tmp_path / 'ids.db'}"
    record = {"id": 42, "name": "Ada Lovelace", "note": "a long note " * 5}
    with stalwart.Stalwart(url) as app:

        @app.step(name="fetch_customer_record")
        def fetch() -> dict[str, object]:
            return record

        @app.workflow(name="refund")
        def refund() -> dict[str, object]:
            return fetch()

        app.run(refund, workflow_id=LONG_ID)
    args = ["--url", url, "show", LONG_ID, *(["--full"] if full else [])]
    lines = _drawn(*args, cwd=tmp_path, columns=100)
    assert max(len(line) for line in lines) <= 100
    rows = _columns(lines)
    [step] = [row for row in rows if row["KIND"] == "step"]
    assert step["SEQ"] == "1" and step["TRY"] == "1" and step["STATUS"] == "completed"
    assert step["NAME"] == "fetch_customer_record"
    assert step["KEY"] == f"{LONG_ID}/0"
    assert step["DURATION"].endswith("s") and "…" not in step["FINISHED"]
    detail = json.dumps(record).replace(" ", "")
    if full:
        assert step["DETAIL"] == detail
        assert "…" not in "".join(lines)
    else:  # cut at 200 characters, but drawn
        assert len(step["DETAIL"]) > 60 and detail.startswith(step["DETAIL"][:60])
    assert [row["KIND"] for row in rows] == ["run", "step", "run"]


def test_a_newline_in_free_text_keeps_each_piped_row_one_line(tmp_path: Path) -> None:
    """An approval's subject is free text: piped, ``ls``, ``approvals`` and ``show`` write its
    newline and tab as escapes, so a script reading one line per row reads the right cells."""
    url = f"sqlite:///{tmp_path / 'subjects.db'}"
    with stalwart.Stalwart(url) as app:

        @app.workflow(name="asks")
        def asks() -> bool:
            return stalwart.request_approval("Refund\nfor O-1\twith tab") is not None

        app.start(asks, workflow_id="refund-O-1")
        worker = testing.worker(app)
        thread = threading.Thread(target=worker.serve, daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not app.approvals() and time.monotonic() < deadline:
            time.sleep(0.01)  # until the run waits on its approval
        worker.stop()
        thread.join(30)
    for args in (["ls"], ["approvals"], ["show", "refund-O-1"]):
        shown = _piped("--url", url, *args, cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        assert any("Refund\\nfor O-1\\twith tab" in line for line in lines), shown.stdout
        assert not any(line.startswith("for O-1") for line in lines), shown.stdout
