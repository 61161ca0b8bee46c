"""Compensation (saga) on every backend."""

from __future__ import annotations

import contextlib
import datetime as _dt
import threading
import time
from typing import Any

import pytest

import stalwart


def saga(app: stalwart.Stalwart, log: list[str], fail: dict[str, bool]) -> Any:
    @app.step(name="reserve", compensate=lambda result, item: log.append(f"release {result}"))
    def reserve(item: str) -> str:
        log.append(f"reserve {item}")
        return f"r-{item}"

    def refund(result: str, amount: int) -> None:
        if fail.get("refund"):
            raise ConnectionError("refund API down")
        log.append(f"refund {result}")

    @app.step(
        name="charge", compensate=refund, retry=stalwart.Retry(max_attempts=2, initial_delay=0)
    )
    def charge(amount: int) -> str:
        log.append(f"charge {amount}")
        return "ch-1"

    @app.step(name="note")
    def note() -> None:
        log.append("note")

    @app.step(name="ship", retry=stalwart.Retry.never())
    def ship() -> str:
        if fail.get("ship"):
            raise RuntimeError("no courier")
        log.append("ship")
        return "shipped"

    @app.workflow(name="order")
    def order() -> str:
        reserve("book")
        charge(30)
        note()
        if fail.get("wait"):
            stalwart.wait_for_event("never")
        return ship()

    return order


def test_a_failure_compensates_completed_steps_newest_first(app: stalwart.Stalwart) -> None:
    log: list[str] = []
    order = saga(app, log, {"ship": True})
    with pytest.raises(stalwart.WorkflowFailed, match="no courier"):
        app.run(order, workflow_id="o1")
    assert log == ["reserve book", "charge 30", "note", "refund ch-1", "release r-book"]
    kinds = [
        (e.kind, e.name, e.status)
        for e in app.journal("o1")
        if e.kind in ("compensation",) or e.status == "compensated"
    ]
    assert kinds == [
        ("compensation", "charge", "completed"),
        ("step", "charge", "compensated"),
        ("compensation", "reserve", "completed"),
        ("step", "reserve", "compensated"),
    ]
    assert app.handle("o1").status() == "failed"


def test_a_failing_compensation_goes_to_an_operator_and_retry_continues(
    app: stalwart.Stalwart,
) -> None:
    log: list[str] = []
    fail = {"ship": True, "refund": True}
    order = saga(app, log, fail)
    with pytest.raises(stalwart.NeedsAttention, match="compensation of step 'charge'"):
        app.run(order, workflow_id="o2")
    assert "release r-book" not in log  # newest first: the rollback stopped at charge
    fail["refund"] = False
    app.retry("o2")
    with pytest.raises(stalwart.WorkflowFailed):
        app.run(order, workflow_id="o2")
    assert log[-2:] == ["refund ch-1", "release r-book"]
    assert log.count("reserve book") == 1


def test_cancel_compensates(app: stalwart.Stalwart) -> None:
    log: list[str] = []
    order = saga(app, log, {"wait": True})

    def cancel_when_waiting() -> None:
        while app.handle("o3").status() != "suspended":
            time.sleep(0.01)
        app.cancel("o3", by="support")

    app.start(order, workflow_id="o3")
    threading.Thread(target=cancel_when_waiting, daemon=True).start()
    with pytest.raises(stalwart.WorkflowCancelled):
        app.run(order, workflow_id="o3")
    assert log[-2:] == ["refund ch-1", "release r-book"]
    assert app.handle("o3").status() == "cancelled"


def test_a_compensated_step_runs_again_after_retry(app: stalwart.Stalwart) -> None:
    log: list[str] = []
    fail = {"ship": True}
    order = saga(app, log, fail)
    with pytest.raises(stalwart.WorkflowFailed):
        app.run(order, workflow_id="o4")
    fail["ship"] = False
    app.retry("o4")
    assert app.run(order, workflow_id="o4") == "shipped"
    assert log.count("reserve book") == 2 and log.count("charge 30") == 2
    assert log.count("note") == 1  # not compensable, not undone: replayed


