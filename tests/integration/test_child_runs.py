"""Child runs on every backend, executed by ``app.run`` with no worker: fan-out and fan-in,
ids stable across replay, refused ids, failures and cancellations carried to the parent, a
parent's deadline covering its children, retry and fork of a parent, and the read models."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

import pytest

import stalwart
from stalwart import testing
from stalwart._model import ErrorRecord

pytestmark = pytest.mark.timeout(60)


def declare(app: stalwart.Stalwart, flags: dict[str, Any]) -> dict[str, Any]:
    ran: list[int] = []

    @app.step()
    def square(x: int) -> int:
        ran.append(x)
        if flags.get("fail") == x:
            raise stalwart.NonRetryableError(f"no square for {x}")
        return x * x

    @app.workflow()
    def child(x: int) -> int:
        return square(x)

    @app.workflow()
    def waiting_child() -> Any:
        return stalwart.wait_for_event("go")

    @app.workflow()
    def fan(n: int) -> list[Any]:
        handles = [stalwart.start_child(child, i) for i in range(n)]
        return [[h.workflow_id for h in handles], [h.result() for h in handles]]

    @app.workflow()
    async def async_fan(n: int) -> list[int]:
        return list(await asyncio.gather(*(stalwart.run_child_async(child, i) for i in range(n))))

    @app.workflow()
    def catching(x: int) -> str:
        try:
            return str(stalwart.run_child(child, x))
        except stalwart.WorkflowFailed as failed:
            return f"{failed.workflow_id} {failed.cause_type}: {failed.cause_message}"

    @app.workflow()
    def pair(x: int) -> list[Any]:
        first = stalwart.start_child(child, x)
        second = stalwart.start_child(waiting_child)
        return [first.result(), second.result()]

    @app.workflow()
    def named(child_id: str) -> str:
        try:
            return stalwart.start_child(child, 1, workflow_id=child_id).workflow_id
        except stalwart.WorkflowAlreadyExists as refused:
            return f"refused: {refused}"

    @app.workflow()
    def chain() -> list[int]:
        first = stalwart.run_child(child, 1)
        middle = square(2)
        return [first, middle, stalwart.run_child(child, 3)]

    @app.workflow()
    def waits_on_one() -> Any:
        return stalwart.run_child(waiting_child)

    return {k: v for k, v in locals().items() if k not in ("app", "flags")}


def test_app_run_executes_a_fan_out_of_children_with_ids_stable_across_replay(
    app: stalwart.Stalwart,
) -> None:
    wf = declare(app, {})
    ids, results = app.run(wf["fan"], 5, workflow_id="p")
    assert ids == [f"p/{i}" for i in range(5)] and results == [i * i for i in range(5)]
    assert sorted(wf["ran"]) == list(range(5))  # each child's step ran once
    children = app.list_workflows(parent_id="p")
    assert sorted(c.workflow_id for c in children) == ids
    assert {(c.status, c.parent_id) for c in children} == {("completed", "p")}
    assert app.list_workflows(parent_id="p", limit=2)[0].workflow_id == "p/4"
    assert app.handle("p").status() == "completed"
    journal = app.journal("p")
    assert [e.kind for e in journal].count("child") == 10  # a start and an outcome each
    assert any(e.kind == "run" and e.name == "resumed" for e in journal)  # it replayed
    assert testing.store_of(app).get_run("p").parent_id is None


def test_async_workflows_fan_out_with_gather(app: stalwart.Stalwart) -> None:
    wf = declare(app, {})
    assert app.run(wf["async_fan"], 6, workflow_id="a") == [i * i for i in range(6)]
    assert len(app.list_workflows(parent_id="a")) == 6


def test_a_childs_failure_arrives_as_workflow_failed_with_its_error(app: stalwart.Stalwart) -> None:
    wf = declare(app, {"fail": 3})
    caught = app.run(wf["catching"], 3, workflow_id="c")
    assert caught.startswith("c/0 StepFailed") and "no square for 3" in caught
    with pytest.raises(stalwart.WorkflowFailed) as failed:
        app.run(wf["pair"], 3, workflow_id="f")
    assert failed.value.cause_type == "WorkflowFailed"
    assert "no square for 3" in failed.value.cause_message
    # the parent's failure cancelled the sibling that still waited
    assert app.handle("f/1").status() == "cancelled"


def test_an_id_owned_by_another_workflow_or_parent_is_refused(app: stalwart.Stalwart) -> None:
    wf = declare(app, {})
    app.start(wf["waiting_child"], workflow_id="taken")
    assert app.run(wf["named"], "taken", workflow_id="n1").startswith("refused: run 'taken'")
    assert app.run(wf["named"], "mine", workflow_id="n2") == "mine"
    assert app.run(wf["named"], "mine", workflow_id="n3").startswith("refused: run 'mine'")


def test_retry_of_a_parent_retries_its_failed_and_cancelled_children(
    app: stalwart.Stalwart,
) -> None:
    flags: dict[str, Any] = {"fail": 4}
    wf = declare(app, flags)
    with pytest.raises(stalwart.WorkflowFailed):
        app.run(wf["pair"], 4, workflow_id="r")
    assert [app.handle(c).status() for c in ("r/0", "r/1")] == ["failed", "cancelled"]
    flags.clear()
    app.retry("r")
    assert [app.handle(c).status() for c in ("r/0", "r/1")] == ["pending", "pending"]
    app.send_event("r/1", "go", "went")
    assert app.run(wf["pair"], 4, workflow_id="r") == [16, "went"]
    assert sorted(c.workflow_id for c in app.list_workflows(parent_id="r")) == ["r/0", "r/1"]


def test_a_fork_reuses_finished_children_and_starts_later_ones_under_its_id(
    app: stalwart.Stalwart,
) -> None:
    wf = declare(app, {})
    assert app.run(wf["chain"], workflow_id="k") == [1, 4, 9]
    third = next(e.seq for e in app.journal("k") if e.kind == "child" and e.seq != 1)
    fork = app.fork("k", from_seq=third, new_id="kf")
    assert app.run(wf["chain"], workflow_id=fork.workflow_id) == [1, 4, 9]
    assert [c.workflow_id for c in app.list_workflows(parent_id="kf")] == ["kf/2"]
    assert sorted(wf["ran"]) == [1, 2, 3, 3]  # child 1 and the step were reused, child 3 ran again


def test_a_waiting_parent_describes_the_child_it_waits_on(app: stalwart.Stalwart) -> None:
    wf = declare(app, {})
    outcome: list[Any] = []
    runner = threading.Thread(
        target=lambda: outcome.append(app.run(wf["waits_on_one"], workflow_id="w"))
    )
    runner.start()
    try:
        deadline = time.monotonic() + 30
        while _waiting_for(app, "w") != "child w/0":
            assert time.monotonic() < deadline, app.list_workflows()
            time.sleep(0.01)
        app.send_event("w/0", "go", 7)
    finally:
        runner.join(30)
    assert outcome == [7]


def _waiting_for(app: stalwart.Stalwart, workflow_id: str) -> str | None:
    try:
        return app.describe(workflow_id).waiting_for
    except stalwart.WorkflowNotFound:
        return None


def test_a_parents_deadline_covers_its_children(store_url: str) -> None:
    with stalwart.Stalwart(store_url) as app:  # a real clock: the deadline passes by itself

        @app.workflow()
        def sleeper() -> str:
            stalwart.sleep(3600)
            return "woke"

        @app.workflow(timeout=0.3)
        def hurried() -> str:
            return str(stalwart.run_child(sleeper))

        with pytest.raises(stalwart.WorkflowCancelled):
            app.run(hurried, workflow_id="t")
        assert app.handle("t/0").status() == "cancelled"
        store = testing.store_of(app)
        assert store.get_run("t/0").deadline == store.get_run("t").deadline


def test_show_prints_a_runs_parent_and_children(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from stalwart._cli import cli

    url = f"sqlite:///{tmp_path / 'show.db'}"
    with stalwart.Stalwart(url) as app:
        wf = declare(app, {})
        app.run(wf["fan"], 2, workflow_id="s")
    parent = CliRunner().invoke(cli, ["--url", url, "show", "s"])
    assert "children   s/0 (completed), s/1 (completed)" in parent.output, parent.output
    child = CliRunner().invoke(cli, ["--url", url, "show", "s/1"])
    assert f"parent     s (stalwart --url {url} show s)" in child.output, child.output
    by_env = CliRunner().invoke(cli, ["show", "s/1"], env={"STALWART_URL": url})
    assert "parent     s (stalwart show s)" in by_env.output, by_env.output


def test_ls_and_the_http_api_list_the_children_of_a_run(tmp_path: Any) -> None:
    import asyncio
    import json

    import httpx
    from click.testing import CliRunner

    from stalwart._cli import cli
    from stalwart._ui.asgi import create_app

    url = f"sqlite:///{tmp_path / 'ls.db'}"
    with stalwart.Stalwart(url) as app:
        wf = declare(app, {})
        app.run(wf["fan"], 3, workflow_id="p")
        app.run(wf["fan"], 1, workflow_id="q")
        listed = CliRunner().invoke(cli, ["--url", url, "ls", "--parent", "p", "--json"])
        rows = [json.loads(line) for line in listed.stdout.splitlines()]
        assert sorted(r["workflow_id"] for r in rows) == ["p/0", "p/1", "p/2"]
        assert {r["parent_id"] for r in rows} == {"p"}
        paged = CliRunner().invoke(cli, ["--url", url, "ls", "--parent", "p", "--limit", "2"])
        assert "1 more: add --before" in paged.output

        async def page() -> Any:
            transport = httpx.ASGITransport(app=create_app(app, token="t"))
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
                return (await c.get("/api/v1/runs", params={"parent_id": "q"})).json()

        answer = asyncio.run(page())
        assert [r["workflow_id"] for r in answer["runs"]] == ["q/0"]
        assert answer["counts"]["completed"] == 1


def test_one_explicit_id_for_two_starts_of_a_parent_is_refused(app: stalwart.Stalwart) -> None:
    wf = declare(app, {})

    @app.workflow()
    def twice() -> str:
        stalwart.run_child(wf["child"], 1, workflow_id="fixed")
        try:
            stalwart.run_child(wf["child"], 2, workflow_id="fixed")
        except stalwart.WorkflowAlreadyExists as refused:
            return str(refused)
        return "not refused"

    answer = app.run(twice, workflow_id="tw")
    assert answer.startswith("run 'fixed' is already the child this run started at position 0")
    assert app.run(twice, workflow_id="tw") == answer  # its replay takes the same branch


def test_a_retry_leaves_a_child_failure_the_parent_went_on_from_as_it_was(
    app: stalwart.Stalwart,
) -> None:
    flags: dict[str, Any] = {"fail": 5}
    wf = declare(app, flags)
    late = {"fails": True}

    @app.step()
    def last() -> str:
        if late["fails"]:
            raise stalwart.NonRetryableError("the last step failed")
        return "done"

    @app.workflow()
    def recovers() -> list[str]:
        try:
            got = str(stalwart.run_child(wf["child"], 5))
        except stalwart.WorkflowFailed:
            got = "handled"
        return [got, last()]

    with pytest.raises(stalwart.WorkflowFailed):
        app.run(recovers, workflow_id="h")
    flags.clear()
    late["fails"] = False
    app.retry("h")
    assert app.handle("h/0").status() == "failed"  # its failure was handled: not rerun
    assert app.run(recovers, workflow_id="h") == ["handled", "done"]  # the same path
    assert wf["ran"] == [5]


def test_a_cancel_that_stopped_before_the_children_is_finished_by_the_next(
    app: stalwart.Stalwart,
) -> None:
    wf = declare(app, {})
    outcome: list[Any] = []

    def run() -> None:
        try:
            app.run(wf["waits_on_one"], workflow_id="o")
        except stalwart.WorkflowCancelled as cancelled:
            outcome.append(cancelled)

    runner = threading.Thread(target=run)
    runner.start()
    try:
        deadline = time.monotonic() + 30
        while _waiting_for(app, "o") != "child o/0" or _waiting_for(app, "o/0") != "event go":
            assert time.monotonic() < deadline, app.list_workflows()
            time.sleep(0.01)
        # the parent's cancel commits, then its process dies before cancelling the child
        from stalwart._store import Entry

        entry = Entry(kind="operator", name="cancel", status="completed", by="crashed")
        error = ErrorRecord("WorkflowCancelled", "cancelled by crashed")
        store = testing.store_of(app)
        assert store.cancel_run("o", now=time.time(), error=error, entry=entry) == "cancelled"
        assert app.handle("o/0").status() == "suspended"
        app.cancel("o", by="ops")  # not refused: it cancels what the first one left
        assert app.handle("o/0").status() == "cancelled"
        with pytest.raises(stalwart.InvalidOperation, match="nothing to cancel"):
            app.cancel("o", by="ops")
    finally:
        with contextlib.suppress(stalwart.InvalidOperation):
            app.send_event("o/0", "go", 1)
        runner.join(30)
    assert len(outcome) == 1


def test_app_run_of_a_parent_whose_child_needs_an_operator_raises_instead_of_waiting(
    app: stalwart.Stalwart,
) -> None:
    wf = declare(app, {})
    budget = stalwart.Budget(max_steps=1)

    @app.workflow(budget=budget)
    def greedy() -> int:
        return wf["square"](2) + wf["square"](3)  # the second step is over its budget

    @app.workflow()
    def boss() -> int:
        return int(stalwart.run_child(greedy, workflow_id="greedy"))

    with pytest.raises(stalwart.NeedsAttention) as stuck:
        app.run(boss, workflow_id="boss")
    assert stuck.value.workflow_id == "greedy"
    assert app.handle("boss").status() == "suspended"  # it still waits, for the operator
    app.retry("greedy", budget=stalwart.Budget(max_steps=5))
    assert app.run(boss, workflow_id="boss") == 13


def test_a_fork_reuses_a_child_failure_the_parent_recorded_before_from_seq(
    app: stalwart.Stalwart,
) -> None:
    flags: dict[str, Any] = {"fail": 7}
    wf = declare(app, flags)

    @app.workflow()
    def then_more() -> list[Any]:
        try:
            got: Any = stalwart.run_child(wf["child"], 7)
        except stalwart.WorkflowFailed as failed:
            got = failed.workflow_id
        return [got, wf["square"](2)]

    assert app.run(then_more, workflow_id="fm") == ["fm/0", 4]
    flags.clear()
    step = next(e.seq for e in app.journal("fm") if e.kind == "step")
    fork = app.fork("fm", from_seq=step, new_id="fm2")
    assert app.run(then_more, workflow_id=fork.workflow_id) == ["fm/0", 4]  # the same path
    assert app.list_workflows(parent_id="fm2") == []  # no child started again
    assert wf["ran"] == [7, 2, 2]


def test_a_child_started_inside_a_step_fails_that_step_at_once(app: stalwart.Stalwart) -> None:
    wf = declare(app, {})

    @app.step()
    def misplaced() -> int:
        return int(stalwart.run_child(wf["child"], 2))

    @app.workflow()
    def outer() -> int:
        return misplaced()

    with pytest.raises(stalwart.WorkflowFailed, match="after 1 attempt.*child runs belong"):
        app.run(outer, workflow_id="m")
    assert app.list_workflows(parent_id="m") == []


def test_a_retry_redrives_a_gathered_child_that_failed_before_its_sibling_ended(
    app: stalwart.Stalwart,
) -> None:
    flags: dict[str, Any] = {"fail": 1}
    wf = declare(app, flags)

    @app.workflow()
    async def pair_of_children() -> list[int]:
        # The sibling looks at its child only once the first child's end is recorded: two
        # tasks' child outcomes are journaled off the loop, in no order of their own.
        first_ended = asyncio.Event()

        async def first() -> int:
            try:
                return int(await stalwart.run_child_async(wf["child"], 1))
            finally:
                first_ended.set()

        async def second() -> int:
            handle = await stalwart.start_child_async(wf["child"], 2)
            await first_ended.wait()
            return int(await handle.result_async())

        results = await asyncio.gather(first(), second(), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return list(results)

    with pytest.raises(stalwart.WorkflowFailed):
        app.run(pair_of_children, workflow_id="g")
    kinds = [(e.kind, e.status) for e in app.journal("g") if e.seq is not None]
    assert kinds[-1] == ("child", "completed")  # the sibling's end came after the failure
    flags.clear()
    app.retry("g")
    assert app.handle("g/t0.0").status() == "pending"
    assert app.run(pair_of_children, workflow_id="g") == [1, 4]


def test_a_retried_fork_does_not_wait_on_a_child_it_does_not_own(app: stalwart.Stalwart) -> None:
    flags: dict[str, Any] = {"fail": 6}
    wf = declare(app, flags)

    @app.workflow()
    def one_child() -> int:
        return int(stalwart.run_child(wf["child"], 6))

    with pytest.raises(stalwart.WorkflowFailed):
        app.run(one_child, workflow_id="src")
    end = max(e.seq or 0 for e in app.journal("src"))
    fork = app.fork("src", from_seq=end + 1, new_id="src-fork")  # reuses the child's failure
    with pytest.raises(stalwart.WorkflowFailed, match="src/0"):
        app.run(one_child, workflow_id=fork.workflow_id)
    flags.clear()
    app.retry("src-fork")  # src/0 is src's child: the fork's copy of its failure is final
    with pytest.raises(stalwart.WorkflowFailed, match="src/0"):
        app.run(one_child, workflow_id="src-fork")
    assert app.handle("src/0").status() == "failed"


def _fail_the_reopening_of(app: stalwart.Stalwart, workflow_id: str) -> None:
    """A store fault: the update that makes ``workflow_id`` pending again fails."""
    store = testing.store_of(app)
    if type(store).__name__ == "PostgresStore":
        testing.execute_sql(
            store,
            "CREATE FUNCTION refuse_reopen() RETURNS trigger AS $$ BEGIN "
            "RAISE EXCEPTION 'injected fault'; END $$ LANGUAGE plpgsql",
        )
        testing.execute_sql(
            store,
            "CREATE TRIGGER refuse_reopen BEFORE UPDATE ON runs FOR EACH ROW WHEN "
            f"(NEW.workflow_id = '{workflow_id}' AND NEW.status = 'pending') "
            "EXECUTE FUNCTION refuse_reopen()",
        )
    else:
        testing.execute_sql(
            store,
            "CREATE TRIGGER refuse_reopen BEFORE UPDATE ON runs FOR EACH ROW WHEN "
            f"NEW.workflow_id = '{workflow_id}' AND NEW.status = 'pending' "
            "BEGIN SELECT RAISE(ABORT, 'injected fault'); END",
        )


def test_a_retry_that_fails_to_reopen_the_parent_reopens_none_of_its_children(
    app: stalwart.Stalwart,
) -> None:
    flags: dict[str, Any] = {"fail": 4}
    wf = declare(app, flags)
    with pytest.raises(stalwart.WorkflowFailed):
        app.run(wf["pair"], 4, workflow_id="r")
    journals = {c: len(app.journal(c)) for c in ("r", "r/0", "r/1")}
    _fail_the_reopening_of(app, "r")
    with pytest.raises(stalwart.StoreError):
        app.retry("r")
    # one transaction: the parent's failure to reopen left its children as they were
    assert [app.handle(c).status() for c in ("r", "r/0", "r/1")] == [
        "failed",
        "failed",
        "cancelled",
    ]
    assert {c: len(app.journal(c)) for c in journals} == journals


def test_a_retry_redrives_the_child_a_parent_failed_through_after_its_rollback(
    app: stalwart.Stalwart,
) -> None:
    flags: dict[str, Any] = {"fail": 6}
    wf = declare(app, flags)
    undone: list[str] = []

    @app.step(compensate=undone.append)
    def book() -> str:
        return "booked"

    @app.workflow()
    def trip() -> list[Any]:
        return [book(), stalwart.run_child(wf["child"], 6)]

    with pytest.raises(stalwart.WorkflowFailed):
        app.run(trip, workflow_id="b")
    assert undone == ["booked"]  # the rollback marked the step compensated after the failure
    flags.clear()
    app.retry("b")
    assert app.handle("b/1").status() == "pending"
    assert app.run(trip, workflow_id="b") == ["booked", 36]


def test_two_gathered_starts_of_one_explicit_id_refuse_the_second(app: stalwart.Stalwart) -> None:
    """Two tasks start a child under one explicit id at once (their starts are written off
    the loop, so both are under way together): the second is refused, as it is when the
    first's start is already recorded, and a replay says the same."""

    @app.workflow(name="tens")
    async def tens(x: int) -> int:
        return x * 10

    @app.workflow()
    async def same_id_twice() -> list[Any]:
        async def one(x: int) -> Any:
            try:
                return await stalwart.run_child_async(tens, x, workflow_id="fixed")
            except stalwart.WorkflowAlreadyExists:
                return "refused"

        return list(await asyncio.gather(one(1), one(2)))

    assert app.run(same_id_twice, workflow_id="p") == [10, "refused"]
    assert app.run(same_id_twice, workflow_id="p") == [10, "refused"]
    starts = [e.status for e in app.journal("p") if e.kind == "child"]
    assert starts == ["scheduled", "completed"]


