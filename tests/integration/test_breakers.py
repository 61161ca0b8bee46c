"""Circuit breakers whose state lives in the store: they open after failures in a window,
hold the attempts of their steps (the run waits on a durable timer, spending no attempt), let
one probe through after the cooldown, and close on its success or open again on its failure.
The store verbs are in tests/contract; the fleet, with real worker processes, is in
tests/faults/test_fleet_breakers.py."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from click.testing import CliRunner

import stalwart
from stalwart import testing
from stalwart._cli import cli
from stalwart.testing import FakeClock

FAST = stalwart.Retry(max_attempts=20, initial_delay=1.0, backoff=1.0, jitter=False)
THREE = stalwart.Retry(max_attempts=3, initial_delay=1.0, jitter=False)


class Downstream:
    """A service that fails its first ``failing`` calls, recording when each call came."""

    def __init__(self, clock: FakeClock, failing: int) -> None:
        self.clock = clock
        self.failing = failing
        self.calls: list[float] = []

    def __call__(self, item: str) -> str:
        self.calls.append(self.clock.time())
        if len(self.calls) <= self.failing:
            raise ConnectionError("the provider is down")
        return f"done {item}"


@contextmanager
def timers_fire(app: stalwart.Stalwart, clock: FakeClock) -> Iterator[None]:
    """While the block runs, the fake clock jumps to the wake-up time of any suspended run
    (as time would pass for a run waiting on a durable timer)."""
    store = testing.store_of(app)
    done = threading.Event()

    def jump() -> None:
        while not done.wait(0.005):
            for info in app.list_workflows(status="suspended"):
                row = store.get_run(info.workflow_id)
                if row is not None and row.wake_at is not None and row.wake_at > clock.time():
                    clock.advance(row.wake_at - clock.time())

    mover = threading.Thread(target=jump, daemon=True)
    mover.start()
    try:
        yield
    finally:
        done.set()
        mover.join(5)


def _attempts(app: stalwart.Stalwart, workflow_id: str) -> list[stalwart.JournalEntry]:
    return [e for e in app.journal(workflow_id) if e.kind == "step"]


def test_it_opens_after_failures_and_waits_the_cooldown_without_spending_attempts(
    app: stalwart.Stalwart, clock: FakeClock
) -> None:
    provider = Downstream(clock, failing=4)
    breaker = stalwart.Breaker("provider", failures=3, window=60, cooldown=30)

    @app.step(retry=FAST, breaker=breaker)
    def call(item: str) -> str:
        return provider(item)

    @app.workflow
    def agent(item: str) -> str:
        return call(item)

    start = clock.time()
    with timers_fire(app, clock):
        assert app.run(agent, "a", workflow_id="a") == "done a"
    gaps = [round(t - start, 1) for t in provider.calls]
    # three failures 1 s apart open it; the probe 30 s later fails and opens it again; the
    # next probe, 30 s after that, succeeds and closes it
    assert gaps == [0.0, 1.0, 2.0, 32.0, 62.0]
    attempts = _attempts(app, "a")
    assert [e.attempt for e in attempts] == [1, 2, 3, 4, 5]  # waiting spent none
    assert [e.status for e in attempts] == ["failed"] * 4 + ["completed"]
    waits = [e for e in app.journal("a") if e.kind == "run" and e.name == "suspended"]
    assert waits and all(e.output["waiting_for"] == "breaker:provider" for e in waits)
    (state,) = app.breakers()
    assert (state.name, state.state, state.failures, state.opened_at) == (
        "provider",
        "closed",
        0,
        None,
    )


def test_a_run_waiting_on_a_probe_that_fails_tries_again_after_the_cooldown(
    app: stalwart.Stalwart, clock: FakeClock
) -> None:
    """Two calls of one run gathered: one probes, the other waits for the probe. When the
    probe fails, the breaker opens for its cooldown again, and the run goes on after it, not
    at the probe's deadline (the lease, 30 s here)."""
    provider = Downstream(clock, failing=3)
    breaker = stalwart.Breaker("provider", failures=2, window=60, cooldown=5)

    @app.step(retry=FAST, breaker=breaker)
    async def call(item: str) -> str:
        return provider(item)

    @app.workflow
    async def agent() -> list[str]:
        return list(await asyncio.gather(call("a"), call("b")))

    start = clock.time()
    with timers_fire(app, clock):
        assert sorted(app.run(agent, workflow_id="g")) == ["done a", "done b"]
    gaps = [round(t - start, 1) for t in provider.calls]
    # two failures open it; after its cooldown one call probes while the other waits, and
    # fails; after the cooldown again the probe succeeds and the other call follows
    assert gaps[:4] == [0.0, 0.0, 5.0, 10.0]


