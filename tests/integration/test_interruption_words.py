"""What a recovery journals for an attempt that recorded nothing: in an ``async def``
workflow, a crash and a cancellation by the workflow's own code (a timeout around the call)
look alike, and the words name both; in a sync workflow only a crash can leave it so."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.timeout(120)

SCRIPT = """
import asyncio, os, signal, sys
import stalwart

app = stalwart.Stalwart(os.environ["URL"])
MARK = os.environ["MARK"]


def crash_the_first_time() -> None:
    if not os.path.exists(MARK):
        open(MARK, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)


@app.step(retry=stalwart.Retry(max_attempts=3, initial_delay=0.0))
async def slow() -> str:
    await asyncio.sleep(30 if not os.path.exists(MARK) else 0.0)
    return "done"


@app.step()
async def crash_async() -> None:
    crash_the_first_time()


@app.workflow()
async def timed(**_: object) -> str:
    try:
        async with asyncio.timeout(0.05):
            return await slow()
    finally:
        await crash_async()


@app.step(retry=stalwart.Retry(max_attempts=3, initial_delay=0.0))
def crashing() -> str:
    crash_the_first_time()
    return "done"


@app.workflow()
def plain() -> str:
    return crashing()


if __name__ == "__main__":
    app.run(timed if sys.argv[1] == "timed" else plain, workflow_id="w")
"""


def _imported(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("flows_under_test", path)
    assert spec is not None and spec.loader is not None
    flows = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(flows)
    return flows


@pytest.mark.parametrize(
    ("workflow", "said"),
    [
        (
            "timed",
            "its process stopped, or the workflow cancelled the call (a timeout or task group "
            "around it), before the outcome was recorded",
        ),
        ("plain", "its process stopped before the outcome was recorded"),
    ],
)
def test_the_words_for_an_attempt_that_recorded_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workflow: str, said: str
) -> None:
    path = tmp_path / "flows.py"
    path.write_text(SCRIPT)
    monkeypatch.setenv("URL", f"sqlite:///{tmp_path / 'store.db'}")
    monkeypatch.setenv("MARK", str(tmp_path / "killed"))
    first = subprocess.run([sys.executable, str(path), workflow], check=False, timeout=60)
    assert first.returncode == -9  # killed by its step, mid-run
    flows = _imported(path)  # the same code, recovering the run in this process
    try:
        assert flows.app.run(getattr(flows, workflow), workflow_id="w") == "done"
        charged = [
            entry.error
            for entry in flows.app.journal("w")
            if entry.error is not None and entry.error.startswith("AttemptInterrupted")
        ]
        assert len(charged) == 1
        assert charged[0].endswith(said)
    finally:
        flows.app.close()
