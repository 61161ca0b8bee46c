"""The child program of the crash tests: it runs one scenario's workflow against a SQLite store.

    python crash_agent.py SCENARIO URL WORKDIR WORKFLOW_ID [--hang STEP ...] [options]

Every step appends one JSON line to ``WORKDIR/executions.log`` (and fsyncs it) when it actually
executes, with its attempt number and idempotency key. A step named by ``--hang`` then creates
the marker file ``WORKDIR/running-<WORKFLOW_ID>-<STEP>`` and sleeps until the test SIGKILLs the
process. Some scenarios kill their own process from inside a step with a real SIGKILL.

The last stdout line is the outcome as JSON: ``{"status": "completed", "result": ...}`` (exit 0),
``{"status": "failed", ...}`` for :class:`stalwart.WorkflowFailed` (exit 3) or
``{"status": "needs_attention", "reason": ...}`` for :class:`stalwart.NeedsAttention` (exit 4).

The ``pay_*`` and ``trip`` scenarios talk to ``worker_agent.Downstream`` in
``WORKDIR/downstream.db``, a fake payment service that logs every call it receives.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import stalwart

HANG_SECONDS = 120.0  # the test kills the process long before this
FAILED_EXIT = 3
NEEDS_ATTENTION_EXIT = 4


class Recorder:
    """Counts real executions in the side file and hangs the steps the test wants to kill."""

    def __init__(self, workdir: Path, hang: list[str]) -> None:
        self.workdir = workdir
        self.log = workdir / "executions.log"
        self.hang = set(hang)

    def executed(self, step: str, **details: Any) -> None:
        """Append (and fsync) one line: this step really ran, with its attempt, key, the wall
        time and any ``details``."""
        line = json.dumps(
            {
                "wid": stalwart.workflow_id(),
                "step": step,
                "attempt": stalwart.attempt(),
                "key": stalwart.idempotency_key(),
                "pid": os.getpid(),
                "at": time.time(),
                **details,
            }
        )
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def _should_hang(self, step: str) -> bool:
        if step not in self.hang:
            return False
        (self.workdir / f"running-{stalwart.workflow_id()}-{step}").touch()
        return True

    def hang_sync(self, step: str) -> None:
        """Signal that ``step`` is running, then block until the test kills the process."""
        if self._should_hang(step):
            time.sleep(HANG_SECONDS)

    async def hang_async(self, step: str) -> None:
        """The async twin of :meth:`hang_sync`."""
        if self._should_hang(step):
            await asyncio.sleep(HANG_SECONDS)


def kill_myself() -> None:
    """A real crash: SIGKILL this very process (no exception, no cleanup, no finally)."""
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(HANG_SECONDS)  # never reached: SIGKILL cannot be caught


Scenario = Callable[[stalwart.Stalwart, Recorder, argparse.Namespace], tuple[Any, tuple[Any, ...]]]


def sync_scenario(
    app: stalwart.Stalwart, rec: Recorder, opts: argparse.Namespace
) -> tuple[Any, tuple[Any, ...]]:
    """Six sync steps in a chain: s1 ... s6, each ``v * 3 + i``."""

    def make(i: int) -> Any:
        name = f"s{i}"

        @app.step(name=name)
        def step(v: int) -> int:
            rec.executed(name)
            rec.hang_sync(name)
            return v * 3 + i

        return step

    steps = [make(i) for i in range(1, 7)]

    @app.workflow(name="sync_agent")
    def sync_agent(seed: int) -> dict[str, Any]:
        value, trail = seed, []
        for step in steps:
            value = step(value)
            trail.append(value)
        return {"value": value, "trail": trail}

    return sync_agent, (opts.seed,)


def async_scenario(
    app: stalwart.Stalwart, rec: Recorder, opts: argparse.Namespace
) -> tuple[Any, tuple[Any, ...]]:
    """An async workflow: prep, then left and right concurrently, then combine (sync), finish."""

    @app.step(name="prep")
    async def prep(seed: int) -> int:
        rec.executed("prep")
        await rec.hang_async("prep")
        return seed + 1

    @app.step(name="left")
    async def left(x: int) -> str:
        rec.executed("left")
        await rec.hang_async("left")
        await asyncio.sleep(0.01)
        return f"L{x * 2}"

    @app.step(name="right")
    async def right(x: int) -> str:
        rec.executed("right")
        await rec.hang_async("right")
        await asyncio.sleep(0.01)
        return f"R{x * 3}"

    @app.step(name="combine")
    def combine(a: str, b: str) -> str:  # a sync step inside an async workflow runs inline
        rec.executed("combine")
        return f"{a}+{b}"

    @app.step(name="finish")
    async def finish(combined: str, x: int) -> dict[str, Any]:
        rec.executed("finish")
        await rec.hang_async("finish")
        return {"combined": combined, "x": x}

    @app.workflow(name="async_agent")
    async def async_agent(seed: int) -> dict[str, Any]:
        x = await prep(seed)
        a, b = await asyncio.gather(left(x), right(x))
        return await finish(combine(a, b), x)

    return async_agent, (opts.seed,)


def doomed_scenario(
    app: stalwart.Stalwart, rec: Recorder, opts: argparse.Namespace
) -> tuple[Any, tuple[Any, ...]]:
    """``doomed`` (two attempts allowed) SIGKILLs its own process on every attempt."""

    @app.step(name="before")
    def before(x: int) -> int:
        rec.executed("before")
        return x + 1

    @app.step(name="doomed", retry=stalwart.Retry(max_attempts=2, initial_delay=0))
    def doomed(x: int) -> int:
        rec.executed("doomed")
        kill_myself()
        return x

    @app.step(name="after")
    def after(x: int) -> int:
        rec.executed("after")
        return x

    @app.workflow(name="doomed_agent")
    def doomed_agent(seed: int) -> int:
        return after(doomed(before(seed)))  # StepFailed is not caught: the run fails

    return doomed_agent, (opts.seed,)


def backoff_scenario(
    app: stalwart.Stalwart, rec: Recorder, opts: argparse.Namespace
) -> tuple[Any, tuple[Any, ...]]:
    """``flaky`` (``--attempts`` per budget) fails its first ``--fail-times`` executions (each
    leaves the marker ``failed-<WORKFLOW_ID>-<n>``), waiting out a ``--delay`` backoff in this
    process between attempts (short backoffs are not durable timers); the executions after
    that hang when the test asks (``--hang flaky``), else succeed."""

    @app.step(
        name="flaky",
        retry=stalwart.Retry(max_attempts=opts.attempts, initial_delay=opts.delay, jitter=False),
    )
    def flaky(x: int) -> int:
        rec.executed("flaky")
        wid = stalwart.workflow_id()
        failed = len(list(rec.workdir.glob(f"failed-{wid}-*")))
        if failed < opts.fail_times:
            (rec.workdir / f"failed-{wid}-{failed + 1}").touch()
            raise ConnectionError("transient")
        rec.hang_sync("flaky")
        return x * 2

    @app.workflow(name="backoff_agent")
    def backoff_agent(seed: int) -> int:
        return flaky(seed)

    return backoff_agent, (opts.seed,)


def gather_crash_scenario(
    app: stalwart.Stalwart, rec: Recorder, opts: argparse.Namespace
) -> tuple[Any, tuple[Any, ...]]:
    """``steady`` and ``crasher`` run concurrently; ``crasher`` SIGKILLs the process each time."""

    @app.step(name="steady", retry=stalwart.Retry(max_attempts=10, initial_delay=0))
    async def steady(x: int) -> int:
        rec.executed("steady")
        await asyncio.sleep(3)
        return x

    @app.step(name="crasher", retry=stalwart.Retry(max_attempts=2, initial_delay=0))
    async def crasher(x: int) -> int:
        rec.executed("crasher")
        await asyncio.sleep(0.2)  # steady is running by now
        kill_myself()
        return x

    @app.workflow(name="gather_crash_agent")
    async def gather_crash_agent(seed: int) -> int:
        a, b = await asyncio.gather(steady(seed), crasher(seed))
        return a + b

    return gather_crash_agent, (opts.seed,)


def poison_scenario(
    app: stalwart.Stalwart, rec: Recorder, opts: argparse.Namespace
) -> tuple[Any, tuple[Any, ...]]:
    """A step with a huge retry budget that crashes its worker every time."""

    @app.step(name="crashy", retry=stalwart.Retry(max_attempts=50, initial_delay=0))
    def crashy(x: int) -> int:
        rec.executed("crashy")
        kill_myself()
        return x

    @app.workflow(name="poison_agent")
    def poison_agent(seed: int) -> int:
        return crashy(seed)

    return poison_agent, (opts.seed,)


def _downstream(workdir: Path) -> Any:
    from worker_agent import Downstream  # imported late: worker_agent imports this module

    return Downstream(workdir / "downstream.db")


def _pay_scenario(
    app: stalwart.Stalwart, rec: Recorder, opts: argparse.Namespace, *, verified: bool
) -> tuple[Any, tuple[Any, ...]]:
    """``quote``, then the irreversible ``pay`` (a charge downstream), then ``receipt``.

    ``pay`` makes its effect downstream before it hangs (``--hang pay``), so a kill there leaves
    the charge made and the attempt in doubt. With ``verified``, ``pay`` has a ``verify`` that
    looks the charge up downstream by the idempotency key (logged as ``verify_pay``).
    """
    downstream = _downstream(rec.workdir)

    @app.step(name="quote")
    def quote(order_id: str, amount: int) -> int:
        rec.executed("quote")
        return amount + 5  # a fee

    def find_charge(order_id: str, total: int) -> str | None:
        rec.executed("verify_pay")
        return downstream.find(stalwart.idempotency_key())  # type: ignore[no-any-return]

    @app.step(
        name="pay",
        irreversible=True,
        verify=find_charge if verified else None,
        retry=stalwart.Retry(max_attempts=3, initial_delay=0),
    )
    def pay(order_id: str, total: int) -> str:
        charge_id: str = downstream.charge(stalwart.idempotency_key(), order_id, total)
        rec.executed("pay")
        rec.hang_sync("pay")  # the effect happened; the journal does not know yet
        return charge_id

    @app.step(name="receipt")
    def receipt(charge_id: str) -> str:
        rec.executed("receipt")
        return f"receipt-for-{charge_id}"

    @app.workflow(name="pay_agent")
    def pay_agent(order_id: str, amount: int) -> dict[str, Any]:
        charge_id = pay(order_id, quote(order_id, amount))
        return {"charge": charge_id, "receipt": receipt(charge_id)}

    return pay_agent, (f"o-{opts.seed}", opts.seed * 100)


def pay_verified_scenario(
    app: stalwart.Stalwart, rec: Recorder, opts: argparse.Namespace
) -> tuple[Any, tuple[Any, ...]]:
    return _pay_scenario(app, rec, opts, verified=True)


def pay_unverified_scenario(
    app: stalwart.Stalwart, rec: Recorder, opts: argparse.Namespace
) -> tuple[Any, tuple[Any, ...]]:
    return _pay_scenario(app, rec, opts, verified=False)


TRIP_PRICES = {"flight": 300, "hotel": 120, "car": 45}


def trip_scenario(
    app: stalwart.Stalwart, rec: Recorder, opts: argparse.Namespace
) -> tuple[Any, tuple[Any, ...]]:
    """A saga: book a flight, a hotel and a car (each charged downstream, each compensated by
    a refund), then ``pay`` fails for good, so the bookings are rolled back newest first.

    A compensation logs ``undo_<kind>`` when it starts, SIGKILLs its own process while the
    flag file ``crash-undo_<kind>-<WORKFLOW_ID>`` exists (before it refunds), refunds
    (idempotent by the step's key), then hangs if ``--hang undo_<kind>`` asked for it. Each
    booking (and so its compensation) has ``Retry(max_attempts=3)``.
    """
    downstream = _downstream(rec.workdir)

    def booking(kind: str) -> Any:
        def cancel(booking_id: str, trip: str) -> None:
            rec.executed(f"undo_{kind}")
            if (rec.workdir / f"crash-undo_{kind}-{stalwart.workflow_id()}").exists():
                kill_myself()  # the refund service takes its caller down with it
            downstream.refund(stalwart.idempotency_key(), booking_id)
            rec.hang_sync(f"undo_{kind}")  # refunded; the journal does not know yet

        @app.step(
            name=f"book_{kind}",
            compensate=cancel,
            retry=stalwart.Retry(max_attempts=3, initial_delay=0),
        )
        def book(trip: str) -> str:
            rec.executed(f"book_{kind}")
            charge_id: str = downstream.charge(
                stalwart.idempotency_key(), f"{trip}:{kind}", TRIP_PRICES[kind]
            )
            return charge_id

        return book

    book_flight, book_hotel, book_car = booking("flight"), booking("hotel"), booking("car")

    @app.step(name="pay", retry=stalwart.Retry.never())
    def pay(trip: str, bookings: list[str]) -> str:
        rec.executed("pay")
        raise RuntimeError(f"card declined for {trip}")

    @app.workflow(name="trip_agent")
    def trip_agent(trip: str) -> dict[str, Any]:
        bookings = [book_flight(trip), book_hotel(trip), book_car(trip)]
        return {"bookings": bookings, "paid": pay(trip, bookings)}

    return trip_agent, (f"trip-{opts.seed}",)


def poison_saga_scenario(
    app: stalwart.Stalwart, rec: Recorder, opts: argparse.Namespace
) -> tuple[Any, tuple[Any, ...]]:
    """``reserve`` (compensated by a release that logs ``undo_reserve``), then ``crashy``, which
    SIGKILLs its process on every attempt of a budget far beyond ``--max-recoveries``."""

    def release(reservation: str, x: int) -> None:
        rec.executed("undo_reserve")

    @app.step(name="reserve", compensate=release)
    def reserve(x: int) -> str:
        rec.executed("reserve")
        return f"seat-{x}"

    @app.step(name="crashy", retry=stalwart.Retry(max_attempts=50, initial_delay=0))
    def crashy(reservation: str) -> str:
        rec.executed("crashy")
        kill_myself()
        return reservation

    @app.workflow(name="poison_saga_agent")
    def poison_saga_agent(seed: int) -> str:
        return crashy(reserve(seed))

    return poison_saga_agent, (opts.seed,)


def usage_scenario(
    app: stalwart.Stalwart, rec: Recorder, opts: argparse.Namespace
) -> tuple[Any, tuple[Any, ...]]:
    """``chat`` (a model call: 120 tokens in, 30 out on every attempt), then ``lookup`` (a
    tool that records no usage). A kill inside ``chat`` loses what that attempt used."""

    @app.step(name="chat", retry=stalwart.Retry(max_attempts=3, initial_delay=0))
    def chat(question: str) -> str:
        rec.executed("chat")
        stalwart.record_usage(input_tokens=120, output_tokens=30)
        rec.hang_sync("chat")
        return f"answer to {question}"

    @app.step(name="lookup", retry=stalwart.Retry(max_attempts=3, initial_delay=0))
    def lookup(answer: str) -> str:
        rec.executed("lookup")
        rec.hang_sync("lookup")
        return answer.upper()

    @app.workflow(name="usage_agent")
    def usage_agent(seed: int) -> str:
        return lookup(chat(f"question {seed}"))

    return usage_agent, (opts.seed,)


def budget_tokens_scenario(
    app: stalwart.Stalwart, rec: Recorder, opts: argparse.Namespace
) -> tuple[Any, tuple[Any, ...]]:
    """Five steps ``think1`` ... ``think5`` under ``Budget(max_tokens=100)``; each attempt
    records 30 input tokens when it finishes."""

    def make(i: int) -> Any:
        name = f"think{i}"

        @app.step(name=name)
        def think(x: int) -> int:
            rec.executed(name)
            rec.hang_sync(name)
            stalwart.record_usage(input_tokens=30)
            return x + i

        return think

    steps = [make(i) for i in range(1, 6)]

    @app.workflow(name="budget_tokens_agent", budget=stalwart.Budget(max_tokens=100))
    def budget_tokens_agent(seed: int) -> int:
        value = seed
        for step in steps:
            value = step(value)
        return value

    return budget_tokens_agent, (opts.seed,)


def budget_steps_scenario(
    app: stalwart.Stalwart, rec: Recorder, opts: argparse.Namespace
) -> tuple[Any, tuple[Any, ...]]:
    """``first`` then ``second`` (two attempts) under ``Budget(max_steps=3)``; ``second``
    raises while the file ``WORKDIR/fail-second`` exists."""

    @app.step(name="first")
    def first(x: int) -> int:
        rec.executed("first")
        return x + 1

    @app.step(name="second", retry=stalwart.Retry(max_attempts=2, initial_delay=0))
    def second(x: int) -> int:
        rec.executed("second")
        rec.hang_sync("second")
        if (rec.workdir / "fail-second").exists():
            raise ValueError("second is failing")
        return x * 2

    @app.workflow(name="budget_steps_agent", budget=stalwart.Budget(max_steps=3))
    def budget_steps_agent(seed: int) -> int:
        return second(first(seed))

    return budget_steps_agent, (opts.seed,)


SCENARIOS: dict[str, Scenario] = {
    "sync": sync_scenario,
    "async": async_scenario,
    "doomed": doomed_scenario,
    "gather_crash": gather_crash_scenario,
    "backoff": backoff_scenario,
    "poison": poison_scenario,
    "pay_verified": pay_verified_scenario,
    "pay_unverified": pay_unverified_scenario,
    "trip": trip_scenario,
    "poison_saga": poison_saga_scenario,
    "usage": usage_scenario,
    "budget_tokens": budget_tokens_scenario,
    "budget_steps": budget_steps_scenario,
}


def _emit(outcome: dict[str, Any]) -> None:
    print(json.dumps(outcome), flush=True)


def run_one(opts: argparse.Namespace) -> int:
    """Run (or resume) one workflow of a scenario in this process."""
    workdir = Path(opts.workdir)
    rec = Recorder(workdir, opts.hang)
    with stalwart.Stalwart(
        opts.url, lease_seconds=opts.lease_seconds, max_recoveries=opts.max_recoveries
    ) as app:
        workflow, args = SCENARIOS[opts.scenario](app, rec, opts)
        started = time.monotonic()
        try:
            result = app.run(workflow, *args, workflow_id=opts.workflow_id)
        except stalwart.WorkflowFailed as exc:
            _emit(
                {
                    "status": "failed",
                    "error": str(exc),
                    "cause_type": exc.cause_type,
                    "cause_message": exc.cause_message,
                }
            )
            return FAILED_EXIT
        except stalwart.NeedsAttention as exc:
            _emit(
                {
                    "status": "needs_attention",
                    "error": str(exc),
                    "reason": exc.reason,
                    "workflow_id": exc.workflow_id,
                }
            )
            return NEEDS_ATTENTION_EXIT
        _emit({"status": "completed", "result": result, "elapsed": time.monotonic() - started})
    return 0


def run_many(opts: argparse.Namespace) -> int:
    """Run ``--count`` workflows of ``--steps`` steps at once, one thread each.

    Every process of the test waits for the ``--go`` file first, so they all open the store and
    start writing at the same moment.
    """
    deadline = time.monotonic() + 30
    while not Path(opts.go).exists():
        if time.monotonic() > deadline:
            print("never got the go signal", file=sys.stderr)
            return 1
        time.sleep(0.002)
    with stalwart.Stalwart(opts.url, lease_seconds=opts.lease_seconds) as app:

        @app.step(name="inc")
        def inc(v: int) -> int:
            return v + 1

        @app.workflow(name="chain")
        def chain(n: int) -> int:
            v = 0
            for _ in range(n):
                v = inc(v)
            return v

        ids = [f"{opts.workflow_id}-{i}" for i in range(opts.count)]
        with ThreadPoolExecutor(max_workers=opts.count) as pool:
            futures = {wid: pool.submit(app.run, chain, opts.steps, workflow_id=wid) for wid in ids}
            results = {wid: future.result() for wid, future in futures.items()}
    _emit({"status": "completed", "results": results})
    return 0


def main(argv: list[str]) -> int:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the harness dumps a stuck child
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("scenario", choices=[*SCENARIOS, "many"])
    parser.add_argument("url")
    parser.add_argument("workdir")
    parser.add_argument("workflow_id")
    parser.add_argument("--hang", action="append", default=[])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--fail-times", type=int, default=1)
    parser.add_argument("--attempts", type=int, default=3)
    parser.add_argument("--delay", type=float, default=3.0)
    parser.add_argument("--lease-seconds", type=float, default=30.0)
    parser.add_argument("--max-recoveries", type=int, default=5)
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--go", default="")
    opts = parser.parse_args(argv)
    if opts.scenario == "many":
        return run_many(opts)
    return run_one(opts)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