def _tripped(app: stalwart.Stalwart, clock: FakeClock) -> tuple[Downstream, Any]:
    """An agent whose one step calls a provider through a breaker that opens after three
    failures, and three runs that opened it, failing once each (``Retry.never()``)."""
    provider = Downstream(clock, failing=3)
    breaker = stalwart.Breaker("provider", failures=3, window=60, cooldown=30)

    @app.step(retry=stalwart.Retry.never(), breaker=breaker)
    def call(item: str) -> str:
        return provider(item)

    @app.workflow
    def agent(item: str) -> str:
        return call(item)

    for i in range(3):
        with pytest.raises(stalwart.WorkflowFailed, match="the provider is down"):
            app.run(agent, "a", workflow_id=f"a{i}")
    return provider, agent


def test_an_open_breaker_holds_every_run_whose_step_uses_it(
    app: stalwart.Stalwart, clock: FakeClock
) -> None:
    provider, agent = _tripped(app, clock)
    (state,) = app.breakers()
    assert (state.state, state.failures) == ("open", 3)
    assert state.opened_at is not None and state.retry_at is not None
    assert (state.retry_at - state.opened_at).total_seconds() == pytest.approx(30)

    start_b = clock.time()
    with timers_fire(app, clock):
        assert app.run(agent, "b", workflow_id="b") == "done b"  # waits, then probes: closes it
    assert len(provider.calls) == 4 and provider.calls[3] == pytest.approx(start_b + 30)
    assert [e.attempt for e in _attempts(app, "b")] == [1]  # the wait spent no attempt
    waits = [e for e in app.journal("b") if e.kind == "run" and e.name == "suspended"]
    assert [e.output["waiting_for"] for e in waits] == ["breaker:provider"]
    assert app.breakers()[0].state == "closed"


def test_failures_outside_the_window_do_not_count(app: stalwart.Stalwart, clock: FakeClock) -> None:
    breaker = stalwart.Breaker("flaky", failures=3, window=10, cooldown=30)
    provider = Downstream(clock, failing=2)
    slow = stalwart.Retry(max_attempts=5, initial_delay=20.0, backoff=1.0, jitter=False)

    @app.step(retry=slow, breaker=breaker)
    def call(item: str) -> str:
        return provider(item)

    @app.workflow
    def agent(item: str) -> str:
        return call(item)

    with timers_fire(app, clock):
        assert app.run(agent, "x", workflow_id="x") == "done x"
    assert len(provider.calls) == 3  # failures 20 s apart never make 3 within 10 s
    assert app.breakers()[0].state == "closed"


def test_the_probe_closing_wakes_the_runs_waiting_on_it(
    app: stalwart.Stalwart, clock: FakeClock
) -> None:
    _, agent = _tripped(app, clock)
    store = testing.store_of(app)
    now = clock.time()
    assert store.take_probe("provider", probe="elsewhere/1/1", now=now + 30, until=now + 90)
    clock.advance(31)
    worker = testing.worker(app, concurrency=1)
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    try:
        handle = app.start(agent, "b", workflow_id="b")
        deadline = time.monotonic() + 10
        while handle.status() != "suspended":  # half-open: another attempt is probing
            assert time.monotonic() < deadline, handle.status()
            time.sleep(0.01)
        row = store.get_run("b")
        assert row is not None and row.wake_at == pytest.approx(now + 90)
        assert row.waiting_for == "breaker:provider"
        assert store.breaker_succeeded("provider", probe="elsewhere/1/1", now=clock.time())
        assert handle.result(timeout=10) == "done b"  # woken at once, not at its timer
        assert clock.time() < now + 90
    finally:
        worker.stop()
        thread.join(10)


