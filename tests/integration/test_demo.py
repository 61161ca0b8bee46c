"""``stalwart demo`` (``make demo``): it keeps its run for ``stalwart show``, and runs again.

Each demo run takes about a second: a worker process, a SIGKILL and a second worker.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import stalwart

DEMO = [sys.executable, "-m", "stalwart", "demo"]


def _demo(cwd: Path) -> str:
    done = subprocess.run(DEMO, check=False, cwd=cwd, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stdout + done.stderr
    # the approve subprocess's "store: ..." line stays in it: the demo prints its story only
    assert not [line for line in (done.stdout + done.stderr).splitlines() if "store: " in line]
    assert done.stderr == ""
    return done.stdout


def _commands(output: str) -> list[str]:
    """The commands the demo tells the user to run, one an indented line after 'Look at it'."""
    lines = output.split("Look at it with:\n", 1)[1].splitlines()
    return [line.strip() for line in lines if line.startswith("    ")]


def test_the_demo_keeps_its_run_and_runs_twice_in_a_row(tmp_path: Path) -> None:
    first = _demo(tmp_path)
    second = _demo(tmp_path)  # the run of the first demo exists: a clean start, same story
    for output in (first, second):
        assert "refunds made by the payment service: 1" in output
        assert "The run is kept in .stalwart/demo.db" in output
        assert "The demo's code is in " in output and "_demo.py" in output

    with stalwart.Stalwart(f"sqlite:///{tmp_path / '.stalwart' / 'demo.db'}") as app:
        [run] = app.list_workflows()  # the second demo started from an empty store
        assert (run.workflow_id, run.status) == ("refund-T-1042", "completed")

    commands = _commands(second)
    assert [c.split()[-1] for c in commands] == ["ls", "refund-T-1042"]
    for command in commands:
        shown = subprocess.run(
            shlex.split(command),
            check=False,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert shown.returncode == 0, shown.stderr
        assert "refund-T-1042" in shown.stdout
        assert "completed" in shown.stdout


def _timeline(text: str) -> list[list[str]]:
    """The timeline rows under the ``SEQ  KIND`` header, their cells split on wide gaps, the
    ``FINISHED`` time dropped (the tutorial cuts it), a cut cell's ``…`` dropped."""
    lines = text.split("the run's timeline (completed):\n", 1)[1].split("\n\n", 1)[0]
    rows = [re.split(r"\s{2,}", line.strip()) for line in lines.splitlines()]
    stamp = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+$|^-$")
    return [[cell.rstrip("…") for cell in row if not stamp.match(cell)] for row in rows]


def test_the_tutorial_shows_what_the_demo_prints(tmp_path: Path) -> None:
    printed = _timeline(_demo(tmp_path))
    tutorial = (Path(__file__).parents[2] / "docs" / "tutorial.md").read_text(encoding="utf-8")
    sample = _timeline(tutorial.split("## 3. Crash it", 1)[1])
    assert sample[0] == [c for c in printed[0] if c != "FINISHED"]
    ids = re.compile(r"re_\d+|vm-\d+-[0-9a-f]+|^\d+\.\d+s$")  # what differs by run
    # how long the interrupted attempt had run is shown only when its start reached the store
    # before the SIGKILL, which depends on the machine's load
    ran = re.compile(r" after ~\d+\.\d+s")
    normal = [[ids.sub("ID", ran.sub("", cell)) for cell in row] for row in printed[1:]]
    for row in sample[1:]:
        *cells, detail = [ids.sub("ID", cell) for cell in row]
        assert (
            any(
                printed_row[: len(cells)] == cells and printed_row[len(cells)].startswith(detail)
                for printed_row in normal
                if len(printed_row) > len(cells)
            )
            or [*cells, detail] in normal
        ), row
