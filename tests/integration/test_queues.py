"""Queues, limits and priorities, in one process, on every backend (memory, SQLite, PostgreSQL).

What these tests claim:

* ``app.start(queue=)`` overrides the workflow's queue, and ``WorkflowInfo.queue`` records the
  queue a run was started on; ``@app.workflow(queue="x")`` sends its runs to ``x``;
* a worker serves only its ``queues``; a worker started without queues serves ``default``,
  every declared queue and every queue a workflow names, and nothing else;
* higher ``priority`` runs first (then oldest first), whether the worker's concurrency or the
  queue's concurrency is what lets one run at a time;
* a queue's ``concurrency`` holds inside one worker whose own concurrency is larger (observed
  from inside the steps), a run suspended on a wait holds no slot, and a woken run needs a free
  slot to resume;
* a queue's ``rate`` defers the starts beyond it until the period has passed (the worker comes
  back for them on its own once the clock moves), and the store verbs enforce the limits
  exactly: ``take_lease`` refuses the start beyond the rate or the concurrency, says through
  ``next_start`` when the rate allows the next one, lets a resumed suspended run or a takeover
  of a running run through without counting it as a start, and counts each queue on its own;
* declaring a queue again replaces its limits (all of them);
* a queue at its limit does not hold up the runs of the worker's other queues, and
  ``app.run`` of a run whose queue is full waits for a slot without spinning on the store;
* and three defects found while writing these, now fixed: ``app.run`` of a new run waits for
  a slot in its queue like any run; a start counted with an older clock reading than another
  worker's still sees every start in its window; a worker does not poll a queue that is full
  but also has a rate every 10 ms once the rate's window has passed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import stalwart
from serving import serving
from stalwart._store import Entry, Store
from stalwart._store.base import QueueLimits
from stalwart.testing import FakeClock, runtime_of, store_of

pytestmark = pytest.mark.timeout(60)

WAIT_S = 15.0  # generous bound for what should take milliseconds
POLL_GRACE_S = 0.7  # longer than a worker's full poll (0.5 s): time to do what it should not


# -- helpers ------------------------------------------------------------------------------


def wait_until(condition: Callable[[], bool], what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not reached within {timeout}s")
        time.sleep(0.005)


def status(app: stalwart.Stalwart, workflow_id: str) -> str:
    return app.handle(workflow_id).status()


def queue_of(app: stalwart.Stalwart, workflow_id: str) -> str:
    (info,) = [i for i in app.list_workflows(limit=1000) if i.workflow_id == workflow_id]
    return info.queue


class Probe:
    """What the steps saw: the order they were entered in, and how many ran at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.order: list[str] = []
        self.running = 0
        self.peak = 0
        self.release = threading.Event()  # steps that hold wait for it

    def enter(self, tag: str) -> None:
        with self._lock:
            self.order.append(tag)
            self.running += 1
            self.peak = max(self.peak, self.running)

    def leave(self) -> None:
        with self._lock:
            self.running -= 1

    def run(self, tag: str, *, pause: float = 0.0, hold: bool = False) -> str:
        """Be a step body: enter, sleep ``pause`` (or, with ``hold``, wait for ``release``)."""
        self.enter(tag)
        try:
            if hold:
                assert self.release.wait(WAIT_S), f"{tag}: never released"
            elif pause:
                time.sleep(pause)
        finally:
            self.leave()
        return tag

    def saw(self, tag: str) -> bool:
        with self._lock:
            return tag in self.order


# -- routing ------------------------------------------------------------------------------


