"""The async runtime in one process: every async run of an app shares one event loop.

``app.run`` from sync code runs async workflows on a loop the app keeps in a thread of its own,
so a client created once (here an ``httpx.AsyncClient`` against a local keep-alive server)
works across runs and across a suspension; ``await app.run_async`` runs them on the caller's
loop, so a client the caller's loop created works in its steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

import stalwart
from batches import held, queued
from stalwart import testing
from stalwart.testing import FakeClock


@pytest.fixture
def server() -> Iterator[str]:
    """A local HTTP/1.1 server (connections kept alive, so a client pools them)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            data = json.dumps({"path": self.path}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def real_app(tmp_path: Path) -> Iterator[stalwart.Stalwart]:
    """An app with the real clock, so that a short durable sleep ends by itself."""
    with stalwart.Stalwart(f"sqlite:///{tmp_path / 'async.db'}") as app:
        yield app


def test_app_run_shares_one_loop_across_runs_and_suspensions(
    real_app: stalwart.Stalwart, server: str
) -> None:
    app = real_app
    client = httpx.AsyncClient(base_url=server)  # created with no loop, as at module level
    loops: set[int] = set()

    @app.step
    async def get(path: str) -> str:
        loops.add(id(asyncio.get_running_loop()))
        response = await client.get(path)
        return str(response.json()["path"])

    @app.workflow
    async def wf(n: int) -> list[str]:
        first = await get(f"/{n}/a")
        await stalwart.sleep_async(0.05)  # suspends: the second call is in a new invocation
        return [first, await get(f"/{n}/b")]

    @app.workflow
    async def close_client() -> None:
        await client.aclose()  # on the loop the client is bound to

    for n in range(5):
        assert app.run(wf, n, workflow_id=f"r{n}") == [f"/{n}/a", f"/{n}/b"]
    assert len(loops) == 1
    app.run(close_client)


def test_run_async_runs_on_the_callers_loop(real_app: stalwart.Stalwart, server: str) -> None:
    app = real_app
    seen: list[asyncio.AbstractEventLoop] = []

    async def main() -> list[Any]:
        client = httpx.AsyncClient(base_url=server)  # bound to this loop on first use
        await client.get("/warm")

        @app.step
        async def get(path: str) -> str:
            seen.append(asyncio.get_running_loop())
            return str((await client.get(path)).json()["path"])

        @app.workflow
        async def wf(n: int) -> list[str]:
            a, b = await asyncio.gather(get(f"/{n}/x"), get(f"/{n}/y"))
            return [a, b]

        results = [await app.run_async(wf, n, workflow_id=f"ra{n}") for n in range(3)]
        await client.aclose()
        assert all(loop is asyncio.get_running_loop() for loop in seen)
        return results

    assert asyncio.run(main()) == [[f"/{n}/x", f"/{n}/y"] for n in range(3)]


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}"


@pytest.mark.timeout(30)
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_run_of_async_workflow_inside_a_loop_does_not_fail_the_run(tmp_path: Path) -> None:
    with stalwart.Stalwart(_url(tmp_path), clock=FakeClock()) as app:

        @app.step
        async def fetch() -> int:
            return 1

        @app.workflow
        async def wf() -> int:
            return await fetch()

        async def caller() -> tuple[type[BaseException], str] | None:
            try:
                app.run(wf, workflow_id="w")
            except BaseException as exc:  # keep no traceback: it pins the unawaited coroutine
                return type(exc), str(exc)
            return None

        outcome = asyncio.run(caller())
        gc.collect()  # the never-awaited coroutine is reported here, not in a later test
        assert outcome is not None
        assert issubclass(outcome[0], TypeError | RuntimeError), outcome
        assert "run_async" in outcome[1], outcome
        status = app.handle("w").status() if app.list_workflows() else None
        assert status != "failed"


