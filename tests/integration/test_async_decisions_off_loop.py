"""An async workflow's step whose decisions reach the store or user code in place (an
irreversible step's ``scheduled`` mark and its ``verify``, a breaker's admission) makes them in
a thread of the engine's: the run's loop, which every async run of the app shares, goes on
meanwhile. Each test holds that decision until a sibling task of the run has finished a step
of its own, which it can only do while the loop is free (the hold gives up after ``HOLD_S``,
and the test then fails)."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import stalwart
from stalwart._engine.invocation import Invocation

pytestmark = pytest.mark.timeout(60)

HOLD_S = 10.0


@pytest.fixture
def app(shared_url: str) -> Iterator[stalwart.Stalwart]:
    with stalwart.Stalwart(shared_url) as instance:
        yield instance


class Hold:
    """A decision that waits, in whatever thread makes it, for the sibling's step."""

    def __init__(self) -> None:
        self.began = threading.Event()
        self.progressed = threading.Event()
        self.saw: list[bool] = []

    def wait(self) -> None:
        self.began.set()
        self.saw.append(self.progressed.wait(HOLD_S))

    async def sibling(self, step: Callable[[], Any]) -> None:
        """(A task of the run) Once the decision is held, finish a step, and say so."""
        while not self.began.is_set():
            await asyncio.sleep(0.005)
        await step()
        self.progressed.set()


def _declare_sibling_step(app: stalwart.Stalwart) -> Callable[[], Any]:
    @app.step()
    async def other() -> int:
        return 1

    return other


def test_an_irreversible_steps_verify_runs_off_the_loop(app: stalwart.Stalwart) -> None:
    hold = Hold()
    other = _declare_sibling_step(app)
    calls: list[int] = []

    def check(order: str) -> str | None:
        hold.wait()
        return None  # no effect: the next attempt runs

    @app.step(
        irreversible=True,
        verify=check,
        retry=stalwart.Retry(max_attempts=2, initial_delay=0.0),
    )
    async def pay(order: str) -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("the first attempt failed before it reached the provider")
        return f"paid {order}"

    @app.workflow()
    async def checkout() -> str:
        paid, _ = await asyncio.gather(pay("o1"), hold.sibling(other))
        return paid

    assert app.run(checkout, workflow_id="c1") == "paid o1"
    assert hold.saw == [True], "verify held the run's loop"
    assert len(calls) == 2


def test_an_irreversible_steps_mark_is_written_off_the_loop(
    app: stalwart.Stalwart, monkeypatch: pytest.MonkeyPatch
) -> None:
    hold = Hold()
    other = _declare_sibling_step(app)
    real_append = Invocation.append

    def held_append(inv: Invocation, entry: Any) -> None:
        if entry.status == "scheduled":  # the mark before the irreversible attempt
            hold.wait()
        real_append(inv, entry)

    monkeypatch.setattr(Invocation, "append", held_append)

    @app.step(irreversible=True)
    async def send(to: str) -> str:
        return f"sent to {to}"

    @app.workflow()
    async def notify() -> str:
        sent, _ = await asyncio.gather(send("ada"), hold.sibling(other))
        return sent

    assert app.run(notify, workflow_id="n1") == "sent to ada"
    assert hold.saw == [True], "the mark's write held the run's loop"
    statuses = [e.status for e in app.journal("n1") if e.kind == "step" and "send" in e.name]
    assert statuses == ["scheduled", "completed"]


def test_a_breakers_admission_is_decided_off_the_loop(
    app: stalwart.Stalwart, monkeypatch: pytest.MonkeyPatch
) -> None:
    hold = Hold()
    other = _declare_sibling_step(app)
    store = app._runtime.store
    real_breaker = store.breaker
    held: list[bool] = []

    def held_breaker(name: str, **kwargs: Any) -> Any:
        if name == "llm" and not held:  # the admission of the step's first attempt
            held.append(True)
            hold.wait()
        return real_breaker(name, **kwargs)

    monkeypatch.setattr(store, "breaker", held_breaker)

    @app.step(breaker=stalwart.Breaker("llm"))
    async def ask(question: str) -> str:
        return f"answer to {question}"

    @app.workflow()
    async def chat() -> str:
        answer, _ = await asyncio.gather(ask("q"), hold.sibling(other))
        return answer

    assert app.run(chat, workflow_id="b1") == "answer to q"
    assert hold.saw == [True], "the breaker's admission held the run's loop"


RECOVERED = """
import asyncio, os, signal, sys, threading
import stalwart

app = stalwart.Stalwart(os.environ["URL"])
began, progressed, saw = threading.Event(), threading.Event(), []


def check(order: str) -> str | None:
    began.set()
    saw.append(progressed.wait(10.0))
    return f"paid {order}"  # the interrupted attempt took effect


@app.step(irreversible=True, verify=check)
async def pay(order: str) -> str:
    os.kill(os.getpid(), signal.SIGKILL)  # dies with its mark journaled, in doubt
    return f"paid {order}"


@app.step()
async def other() -> int:
    return 1


async def sibling() -> None:
    while not began.is_set():
        await asyncio.sleep(0.005)
    await other()
    progressed.set()


@app.workflow()
async def checkout() -> str:
    paid, _ = await asyncio.gather(pay("o1"), sibling())
    return paid


if __name__ == "__main__":
    app.run(checkout, workflow_id="c1")
"""


def test_a_recovery_asks_verify_about_an_attempt_in_doubt_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "recovered.py"
    path.write_text(RECOVERED)
    monkeypatch.setenv("URL", f"sqlite:///{tmp_path / 'store.db'}")
    first = subprocess.run([sys.executable, str(path)], check=False, timeout=60)
    assert first.returncode == -9  # killed mid-attempt, its mark journaled
    spec = importlib.util.spec_from_file_location("recovered_under_test", path)
    assert spec is not None and spec.loader is not None
    flows = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(flows)
    try:
        assert flows.app.run(flows.checkout, workflow_id="c1") == "paid o1"
        assert flows.saw == [True], "verify held the run's loop"
        pays = [e for e in flows.app.journal("c1") if e.kind == "step" and "pay" in e.name]
        assert [(e.status, e.by) for e in pays] == [
            ("scheduled", None),
            ("in_doubt", None),
            ("completed", "verify"),
        ]
    finally:
        flows.app.close()