def test_a_probe_lost_long_ago_failed_at_its_deadline_and_the_next_attempt_probes_at_once(
    app: stalwart.Stalwart, clock: FakeClock
) -> None:
    # A probe whose worker died (tests/faults/test_breaker_probe_crashes.py kills it for
    # real) counts as failed at its deadline: the cooldown runs from there, not from when
    # an attempt next looks at the breaker.
    provider, agent = _tripped(app, clock)
    store = testing.store_of(app)
    now = clock.time()
    assert store.take_probe("provider", probe="lost/1/1", now=now + 30, until=now + 90)
    clock.advance(90 + 30 + 5)  # its deadline, then a whole cooldown, passed unseen
    start_b = clock.time()
    with timers_fire(app, clock):
        assert app.run(agent, "b", workflow_id="b") == "done b"
    assert provider.calls[3:] == [start_b]  # it probed at once, and closed the breaker
    waits = [e for e in app.journal("b") if e.kind == "run" and e.name == "suspended"]
    assert waits == []
    (state,) = app.breakers()
    assert (state.state, state.failures) == ("closed", 0)


def test_a_long_outage_does_not_dead_letter_the_probing_run(
    app: stalwart.Stalwart, clock: FakeClock
) -> None:
    provider = Downstream(clock, failing=6)
    breaker = stalwart.Breaker("provider", failures=2, window=60, cooldown=30)

    @app.step(
        retry=stalwart.Retry(max_attempts=2, initial_delay=1.0, jitter=False), breaker=breaker
    )
    def call(item: str) -> str:
        return provider(item)

    @app.workflow
    def agent(item: str) -> str:
        return call(item)

    with timers_fire(app, clock):
        assert app.run(agent, "a", workflow_id="a") == "done a"
    # Two attempts (its Retry's all) open the breaker; each failed probe after that opens it
    # again without ending the run, which goes on when the provider is back.
    assert [e.attempt for e in _attempts(app, "a")] == [1, 2, 3, 4, 5, 6, 7]
    start = provider.calls[0]
    assert [round(t - start) for t in provider.calls] == [0, 1, 31, 61, 91, 121, 151]


def test_a_run_step_takes_a_breaker_too(app: stalwart.Stalwart, clock: FakeClock) -> None:
    provider = Downstream(clock, failing=2)
    breaker = stalwart.Breaker("tools", failures=2, window=60, cooldown=5)

    @app.workflow
    def agent(item: str) -> str:
        result: str = stalwart.run_step("tool", provider, args=(item,), retry=FAST, breaker=breaker)
        return result

    start = clock.time()
    with timers_fire(app, clock):
        assert app.run(agent, "t", workflow_id="t") == "done t"
    assert [round(t - start) for t in provider.calls] == [0, 1, 6]


def test_a_name_has_one_breaker_and_bad_settings_are_refused(app: stalwart.Stalwart) -> None:
    @app.step(breaker=stalwart.Breaker("llm", failures=3))
    def one() -> None: ...

    with pytest.raises(stalwart.RegistrationError, match="breaker 'llm' is given as"):

        @app.step(breaker=stalwart.Breaker("llm", failures=4))
        def two() -> None: ...

    @app.step(breaker=stalwart.Breaker("llm", failures=3))  # the same settings: shared
    def three() -> None: ...

    for bad, message in [
        (lambda: stalwart.Breaker(""), "non-empty name"),
        (lambda: stalwart.Breaker("a:b"), "without ':'"),
        (lambda: stalwart.Breaker("x", failures=0), "failures=0"),
        (lambda: stalwart.Breaker("x", window=-1), "window=-1"),
        (lambda: stalwart.Breaker("x", cooldown=float("inf")), "cooldown=inf"),
    ]:
        with pytest.raises(stalwart.UsageError, match=message):
            bad()
    with pytest.raises(TypeError, match="pass a stalwart.Breaker"):
        app.step(breaker="llm")  # type: ignore[arg-type]


def test_the_cli_lists_breakers(shared_url: str) -> None:
    runner = CliRunner()
    stalwart.Stalwart(shared_url).close()  # a read command never creates a store
    empty = runner.invoke(cli, ["--url", shared_url, "breakers"])
    assert empty.exit_code == 0 and "no breaker" in empty.output
    with stalwart.Stalwart(shared_url) as app:
        store = testing.store_of(app)
        store.breaker_failed("llm", now=time.time(), failures=1, window=60, cooldown=30, probe=None)
    table = runner.invoke(cli, ["--url", shared_url, "breakers"])
    assert table.exit_code == 0, table.output
    assert "llm" in table.output and "open" in table.output
    lines = runner.invoke(cli, ["--url", shared_url, "breakers", "--json"]).stdout.splitlines()
    parsed: list[dict[str, Any]] = [json.loads(line) for line in lines]
    assert [(b["name"], b["state"], b["failures"]) for b in parsed] == [("llm", "open", 1)]