@pytest.mark.parametrize("emits", [False, True], ids=["plain", "streaming"])
def test_a_step_waiting_for_its_commit_leaves_the_loop_to_other_tasks(
    real_app: stalwart.Stalwart, emits: bool
) -> None:
    """An async step's outcome is acknowledged once its commit ends, and the loop the app's
    async runs share goes on meanwhile: with a commit held up, another task's step still
    finishes its own work; the run completes with both once the commit ends. So too when
    the step emitted stream chunks, which its outcome's transaction writes first."""
    app = real_app
    store: Any = app._runtime.store
    go_a, go_b, in_a, in_b, b_ran = (threading.Event() for _ in range(5))

    @app.step(name="a")
    async def a() -> str:
        in_a.set()
        await asyncio.to_thread(go_a.wait, 30)
        if emits:
            stalwart.emit("a's words")
        return "a"

    @app.step(name="b")
    async def b() -> str:
        in_b.set()
        await asyncio.to_thread(go_b.wait, 30)
        b_ran.set()  # on the loop, after the wait: only if the loop is free
        return "b"

    @app.workflow
    async def both() -> list[str]:
        return list(await asyncio.gather(a(), b()))

    results: list[Any] = []
    running = threading.Thread(target=lambda: results.append(app.run(both, workflow_id="ab")))
    running.start()
    gate: threading.Event | None = None
    try:
        assert in_a.wait(30) and in_b.wait(30)
        gate, blocker = held(store)
        go_a.set()  # a returns: its outcome waits behind the held commit
        queued(store, 1)
        go_b.set()
        assert b_ran.wait(30), "the loop was held while a's outcome waited for its commit"
        assert store._pipeline._queue  # a's outcome still waits
        assert not results
    finally:
        go_a.set()
        go_b.set()
        if gate is not None:
            gate.set()
            blocker.join(timeout=30)
        running.join(timeout=30)
    assert results == [["a", "b"]]
    steps = [e for e in app.journal("ab") if e.kind == "step"]
    assert sorted((e.name, e.status) for e in steps) == [("a", "completed"), ("b", "completed")]


def test_a_leftover_task_that_ignores_a_cancellation_is_cancelled_again(
    real_app: stalwart.Stalwart,
) -> None:
    """When an async run's main task ends, the tasks it left running are cancelled, and
    cancelled again while they go on: a task that let one cancellation pass (as a step whose
    outcome a transaction already held does) does not hold the run's end up."""
    app = real_app
    ignored: list[bool] = []

    async def stubborn() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            ignored.append(True)  # one cancellation let pass
        await asyncio.sleep(600)  # (past the test's timeout: only a second cancel ends it)

    @app.workflow
    async def leaves_a_task() -> int:
        asyncio.get_running_loop().create_task(stubborn())
        await asyncio.sleep(0)
        return 1

    assert app.run(leaves_a_task, workflow_id="leftover") == 1
    assert ignored == [True]


def test_run_async_calls_never_take_the_threads_their_steps_need(tmp_path: Path) -> None:
    """More concurrent ``app.run_async`` calls than the loop's default executor has threads,
    each run's step awaiting ``asyncio.to_thread``: every run completes (each call waited in
    one of those threads, and the steps' calls queued behind them for ever)."""
    with stalwart.Stalwart(f"sqlite:///{tmp_path / 'runs.db'}") as app:

        @app.step(name="blocking_io")
        async def blocking_io(n: int) -> int:
            return await asyncio.to_thread(lambda: n * 2)

        @app.workflow(name="uses_a_thread")
        async def uses_a_thread(n: int) -> int:
            return await blocking_io(n)

        async def main() -> list[int]:
            loop = asyncio.get_running_loop()
            loop.set_default_executor(ThreadPoolExecutor(2))  # fewer than the calls below
            calls = [app.run_async(uses_a_thread, n, workflow_id=f"t{n}") for n in range(6)]
            return await asyncio.wait_for(asyncio.gather(*calls), 30)

        assert asyncio.run(main()) == [0, 2, 4, 6, 8, 10]


def test_a_streaming_steps_outcome_never_waits_for_the_loops_default_threads(
    tmp_path: Path,
) -> None:
    """A step's outcome written with the stream chunks before it needs a thread: the
    engine's own, so user code holding every thread of the loop's default executor (here
    one, waiting for the run to end) cannot hold the run up."""
    with stalwart.Stalwart(f"sqlite:///{tmp_path / 'runs.db'}") as app:

        @app.step(name="speak")
        async def speak() -> str:
            stalwart.emit("hello ")
            stalwart.emit("world")
            return "spoken"

        @app.workflow(name="speaker")
        async def speaker() -> str:
            return await speak()

        async def main() -> str:
            loop = asyncio.get_running_loop()
            loop.set_default_executor(ThreadPoolExecutor(1))
            ended = threading.Event()
            holder = asyncio.ensure_future(asyncio.to_thread(ended.wait, 30))
            await asyncio.sleep(0)  # the default executor's one thread is taken
            try:
                return await asyncio.wait_for(app.run_async(speaker, workflow_id="s"), 20)
            finally:
                ended.set()
                await holder

        assert asyncio.run(main()) == "spoken"
        assert stalwart.stream_text(app.stream("s", follow=False)) == "hello world"


def _until(condition: Any, what: str) -> None:
    """Wait (20 s at most) for ``condition()``."""
    deadline = time.monotonic() + 20
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _give_up_on(app: stalwart.Stalwart, wf: Any, workflow_id: str, after: float) -> None:
    """``asyncio.run`` a caller that stops waiting for ``app.run_async`` after ``after`` s."""

    async def main() -> None:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(app.run_async(wf, workflow_id=workflow_id), after)

    asyncio.run(main())