def test_start_queue_overrides_the_workflows_queue_and_is_recorded(
    app: stalwart.Stalwart, clock: FakeClock
) -> None:
    probe = Probe()

    @app.step
    def work(tag: str) -> str:
        return probe.run(tag)

    @app.workflow(queue="x")
    def routed(tag: str) -> str:
        return work(tag)

    @app.workflow
    def plain(tag: str) -> str:
        return work(tag)

    app.start(routed, "on-x", workflow_id="on-x")
    clock.advance(1)
    app.start(routed, "on-y", workflow_id="on-y", queue="y")
    app.start(plain, "plain-on-y", workflow_id="plain-on-y", queue="y")
    app.start(plain, "plain", workflow_id="plain")
    assert queue_of(app, "on-x") == "x"
    assert queue_of(app, "on-y") == "y"
    assert queue_of(app, "plain-on-y") == "y"
    assert queue_of(app, "plain") == "default"

    with serving(app, concurrency=4, queues=["y"]):
        assert app.handle("on-y").result(timeout=WAIT_S) == "on-y"
        assert app.handle("plain-on-y").result(timeout=WAIT_S) == "plain-on-y"
        time.sleep(0.1)
        # the workflow's own queue was overridden: a worker of y ran them, and nothing else
        assert status(app, "on-x") == "pending"
        assert status(app, "plain") == "pending"
    assert sorted(probe.order) == ["on-y", "plain-on-y"]
    assert queue_of(app, "on-y") == "y"  # still recorded once the run is over


def test_a_workflows_queue_sends_its_runs_there(app: stalwart.Stalwart, clock: FakeClock) -> None:
    probe = Probe()

    @app.step
    def work(tag: str) -> str:
        return probe.run(tag)

    @app.workflow(queue="x")
    def on_x(tag: str) -> str:
        return work(tag)

    @app.workflow
    def on_default(tag: str) -> str:
        return work(tag)

    app.start(on_x, "x-run", workflow_id="x-run")  # the oldest: a worker of x would take it
    clock.advance(1)
    app.start(on_default, "sentinel", workflow_id="sentinel")
    assert queue_of(app, "x-run") == "x"

    with serving(app, concurrency=2, queues=["default"]):
        assert app.handle("sentinel").result(timeout=WAIT_S) == "sentinel"
        time.sleep(0.1)
        assert status(app, "x-run") == "pending"
    assert probe.order == ["sentinel"]

    with serving(app, concurrency=2, queues=["x"]):
        assert app.handle("x-run").result(timeout=WAIT_S) == "x-run"
    assert probe.order == ["sentinel", "x-run"]


def test_a_worker_with_queues_never_runs_another_queues_runs(
    app: stalwart.Stalwart, clock: FakeClock
) -> None:
    probe = Probe()

    @app.step
    def work(tag: str) -> str:
        return probe.run(tag, pause=0.01)

    @app.workflow(queue="a")
    def job(tag: str) -> str:
        return work(tag)

    # b's runs are older and of higher priority: only the queue filter keeps them out
    b_ids = [f"b{i}" for i in range(5)]
    for wid in b_ids:
        app.start(job, wid, workflow_id=wid, queue="b", priority=10)
        clock.advance(1)
    a_ids = [f"a{i}" for i in range(5)]
    for wid in a_ids:
        app.start(job, wid, workflow_id=wid)
        clock.advance(1)

    with serving(app, concurrency=3, queues=["a"]):
        for wid in a_ids:
            assert app.handle(wid).result(timeout=WAIT_S) == wid
        time.sleep(POLL_GRACE_S)
        assert [status(app, wid) for wid in b_ids] == ["pending"] * len(b_ids)
    assert sorted(probe.order) == a_ids

    with serving(app, concurrency=3, queues=["b"]):  # b's runs were runnable all along
        for wid in b_ids:
            assert app.handle(wid).result(timeout=WAIT_S) == wid


def test_a_worker_without_queues_serves_default_declared_and_named_queues(
    app: stalwart.Stalwart, clock: FakeClock
) -> None:
    probe = Probe()
    app.queue("declared", concurrency=5)

    @app.step
    def work(tag: str) -> str:
        return probe.run(tag)

    @app.workflow
    def on_default(tag: str) -> str:
        return work(tag)

    @app.workflow(queue="named")
    def on_named(tag: str) -> str:
        return work(tag)

    app.start(on_default, "stray", workflow_id="stray", queue="stray")  # nobody's queue
    clock.advance(1)
    app.start(on_default, "default", workflow_id="default")
    app.start(on_named, "named", workflow_id="named")
    app.start(on_default, "declared", workflow_id="declared", queue="declared")

    with serving(app, concurrency=4):
        for wid in ("default", "named", "declared"):
            assert app.handle(wid).result(timeout=WAIT_S) == wid
        time.sleep(POLL_GRACE_S)
        assert status(app, "stray") == "pending"
    assert sorted(probe.order) == ["declared", "default", "named"]


# -- priorities ---------------------------------------------------------------------------


