"""``stalwart tail``, the real command in a subprocess: a run's stream as text (what
``stream_text`` shows) or JSON Lines, live while the run goes on, exiting 0 once it ended."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import stalwart
from cli_process import stalwart as _stalwart

pytestmark = pytest.mark.timeout(60)


def _declare(app: stalwart.Stalwart) -> tuple[object, object]:
    @app.step(name="say", retry=stalwart.Retry(max_attempts=2, initial_delay=0.0))
    def say(words: list[str]) -> None:
        for word in words:
            stalwart.emit(word)
        stalwart.emit({"words": len(words)}, stream="stats")
        if stalwart.attempt() == 1:
            raise RuntimeError("flaky")

    @app.workflow(name="talk")
    def talk(words: list[str]) -> None:
        say(words)

    @app.workflow(name="waiting")
    def waiting() -> None:
        stalwart.emit("before ")
        stalwart.wait_for_event("go")
        stalwart.emit("after")

    return talk, waiting


def test_tail_prints_the_text_and_json_lines_of_an_ended_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tail.db'}"
    with stalwart.Stalwart(url) as app:
        talk, _waiting = _declare(app)
        app.run(talk, ["a ", "b"], workflow_id="t1")
    text = _stalwart("--url", url, "tail", "t1", cwd=tmp_path, clean=True)
    assert text.returncode == 0, text.stderr
    assert text.stdout == "a b\n"  # the failed attempt's text dropped, as stream_text does
    lines = _stalwart("--url", url, "tail", "t1", "--json", "--after", "1", cwd=tmp_path)
    chunks = [json.loads(line) for line in lines.stdout.splitlines()]
    assert [(c["offset"], c["attempt"], c["data"]) for c in chunks] == [(2, 2, "a "), (3, 2, "b")]
    stats = _stalwart("--url", url, "tail", "t1", "--stream", "stats", "--json", cwd=tmp_path)
    assert [json.loads(line)["data"] for line in stats.stdout.splitlines()] == [{"words": 2}] * 2
    missing = _stalwart("--url", url, "tail", "nope", cwd=tmp_path)
    assert missing.returncode == 1
    assert "error: no run with workflow_id 'nope'" in missing.stderr


def test_tail_follows_a_live_run_until_it_ends(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'live.db'}"
    with stalwart.Stalwart(url) as app:
        _talk, waiting = _declare(app)
        app.start(waiting, workflow_id="w1")
        runner = threading.Thread(target=app.run, args=(waiting,), kwargs={"workflow_id": "w1"})
        runner.start()
        tail = subprocess.Popen(
            [sys.executable, "-m", "stalwart", "--url", url, "tail", "w1"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert tail.stdout is not None
        assert tail.stdout.read(len("before ")) == "before "  # printed while the run waits
        app.send_event("w1", "go")
        runner.join(30)
        out, err = tail.communicate(timeout=30)
    assert tail.returncode == 0, err
    assert out == "after\n"