def _given_back(app: stalwart.Stalwart, workflow_id: str) -> Any:
    """The run's row once no lease holds it."""
    _until(lambda: app._driver.row(workflow_id).lease_owner is None, "the run was not given back")
    return app._driver.row(workflow_id)


def _run_in_thread(app: stalwart.Stalwart, wf: Any, workflow_id: str) -> tuple[Any, list[Any]]:
    """A thread running ``app.run(wf)``, started, and what it returned or raised, once it did."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(app.run(wf, workflow_id=workflow_id))
        except BaseException as exc:
            outcome.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    return runner, outcome


def _declare_loop_tests(app: stalwart.Stalwart, entered: threading.Event) -> tuple[Any, Any]:
    """A workflow whose step waits on the loop (``slow``), and one that waits for an event."""

    @app.step(name="slow_step")
    async def slow_step() -> str:
        entered.set()
        await asyncio.sleep(0.5)
        return "slept"

    @app.workflow(name="slow")
    async def slow() -> str:
        return await slow_step()

    @app.workflow(name="waits")
    async def waits() -> Any:
        return await stalwart.wait_for_event_async("go")

    return slow, waits


def test_a_run_whose_callers_loop_ends_mid_step_is_given_back_not_failed(tmp_path: Path) -> None:
    """``asyncio.run`` ending (the caller's ``wait_for`` timed out) cancels the run's task on
    its way out: the run is given back, not failed, and completes when run again."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    entered = threading.Event()
    with stalwart.Stalwart(url) as app:
        slow, _ = _declare_loop_tests(app, entered)

        _give_up_on(app, slow, "s", 0.2)  # the run's task is cancelled as the loop closes
        assert entered.is_set()
        row = _given_back(app, "s")
        assert row.status == "running"  # neither failed nor needs_attention
        assert app.run(slow, workflow_id="s") == "slept"


def test_a_run_async_whose_caller_left_is_not_resumed_by_the_callers_thread(
    tmp_path: Path,
) -> None:
    """The caller stopped waiting while the run waited for an event: when the event comes,
    the run is left to a worker (or the next ``app.run``), not resumed on the closed loop."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with stalwart.Stalwart(url) as app:
        _, waits = _declare_loop_tests(app, threading.Event())

        _give_up_on(app, waits, "w", 0.3)
        assert app.handle("w").status() == "suspended"
        _until(  # its thread ends at its next look at the run
            lambda: "stalwart-run-w" not in {t.name for t in threading.enumerate()},
            "the caller's thread still waits for the run",
        )
        app.send_event("w", "go", {"n": 1})
        assert app.handle("w").status() in ("pending", "suspended")  # nobody took it
        assert app.run(waits, workflow_id="w") == {"n": 1}


def test_an_app_closed_during_app_run_of_an_async_workflow_gives_the_run_back(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    entered = threading.Event()
    app = stalwart.Stalwart(url)
    slow, _ = _declare_loop_tests(app, entered)
    runner, outcome = _run_in_thread(app, slow, "c")
    assert entered.wait(20)
    app.close()
    runner.join(20)
    assert len(outcome) == 1 and isinstance(outcome[0], RuntimeError), outcome
    assert "a worker, or the next app.run of it, takes it up" in str(outcome[0])
    with stalwart.Stalwart(url) as again:
        slow, _ = _declare_loop_tests(again, threading.Event())
        row = again._driver.row("c")
        assert (row.status, row.lease_owner) == ("running", None)  # given back before close
        assert again.run(slow, workflow_id="c") == "slept"


def test_a_waiter_left_on_a_closed_loop_does_not_break_later_runs(tmp_path: Path) -> None:
    with stalwart.Stalwart(f"sqlite:///{tmp_path / 'runs.db'}") as app:
        _, waits = _declare_loop_tests(app, threading.Event())

        @app.step(name="speaks")
        def speaks(n: int) -> int:
            stalwart.emit({"n": n})
            return n

        @app.workflow(name="plain")
        def plain(n: int) -> int:
            stalwart.emit("start")
            return speaks(n)

        handle = app.start(waits, workflow_id="w")
        loop = asyncio.new_event_loop()

        left: list[asyncio.Task[Any]] = []

        async def leave_a_waiter() -> None:
            left.append(loop.create_task(handle.result_async()))  # pending as its loop closes
            await asyncio.sleep(0.2)

        loop.run_until_complete(leave_a_waiter())
        assert not left[0].done()
        loop.close()
        assert [app.run(plain, n) for n in range(3)] == [0, 1, 2]


def test_children_of_a_run_async_run_execute_on_the_callers_loop(tmp_path: Path) -> None:
    with stalwart.Stalwart(f"sqlite:///{tmp_path / 'runs.db'}") as app:
        loops: list[int] = []

        @app.step(name="where")
        async def where() -> None:
            loops.append(id(asyncio.get_running_loop()))

        @app.workflow(name="child")
        async def child() -> int:
            await where()
            return 1

        @app.workflow(name="parent")
        async def parent() -> int:
            await where()
            return int(await stalwart.run_child_async(child, workflow_id="kid"))

        async def main() -> int:
            loops.append(id(asyncio.get_running_loop()))
            return int(await app.run_async(parent, workflow_id="p"))

        assert asyncio.run(main()) == 1
        assert len(loops) == 3 and len(set(loops)) == 1, loops


def test_a_loop_closing_under_a_workflow_that_swallows_everything_still_gives_it_back(
    tmp_path: Path,
) -> None:
    """The signal that gives the run back is sticky: a bare ``except:`` around the step
    cannot turn it into the run's result."""
    with stalwart.Stalwart(f"sqlite:///{tmp_path / 'runs.db'}") as app:

        @app.step(name="fetch")
        def fetch() -> Any:
            return asyncio.sleep(0.5, result="fetched")  # an awaitable: run on the loop

        @app.workflow(name="swallows")
        def swallows() -> str:
            try:
                return str(fetch())
            except:  # noqa: E722  (what the test is about)
                return "fallback"

        _give_up_on(app, swallows, "s", 0.2)
        row = _given_back(app, "s")
        assert row.status == "running"
        assert app.run(swallows, workflow_id="s") == "fetched"


def test_a_worker_whose_app_is_closed_under_it_takes_nothing_more(tmp_path: Path) -> None:
    """Closing the app while its worker serves: the run its loop gave back is not taken again
    (and charged an interrupted attempt) by that worker while the close waits for another
    run's task to end; the worker stops."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    awaiting, tidying = threading.Event(), threading.Event()

    def declare(app: stalwart.Stalwart) -> tuple[Any, Any]:
        @app.step(name="awaits", retry=stalwart.Retry(max_attempts=3))
        def awaits() -> Any:
            awaiting.set()
            return asyncio.sleep(1.0, result="ok")  # an awaitable: run on the app's loop

        @app.workflow(name="sync_flow")
        def sync_flow() -> Any:
            return awaits()

        @app.step(name="tidy")
        async def tidy() -> None:
            tidying.set()
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                await asyncio.sleep(1.5)  # a client's clean-up: the close waits for it
                raise

        @app.workflow(name="tidy_flow")
        async def tidy_flow() -> None:
            await tidy()

        return sync_flow, tidy_flow

    app = stalwart.Stalwart(url)
    sync_flow, tidy_flow = declare(app)
    worker = testing.worker(app, concurrency=4)
    serving = threading.Thread(target=_serve_quietly, args=(worker,), daemon=True)
    serving.start()
    app.start(sync_flow, workflow_id="g")
    app.start(tidy_flow, workflow_id="t")
    assert awaiting.wait(20) and tidying.wait(20)
    app.close()
    serving.join(20)
    assert not serving.is_alive()
    with stalwart.Stalwart(url) as again:
        sync_flow, _ = declare(again)
        row = again._driver.row("g")
        assert (row.status, row.lease_owner) == ("running", None)
        charged = [e for e in again.journal("g") if e.kind == "step" and e.status == "failed"]
        assert charged == []
        assert again.run(sync_flow, workflow_id="g") == "ok"


def _serve_quietly(worker: Any) -> None:
    with contextlib.suppress(stalwart.StalwartError):  # the store closes under it
        worker.serve()


def test_close_ends_another_threads_app_run_that_waits(tmp_path: Path) -> None:
    """An app closed while another thread's ``app.run`` waits for an event: that call ends
    (the run is left waiting, for a worker or the next ``app.run``) before ``close`` returns,
    rather than ``close`` waiting out its bound for it."""
    app = stalwart.Stalwart(f"sqlite:///{tmp_path / 'runs.db'}")

    @app.workflow(name="sync_waits")
    def sync_waits() -> Any:
        return stalwart.wait_for_event("go")

    runner, outcome = _run_in_thread(app, sync_waits, "sw")
    _until(lambda: app.handle("sw").status() == "suspended", "the run did not suspend")
    app.close()
    assert not runner.is_alive(), "close returned while app.run still waited"
    assert len(outcome) == 1 and isinstance(outcome[0], RuntimeError)
    assert "was closed while run 'sw' waited" in str(outcome[0])