@pytest.mark.parametrize("limited_by", ["worker", "queue"])
def test_higher_priority_runs_first(
    app: stalwart.Stalwart, clock: FakeClock, limited_by: str
) -> None:
    probe = Probe()
    if limited_by == "queue":
        app.queue("default", concurrency=1)
    concurrency = 1 if limited_by == "worker" else 4

    @app.step
    def work(tag: str) -> str:
        return probe.run(tag)

    @app.workflow
    def job(tag: str) -> str:
        return work(tag)

    # started low priority first, each one later than the last
    priorities = {"p0-a": 0, "p1": 1, "p5-a": 5, "p0-b": 0, "p10": 10, "p5-b": 5, "neg": -3}
    for wid, priority in priorities.items():
        app.start(job, wid, workflow_id=wid, priority=priority)
        clock.advance(1)

    with serving(app, concurrency=concurrency):
        for wid in priorities:
            assert app.handle(wid).result(timeout=WAIT_S) == wid
    assert probe.order == ["p10", "p5-a", "p5-b", "p1", "p0-a", "p0-b", "neg"]
    assert probe.peak == 1


# -- concurrency --------------------------------------------------------------------------


def test_a_queues_concurrency_holds_within_one_worker(app: stalwart.Stalwart) -> None:
    probe = Probe()
    app.queue("llm", concurrency=2)

    @app.step
    def call_llm(i: int) -> str:
        return probe.run(f"llm-{i}", pause=0.05)

    @app.workflow(queue="llm")
    def agent(i: int) -> str:
        return call_llm(i)

    handles = [app.start(agent, i) for i in range(12)]
    with serving(app, concurrency=8):
        for i, handle in enumerate(handles):
            assert handle.result(timeout=WAIT_S) == f"llm-{i}"
    assert len(probe.order) == 12
    assert probe.peak == 2, f"at most 2 at once, and the worker had room for 2: {probe.peak}"


def test_a_suspended_run_holds_no_slot_and_a_woken_one_needs_one(
    app: stalwart.Stalwart, clock: FakeClock
) -> None:
    probe = Probe()
    app.queue("q", concurrency=1)

    @app.step
    def mark(tag: str, hold: bool) -> str:
        return probe.run(tag, hold=hold)

    @app.workflow(queue="q")
    def waiter() -> Any:
        mark("a:before", False)
        got = stalwart.wait_for_event("go")
        mark("a:after", False)
        return got

    @app.workflow(queue="q")
    def holder() -> str:
        return mark("b", True)

    with serving(app, concurrency=4):
        app.start(waiter, workflow_id="A")
        wait_until(lambda: status(app, "A") == "suspended", "A suspended on its event")
        clock.advance(1)
        app.start(holder, workflow_id="B")
        # B runs while A is suspended: A gave its slot back
        wait_until(lambda: probe.saw("b"), "B running while A waits")
        assert status(app, "A") == "suspended"

        app.send_event("A", "go", "payload")  # A is due now, but B holds the only slot
        time.sleep(POLL_GRACE_S)
        assert not probe.saw("a:after")
        assert status(app, "A") == "suspended"

        probe.release.set()
        assert app.handle("B").result(timeout=WAIT_S) == "b"
        assert app.handle("A").result(timeout=WAIT_S) == "payload"
    assert probe.order == ["a:before", "b", "a:after"]
    assert probe.peak == 1


# -- rate ---------------------------------------------------------------------------------


def test_a_worker_defers_starts_beyond_the_rate_until_the_period_passes(
    app: stalwart.Stalwart, clock: FakeClock
) -> None:
    probe = Probe()
    app.queue("quota", rate=2, period=10.0)

    @app.step
    def call_api(tag: str) -> str:
        return probe.run(tag)

    @app.workflow(queue="quota")
    def agent(tag: str) -> str:
        return call_api(tag)

    ids = ["r0", "r1", "r2"]
    for wid in ids:
        app.start(agent, wid, workflow_id=wid)
        clock.advance(0.001)

    with serving(app, concurrency=4):
        assert app.handle("r0").result(timeout=WAIT_S) == "r0"
        assert app.handle("r1").result(timeout=WAIT_S) == "r1"
        time.sleep(POLL_GRACE_S)  # the fake clock stands still: the window never passes
        assert status(app, "r2") == "pending"
        assert probe.order == ["r0", "r1"]

        clock.advance(9.9)  # not yet: r0 and r1 leave the window 10 s after they started
        time.sleep(POLL_GRACE_S)
        assert status(app, "r2") == "pending"

        clock.advance(0.2)  # the worker comes back by itself once the window passed
        assert app.handle("r2").result(timeout=WAIT_S) == "r2"
    assert probe.order == ids