def test_retry_after_an_exhausted_compensation_continues_the_rollback(
    app: stalwart.Stalwart,
) -> None:
    log: list[str] = []
    fail = {"cancel_flight": True}
    keys: list[str] = []

    def cancel_flight(result: str) -> None:
        keys.append(stalwart.idempotency_key())
        if fail["cancel_flight"]:
            raise ConnectionError("airline API down")
        log.append("cancel flight")

    @app.step(name="flight", compensate=cancel_flight, retry=stalwart.Retry.never())
    def flight() -> str:
        log.append("book flight")
        return "f"

    @app.step(name="hotel", compensate=lambda result: log.append("cancel hotel"))
    def hotel() -> str:
        log.append("book hotel")
        return "h"

    @app.step(name="car", retry=stalwart.Retry.never())
    def car() -> str:
        raise RuntimeError("no cars")

    @app.workflow(name="trip")
    def trip() -> None:
        flight()
        hotel()
        car()

    with pytest.raises(stalwart.NeedsAttention, match="compensation of step 'flight'"):
        app.run(trip, workflow_id="t1")
    fail["cancel_flight"] = False
    app.retry("t1")
    with pytest.raises(stalwart.WorkflowFailed, match="no cars"):
        app.run(trip, workflow_id="t1")
    assert log == ["book flight", "book hotel", "cancel hotel", "cancel flight"]
    assert keys[0].endswith("/0/undo")  # the undo is a different request from the booking


def test_verify_that_raises_leaves_the_step_to_an_operator(app: stalwart.Stalwart) -> None:
    crash = {"on": True}

    def broken_verify(order: str) -> str | None:
        raise ConnectionError("status API down")

    @app.step(name="pay", irreversible=True, verify=broken_verify)
    def pay(order: str) -> str:
        if crash["on"]:
            raise KeyboardInterrupt
        return "paid"

    @app.workflow(name="w")
    def w() -> str:
        try:
            return pay("o-1")
        except Exception as exc:  # user code cannot swallow it
            return f"swallowed {exc}"

    with pytest.raises(KeyboardInterrupt):
        app.run(w, workflow_id="v1")
    with pytest.raises(stalwart.NeedsAttention, match="verify raised ConnectionError"):
        app.run(w, workflow_id="v1")
    app.resolve("v1", 1, result="paid-by-hand")
    assert app.run(w, workflow_id="v1") == "paid-by-hand"


def test_a_sync_irreversible_step_cannot_have_a_timeout(app: stalwart.Stalwart) -> None:
    with pytest.raises(ValueError, match="async def"):

        @app.step(irreversible=True, timeout=1)
        def click() -> None: ...


def test_a_compensation_waits_what_retry_after_asks(app: stalwart.Stalwart) -> None:
    clock = stalwart.testing.runtime_of(app).clock
    slept_before = len(getattr(clock, "slept", []))
    tries: list[int] = []

    def refund(charge: str) -> None:
        tries.append(1)
        if len(tries) == 1:
            raise stalwart.RetryAfter(3, "the refund API is busy")

    @app.step(compensate=refund, retry=stalwart.Retry(initial_delay=0.01))
    def charge() -> str:
        return "ch-1"

    @app.workflow
    def order() -> None:
        charge()
        raise RuntimeError("out of stock")

    with pytest.raises(stalwart.WorkflowFailed):
        app.run(order, workflow_id="refund-later")
    assert len(tries) == 2
    assert getattr(clock, "slept", [])[slept_before:] == [3.0]


# -- a compensation's attempts are a step's attempts ----------------------------------------


def _failing_order(app: stalwart.Stalwart, step: Any) -> Any:
    @app.workflow(name="failing_order")
    def failing_order() -> None:
        step()
        raise RuntimeError("out of stock")

    return failing_order