def test_two_tasks_awaiting_one_child_record_its_end_once(app: stalwart.Stalwart) -> None:
    @app.workflow(name="kid")
    async def kid() -> int:
        return 7

    @app.workflow()
    async def both_wait() -> list[int]:
        handle = await stalwart.start_child_async(kid)
        return list(await asyncio.gather(handle.result_async(), handle.result_async()))

    assert app.run(both_wait, workflow_id="p") == [7, 7]
    ends = [(e.seq, e.status) for e in app.journal("p") if e.kind == "child"]
    assert ends == [(1, "scheduled"), (1, "completed")]


def test_a_timeout_during_the_record_of_a_failed_childs_end_raises_it_not_the_failure(
    app: stalwart.Stalwart,
) -> None:
    """A timeout fires while the parent records that its child failed: the end is recorded,
    and the call raises the cancellation (``TimeoutError``), not ``WorkflowFailed``, so code
    that catches the child's failure does not run on past its timeout."""
    tasks: list[asyncio.Task[Any]] = []
    store: Any = testing.store_of(app)
    real = store.append

    def held_until_cancelled(workflow_id: str, entry: Any, **kwargs: Any) -> Any:
        if workflow_id == "p" and entry.kind == "child" and entry.status == "failed":
            deadline = time.monotonic() + 30
            while tasks[-1].cancelling() == 0:  # the write waits until the timeout fired
                assert time.monotonic() < deadline, "the timeout never fired"
                time.sleep(0.01)
        return real(workflow_id, entry, **kwargs)

    store.append = held_until_cancelled

    @app.workflow(name="bad")
    async def bad() -> int:
        raise ValueError("boom")

    @app.workflow()
    async def parent() -> str:
        handle = await stalwart.start_child_async(bad)
        tasks.append(asyncio.current_task())  # type: ignore[arg-type]  # (this execution's)
        try:
            async with asyncio.timeout(0.2):
                with contextlib.suppress(stalwart.WorkflowFailed):
                    await handle.result_async()
                return "went on past its timeout"
        except TimeoutError:
            return "timed out"

    assert app.run(parent, workflow_id="p") == "timed out"
    ends = [e.status for e in app.journal("p") if e.kind == "child"]
    assert ends == ["scheduled", "failed"]