def _pending(store: Store, workflow_id: str, queue: str, now: float = 1.0) -> None:
    assert store.create_run(
        workflow_id=workflow_id,
        name="agent",
        status="pending",
        queue=queue,
        priority=0,
        input=b"Jnull",
        now=now,
        owner=None,
        lease_until=None,
        entry=Entry(kind="run", name="started", status="completed"),
    )


def _taker(store: Store, limits: QueueLimits) -> Callable[..., bool]:
    def take(workflow_id: str, now: float, owner: str = "", expected: str | None = None) -> bool:
        taken = store.take_lease(
            workflow_id,
            owner=owner or f"w-{workflow_id}",
            expected_owner=expected,
            now=now,
            lease_until=now + 30,
            limits=limits,
        ).taken
        return taken

    return take


def _finish(store: Store, workflow_id: str, owner: str, now: float) -> None:
    assert store.finish_run(
        workflow_id,
        owner=owner,
        status="completed",
        output=b"Jnull",
        error=None,
        now=now,
        entry=Entry(kind="run", name="finished", status="completed"),
    )


def test_take_lease_refuses_a_start_beyond_the_rate(app: stalwart.Stalwart) -> None:
    store = store_of(app)
    limits = QueueLimits(rate=2, period=10.0)
    take = _taker(store, limits)
    for wid in ("r1", "r2", "r3", "r4"):
        _pending(store, wid, "quota")
    _pending(store, "other", "other-quota")

    assert store.next_start("quota", limits) is None  # no start yet: nothing to wait for
    assert take("r1", 100.0)
    assert take("r2", 101.0)
    assert not take("r3", 105.0)  # the third start within 10 s
    row = store.get_run("r3")
    assert row is not None and row.status == "pending" and row.lease_owner is None
    assert take("other", 105.0)  # each queue has a rate of its own
    assert store.next_start("quota", limits) == 110.0  # when r1's start leaves the window
    assert not take("r3", 109.9)
    assert take("r3", 110.0)
    assert not take("r4", 110.5)  # r2 (101) and r3 (110) are within (100.5, 110.5]
    assert store.next_start("quota", limits) == 111.0
    assert take("r4", 111.0)
    assert store.next_start("quota", QueueLimits(concurrency=3)) is None  # no rate, no wait


def test_take_lease_lets_resumes_and_takeovers_through_without_counting_a_start(
    app: stalwart.Stalwart,
) -> None:
    store = store_of(app)
    limits = QueueLimits(rate=1, period=10.0)
    take = _taker(store, limits)
    _pending(store, "r1", "quota")
    _pending(store, "r2", "quota")
    assert take("r1", 100.0)
    # r1 suspends on a timer and wakes while the rate is used up: resuming is not a start
    assert store.suspend_run("r1", owner="w-r1", wake_at=102.0, waiting_for=None, now=101.0)
    assert take("r1", 103.0, owner="w-r1-again")
    # r1's holder dies (its lease lapses): taking it over is not a start either
    assert take("r1", 200.0, owner="w-r1-rescuer", expected="w-r1-again")
    assert not take("r2", 109.0)  # the only start of the window is still r1's at 100
    assert take("r2", 110.0)