# Ten minutes before a compensation's second attempt: longer than any backoff held in place.
SLOW_RETRY = stalwart.Retry(initial_delay=600, jitter=False)


def _charge_with_a_flaky_refund(
    app: stalwart.Stalwart, tries: list[int], retry: stalwart.Retry
) -> Any:
    """A step ``charge`` whose compensation fails its first attempt (the refund API is down),
    noting each attempt's number in ``tries``."""

    def refund(charge: str) -> None:
        tries.append(stalwart.attempt())
        if len(tries) == 1:
            raise ConnectionError("the refund API is down")

    @app.step(compensate=refund, retry=retry)
    def charge() -> str:
        return "ch-1"

    return charge


def test_a_compensations_long_backoff_is_a_durable_timer(
    app: stalwart.Stalwart, clock: stalwart.testing.FakeClock
) -> None:
    tries: list[int] = []
    charge = _charge_with_a_flaky_refund(
        app, tries, stalwart.Retry(initial_delay=600, jitter=False)
    )

    order = _failing_order(app, charge)
    done = threading.Event()

    def advance() -> None:  # ten minutes pass while the run is suspended, holding nothing
        while not done.wait(0.01):
            if app.handle("slow-refund").status() == "suspended":
                clock.advance(601)
                return

    app.start(order, workflow_id="slow-refund")
    mover = threading.Thread(target=advance, daemon=True)
    mover.start()
    try:
        with pytest.raises(stalwart.WorkflowFailed, match="out of stock"):
            app.run(order, workflow_id="slow-refund")
    finally:
        done.set()
    assert tries == [1, 2]
    assert clock.slept == []  # no thread slept through the backoff
    journal = app.journal("slow-refund")
    assert "suspended" in [e.name for e in journal if e.kind == "run"]
    undo = [(e.status, e.attempt) for e in journal if e.kind == "compensation"]
    assert undo == [("failed", 1), ("completed", 2)]


def test_a_compensation_gets_its_steps_timeout(app: stalwart.Stalwart) -> None:
    release = threading.Event()
    tries: list[int] = []

    def refund(charge: str) -> None:
        tries.append(stalwart.attempt())
        if len(tries) == 1:
            release.wait(10)  # hangs past the timeout: abandoned

    @app.step(compensate=refund, timeout=0.2, retry=stalwart.Retry(initial_delay=0))
    def charge() -> str:
        return "ch-1"

    try:
        with pytest.raises(stalwart.WorkflowFailed):
            app.run(_failing_order(app, charge), workflow_id="hung-refund")
    finally:
        release.set()
    undo = [e for e in app.journal("hung-refund") if e.kind == "compensation"]
    assert [(e.status, e.attempt) for e in undo] == [("failed", 1), ("completed", 2)]
    assert undo[0].error is not None and undo[0].error.startswith("StepTimeout: the compensation")


def test_a_compensations_failures_count_in_its_steps_breaker(app: stalwart.Stalwart) -> None:
    breaker = stalwart.Breaker("refunds", failures=1, window=60, cooldown=1)

    def refund(charge: str) -> None:
        raise ConnectionError("the refund API is down")

    @app.step(compensate=refund, breaker=breaker, retry=stalwart.Retry.never())
    def charge() -> str:
        return "ch-1"

    with pytest.raises(stalwart.NeedsAttention, match="compensation of step"):
        app.run(_failing_order(app, charge), workflow_id="broken-refund")
    (state,) = app.breakers()
    assert (state.name, state.state, state.failures) == ("refunds", "open", 1)