def test_take_lease_holds_a_queues_concurrency(app: stalwart.Stalwart) -> None:
    store = store_of(app)
    limits = QueueLimits(concurrency=1)
    take = _taker(store, limits)
    for wid in ("c1", "c2", "c3"):
        _pending(store, wid, "llm")
    _pending(store, "elsewhere", "other")

    assert take("c1", 100.0)
    assert not take("c2", 100.0)
    assert take("elsewhere", 100.0)  # each queue counts its own running runs
    # c1's holder is gone and its lease lapsed: the takeover keeps c1's slot, adds none
    assert take("c1", 200.0, owner="rescuer", expected="w-c1")
    assert not take("c2", 200.0)
    # c1 suspends: its slot is free for c2
    assert store.suspend_run("c1", owner="rescuer", wake_at=300.0, waiting_for=None, now=201.0)
    assert take("c2", 202.0)
    # c1's timer is due, but c2 holds the only slot
    assert not take("c1", 301.0, owner="w3")
    row = store.get_run("c1")
    assert row is not None and row.status == "suspended"
    _finish(store, "c2", "w-c2", 302.0)
    assert take("c1", 303.0, owner="w3")
    assert not take("c3", 304.0)
    _finish(store, "c1", "w3", 305.0)
    assert take("c3", 306.0)
    # without limits the same verb takes any claimable run
    _pending(store, "c4", "llm")
    assert store.take_lease("c4", owner="w4", expected_owner=None, now=307.0, lease_until=400).taken


# -- declarations -------------------------------------------------------------------------


def test_declaring_a_queue_again_replaces_its_limits(app: stalwart.Stalwart) -> None:
    probe = Probe()
    app.queue("q", concurrency=1, rate=1, period=1000.0)
    app.queue("q", concurrency=3)  # no rate any more, and room for 3
    assert runtime_of(app).queues["q"] == QueueLimits(concurrency=3, rate=None, period=1.0)

    @app.step
    def work(i: int) -> int:
        probe.enter(f"q-{i}")
        try:
            deadline = time.monotonic() + 5
            while probe.peak < 3 and time.monotonic() < deadline:
                time.sleep(0.005)  # wait for the other two: all three must run at once
        finally:
            probe.leave()
        return i

    @app.workflow(queue="q")
    def job(i: int) -> int:
        return work(i)

    handles = [app.start(job, i) for i in range(3)]
    with serving(app, concurrency=4):
        assert [h.result(timeout=WAIT_S) for h in handles] == [0, 1, 2]
    assert probe.peak == 3


# -- fairness between queues --------------------------------------------------------------


def test_a_queue_at_its_limit_does_not_hold_up_other_queues(
    app: stalwart.Stalwart, clock: FakeClock
) -> None:
    probe = Probe()
    app.queue("llm", concurrency=1)

    @app.step
    def work(tag: str, hold: bool) -> str:
        return probe.run(tag, hold=hold)

    @app.workflow(queue="llm")
    def llm_job(i: int) -> str:
        return work(f"llm-{i}", True)

    @app.workflow
    def other_job() -> str:
        return work("other", False)

    llm = [app.start(llm_job, i, workflow_id=f"llm-{i}") for i in range(10)]  # a backlog
    clock.advance(1)
    other = app.start(other_job, workflow_id="other")  # newer than the whole backlog

    def llm_started() -> list[str]:
        return [tag for tag in probe.order if tag.startswith("llm-")]

    with serving(app, concurrency=2):
        try:
            # the worker has a free thread and "default" has no limit
            assert other.result(timeout=WAIT_S) == "other"
            wait_until(lambda: len(llm_started()) == 1, "an llm run holds the queue's slot")
            assert len(llm_started()) == 1, probe.order
        finally:
            probe.release.set()
        for handle in llm:
            assert handle.result(timeout=WAIT_S).startswith("llm-")
    assert len(llm_started()) == 10


def test_app_run_of_a_run_in_a_full_queue_waits_politely(
    app: stalwart.Stalwart, clock: FakeClock
) -> None:
    app.queue("llm", concurrency=1)

    @app.step
    def work(tag: str) -> str:
        return tag

    @app.workflow(queue="llm")
    def llm_job(tag: str) -> str:
        return work(tag)

    store = store_of(app)
    app.start(llm_job, "held", workflow_id="held")
    now = clock.time()
    limits = runtime_of(app).queues["llm"]
    assert store.take_lease(
        "held",
        owner="elsewhere",
        expected_owner=None,
        now=now,
        lease_until=now + 3600,
        limits=limits,
    ).taken
    app.start(llm_job, "queued", workflow_id="queued")
    calls = 0
    take_lease = store.take_lease

    def counting(*args: Any, **kwargs: Any) -> tuple[bool, int]:
        nonlocal calls
        calls += 1
        return take_lease(*args, **kwargs)

    store.take_lease = counting  # type: ignore[method-assign]
    outcome: list[str] = []
    runner = threading.Thread(
        target=lambda: outcome.append(app.run(llm_job, "queued", workflow_id="queued")),
        daemon=True,
    )
    runner.start()
    try:
        time.sleep(1.0)
        tries = calls
    finally:
        _finish(store, "held", "elsewhere", clock.time())
        runner.join(WAIT_S)
    assert outcome == ["queued"]
    # a waiting app.run backs off from 20 ms to 250 ms between looks: about 10 in a second
    assert tries <= 20, f"{tries} take_lease calls in 1 s"