def test_a_compensations_usage_is_journaled_and_counted_like_a_steps(
    app: stalwart.Stalwart,
) -> None:
    def refund(charge: str) -> None:
        stalwart.record_usage(input_tokens=30, output_tokens=5, model="m")
        if stalwart.attempt() == 1:
            raise ConnectionError("the refund API is down")

    @app.step(compensate=refund, retry=stalwart.Retry(initial_delay=0))
    def charge() -> str:
        return "ch-1"

    with pytest.raises(stalwart.WorkflowFailed):
        app.run(_failing_order(app, charge), workflow_id="metered-refund")
    undo = [e for e in app.journal("metered-refund") if e.kind == "compensation"]
    assert [e.usage.input_tokens if e.usage else None for e in undo] == [30, 30]
    assert app.usage("metered-refund").input_tokens == 60


def test_a_cancelled_runs_compensation_waits_its_backoff_in_place(
    app: stalwart.Stalwart, clock: stalwart.testing.FakeClock
) -> None:
    tries: list[int] = []
    charge = _charge_with_a_flaky_refund(
        app, tries, stalwart.Retry(initial_delay=600, jitter=False)
    )

    @app.workflow(name="waiting_order")
    def waiting_order() -> None:
        charge()
        stalwart.wait_for_event("shipped")

    app.start(waiting_order, workflow_id="cancelled-refund")
    runner = threading.Thread(target=lambda: _quietly(app.run, waiting_order, "cancelled-refund"))
    runner.start()
    deadline = time.monotonic() + 30
    while app.handle("cancelled-refund").status() != "suspended":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    app.cancel("cancelled-refund")  # its rollback cannot suspend: a cancel is requested
    runner.join(30)
    with pytest.raises(stalwart.WorkflowCancelled):
        app.run(waiting_order, workflow_id="cancelled-refund")
    assert tries == [1, 2]
    assert max(clock.slept) > 5  # waited in place, not on a durable timer it could not set
    assert app.handle("cancelled-refund").status() == "cancelled"


def _quietly(run: Any, wf: Any, workflow_id: str) -> None:
    with contextlib.suppress(stalwart.StalwartError):
        run(wf, workflow_id=workflow_id)


@pytest.mark.parametrize("ends", ["fails", "times_out"])
def test_a_compensations_backoff_past_the_runs_deadline_waits_its_retry_time(
    app: stalwart.Stalwart, clock: stalwart.testing.FakeClock, ends: str
) -> None:
    """The deadline already caused (or cannot stop) the rollback: its backoff is not cut to
    the deadline, so the run does not wake, find the backoff still ahead and suspend again."""
    tries: list[int] = []
    retry = stalwart.Retry(initial_delay=600, max_delay=600, jitter=False)
    charge = _charge_with_a_flaky_refund(app, tries, retry)

    @app.workflow(name="hurried_order", timeout=30)
    def hurried_order() -> None:
        charge()
        if ends == "times_out":
            stalwart.wait_for_event("shipped")  # its deadline passes while it waits
        raise RuntimeError("out of stock")

    def suspensions() -> list[stalwart.JournalEntry]:
        return [e for e in app.journal("hurried") if e.kind == "run" and e.name == "suspended"]

    def suspended(times: int) -> None:
        give_up = time.monotonic() + 30
        while len(suspensions()) < times or app.handle("hurried").status() != "suspended":
            assert time.monotonic() < give_up
            time.sleep(0.01)

    app.start(hurried_order, workflow_id="hurried")
    runner = threading.Thread(target=lambda: _quietly(app.run, hurried_order, "hurried"))
    runner.start()
    try:
        waits = 2 if ends == "times_out" else 1
        if ends == "times_out":
            suspended(1)
            clock.advance(31)  # the deadline passes: the run wakes and rolls back
        suspended(waits)
        (*_, backoff) = suspensions()
        assert backoff.started_at is not None
        assert backoff.output["until"] > backoff.started_at + _dt.timedelta(seconds=599)
        clock.advance(601)
        runner.join(30)
    finally:
        clock.advance(10_000)
        runner.join(30)
    assert not runner.is_alive()
    assert tries == [1, 2]
    assert len(suspensions()) == waits
    status = "cancelled" if ends == "times_out" else "failed"
    assert app.handle("hurried").status() == status