# -- defects found while writing these, now fixed -----------------------------------------


def test_app_run_waits_for_a_slot_in_its_queue(app: stalwart.Stalwart) -> None:
    probe = Probe()
    app.queue("llm", concurrency=1)

    @app.step
    def work(tag: str, hold: bool) -> str:
        return probe.run(tag, hold=hold)

    @app.workflow(queue="llm")
    def llm_job(tag: str, hold: bool) -> str:
        return work(tag, hold)

    app.start(llm_job, "held", True, workflow_id="held")
    outcome: list[str] = []
    direct = threading.Thread(
        target=lambda: outcome.append(app.run(llm_job, "direct", False, workflow_id="direct")),
        daemon=True,
    )
    with serving(app, concurrency=2):
        wait_until(lambda: probe.saw("held"), "the held run has the queue's only slot")
        direct.start()
        try:
            time.sleep(0.3)
            assert not probe.saw("direct"), "app.run ran a second run of a queue limited to 1"
        finally:
            probe.release.set()
            direct.join(WAIT_S)
    assert outcome == ["direct"]
    assert probe.peak == 1


def test_a_start_counted_with_an_older_clock_reading_sees_every_start_in_its_window(
    app: stalwart.Stalwart,
) -> None:
    store = store_of(app)
    limits = QueueLimits(rate=2, period=1.0)
    take = _taker(store, limits)
    for wid in ("r1", "r2", "late", "early"):
        _pending(store, wid, "quota")
    assert take("r1", 0.5)
    assert take("r2", 0.55)
    # Two workers read their clocks at 1.2 and 1.6; the one that read 1.6 gets the queue's
    # lock first (its transaction: prune starts <= 0.6, count those after: none, admit).
    assert take("late", 1.6)
    # r1 and r2 are within (0.2, 1.2], the window of a start at 1.2: it must be refused.
    assert not take("early", 1.2)


def test_a_worker_waits_politely_on_a_full_queue_that_also_has_a_rate(
    app: stalwart.Stalwart, clock: FakeClock
) -> None:
    probe = Probe()
    app.queue("llm", concurrency=1, rate=2, period=1.0)

    @app.step
    def work(tag: str, hold: bool) -> str:
        return probe.run(tag, hold=hold)

    @app.workflow(queue="llm")
    def llm_job(tag: str, hold: bool) -> str:
        return work(tag, hold)

    for wid, hold in (("quick", False), ("held", True), ("waiting", False)):
        app.start(llm_job, wid, hold, workflow_id=wid)
        clock.advance(0.001)
    store = store_of(app)
    calls = 0
    take_lease = store.take_lease

    def counting(*args: Any, **kwargs: Any) -> tuple[bool, int]:
        nonlocal calls
        calls += 1
        return take_lease(*args, **kwargs)

    take_leases = store.take_leases

    def counting_all(asks: list[Any]) -> list[Any]:
        nonlocal calls
        calls += len(asks)  # a worker claims what it found together
        return take_leases(asks)

    store.take_lease = counting  # type: ignore[method-assign]
    store.take_leases = counting_all  # type: ignore[method-assign]
    with serving(app, concurrency=4):
        try:
            wait_until(lambda: probe.saw("held"), "the held run has the queue's only slot")
            clock.advance(2.0)  # the rate's window is over; the slot is still taken
            time.sleep(0.1)
            before = calls
            time.sleep(1.0)
            tries = calls - before
        finally:
            probe.release.set()
        assert app.handle("waiting").result(timeout=WAIT_S) == "waiting"
    # nothing changed in that second: a full poll every 0.5 s is all it takes
    assert tries <= 10, f"{tries} claims in 1 s while nothing changed"
