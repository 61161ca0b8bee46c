"""The shared context on every backend: versions and compare-and-set, the journaled answers a
replay sees, plain calls in steps, the history of writes, and bad input."""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import stalwart
from stalwart._store.postgres import PostgresStore
from stalwart.testing import store_of
from store_urls import postgres_schema_url


@pytest.fixture
def app(store_url: str) -> Iterator[stalwart.Stalwart]:
    """Runs here sleep for real between executions, so these tests use the real clock."""
    with stalwart.Stalwart(store_url) as instance:
        yield instance


def shared_entries(app: stalwart.Stalwart, wid: str) -> list[tuple[str, Any]]:
    return [(e.name, e.output) for e in app.journal(wid) if e.kind == "shared"]


def test_versions_start_at_zero_and_count_writes(app: stalwart.Stalwart) -> None:
    assert app.shared_get("plan") == stalwart.Versioned(None, 0)
    assert app.shared_set("plan", ["draft"], by="alice") == stalwart.Versioned(["draft"], 1)
    assert app.shared_set("plan", ["stale"], if_version=0, by="bob") is None
    assert app.shared_set("plan", ["draft", "review"], if_version=1, by="bob") == (
        stalwart.Versioned(["draft", "review"], 2)
    )
    assert app.shared_get("plan") == stalwart.Versioned(["draft", "review"], 2)
    history = app.shared_history("plan")
    assert [(w.key, w.version, w.value, w.by) for w in history] == [
        ("plan", 1, ["draft"], "alice"),
        ("plan", 2, ["draft", "review"], "bob"),
    ]
    assert all(isinstance(w, stalwart.SharedWrite) for w in history)
    assert all(w.at.tzinfo is dt.UTC for w in history) and history[0].at <= history[1].at
    app.shared_set("plan", None)  # no by: the process's user
    assert app.shared_history("plan")[-1].by
    assert app.shared_get("plan") == stalwart.Versioned(None, 3)  # written as None: version 3


def test_values_round_trip_through_the_codec(app: stalwart.Stalwart) -> None:
    value = {"when": dt.datetime(2026, 1, 2, tzinfo=dt.UTC), "ids": (1, 2), "tags": {"a"}}
    assert app.shared_set("doc", value).value == value  # type: ignore[union-attr]
    assert app.shared_get("doc").value == value
    assert app.shared_history("doc")[0].value == value


def test_a_replay_sees_the_recorded_reads_and_writes(app: stalwart.Stalwart) -> None:
    for n in range(1, 4):
        app.shared_set("plan", f"v{n}", by="setup")

    @app.step
    def another_agent_writes() -> None:
        app.shared_set("plan", "v4", by="other")
        app.shared_set("plan", "v5", by="other")

    @app.workflow
    def reader() -> list[Any]:
        first = stalwart.shared_get("plan")  # version 3
        lost = stalwart.shared_set("plan", "late", if_version=2)  # lost: None
        another_agent_writes()  # moves the key to version 5
        stalwart.sleep(0.01)  # suspends; the run replays from the top when it wakes
        again = stalwart.shared_get("plan")  # a new read: version 5
        return [first.version, first.value, lost, again.version, again.value]

    assert app.run(reader, workflow_id="r") == [3, "v3", None, 5, "v5"]
    lifecycle = [e.name for e in app.journal("r") if e.kind == "run"]
    assert lifecycle == ["started", "suspended", "resumed", "finished"]
    # After the wake the replay returned the recorded read (version 3, though the key was at 5)
    # and the recorded lost write, and wrote nothing again.
    assert shared_entries(app, "r") == [
        ("get plan", {"version": 3, "value": "v3"}),
        ("set plan", None),
        ("get plan", {"version": 5, "value": "v5"}),
    ]
    assert [w.by for w in app.shared_history("plan")] == ["setup"] * 3 + ["other"] * 2


def test_a_workflows_write_is_made_once_and_kept_with_its_run_id(
    app: stalwart.Stalwart,
) -> None:
    @app.workflow
    def planner() -> list[int]:
        current = stalwart.shared_get("plan")
        made = stalwart.shared_set("plan", "mine", if_version=current.version)
        assert made is not None
        stalwart.sleep(0.01)
        return [current.version, made.version]

    assert app.run(planner, workflow_id="p") == [0, 1]
    assert [(w.version, w.value, w.by) for w in app.shared_history("plan")] == [(1, "mine", "p")]
    assert shared_entries(app, "p")[1] == ("set plan", {"version": 1, "value": "mine"})


def test_a_cas_retry_loop_in_a_workflow(app: stalwart.Stalwart) -> None:
    @app.step
    def bump_behind_its_back() -> None:
        app.shared_set("count", 100, by="other")

    @app.workflow
    def add_one() -> int:
        tries = 0
        while True:
            current = stalwart.shared_get("count")
            if tries == 0:
                bump_behind_its_back()  # the first compare-and-set will lose
            tries += 1
            if stalwart.shared_set("count", (current.value or 0) + 1, if_version=current.version):
                return tries

    assert app.run(add_one, workflow_id="a") == 2
    assert app.shared_get("count") == stalwart.Versioned(101, 2)


def test_a_fork_reuses_the_answers_before_its_seq_and_asks_again_after(
    app: stalwart.Stalwart,
) -> None:
    @app.workflow
    def planner() -> int | None:
        current = stalwart.shared_get("plan")  # seq 1
        made = stalwart.shared_set("plan", "mine", if_version=current.version)  # seq 2
        return None if made is None else made.version

    assert app.run(planner, workflow_id="p") == 1
    app.fork("p", from_seq=3, new_id="reuses-both")
    assert app.run(planner, workflow_id="reuses-both") == 1  # the recorded write, not a new one
    app.fork("p", from_seq=2, new_id="writes-again")
    # It reuses the read of version 0, so its compare-and-set runs again and loses.
    assert app.run(planner, workflow_id="writes-again") is None
    assert [(w.version, w.by) for w in app.shared_history("plan")] == [(1, "p")]


def test_in_a_step_the_calls_are_plain_store_calls(app: stalwart.Stalwart) -> None:
    calls = Counter[str]()

    @app.step(retry=stalwart.Retry(max_attempts=2, initial_delay=0.0, jitter=False))
    def writer() -> list[Any]:
        calls["writer"] += 1
        made = stalwart.shared_set("plan", f"try {calls['writer']}")
        seen = stalwart.shared_get("plan")
        if calls["writer"] == 1:
            raise RuntimeError("flaky")  # the retry writes again: a step runs at least once
        return [made.version if made else None, seen.version]

    @app.workflow
    def wf() -> list[Any]:
        return writer()

    assert app.run(wf, workflow_id="s") == [2, 2]
    assert [(w.version, w.by) for w in app.shared_history("plan")] == [(1, "s"), (2, "s")]
    assert shared_entries(app, "s") == []  # not journaled by the workflow


def test_async_workflows_call_the_sync_functions(app: stalwart.Stalwart) -> None:
    @app.workflow
    async def agent() -> list[Any]:
        current = stalwart.shared_get("plan")
        made = stalwart.shared_set("plan", {"step": 1}, if_version=current.version)
        await stalwart.sleep_async(0.01)
        return [current.version, made.version if made else None]

    assert app.run(agent, workflow_id="aa") == [0, 1]
    assert app.shared_get("plan") == stalwart.Versioned({"step": 1}, 1)
    assert len(shared_entries(app, "aa")) == 2


def test_a_replay_that_asks_for_another_key_diverges(app: stalwart.Stalwart) -> None:
    keys = ["plan"]

    @app.step
    def rename() -> None:
        keys[0] = "other"  # the code the replay runs asks for another key at position 0

    @app.workflow
    def diverging() -> int:
        version = stalwart.shared_get(keys[0]).version
        rename()
        stalwart.sleep(0.01)
        return version

    with pytest.raises(stalwart.NeedsAttention, match="diverged"):
        app.run(diverging, workflow_id="d")
    assert app.handle("d").status() == "needs_attention"


@pytest.mark.parametrize("damage", [b"J5", b'J{"version": -1, "value": 1}', b"Jnull", b"X?"])
def test_a_damaged_recorded_answer_is_a_corrupt_record(
    app: stalwart.Stalwart, raw_sql: Any, damage: bytes
) -> None:
    stop = {"on": True}

    @app.workflow(name="agent")
    def agent() -> int:
        seen = stalwart.shared_get("plan")
        if stop["on"]:
            raise KeyboardInterrupt  # the process dies after the read was journaled
        return seen.version

    with pytest.raises(KeyboardInterrupt):
        app.run(agent, workflow_id="w")
    stop["on"] = False
    raw_sql(app, "UPDATE journal SET output = :v WHERE kind = 'shared'", {"v": damage})
    with pytest.raises(stalwart.CorruptRecord, match="seq 1") as info:
        app.run(agent, workflow_id="w")
    assert (info.value.workflow_id, info.value.seq) == ("w", 1)
    assert app.handle("w").status() == "needs_attention"


def test_bad_input_is_refused_in_one_line(app: stalwart.Stalwart) -> None:
    for call in (
        lambda: app.shared_get(""),
        lambda: app.shared_set(3, "x"),  # type: ignore[arg-type]
        lambda: app.shared_history(None),  # type: ignore[arg-type]
    ):
        with pytest.raises(stalwart.UsageError, match="a shared key is a non-empty str"):
            call()
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(stalwart.UsageError, match=r"if_version=.*an int >= 0") as info:
            app.shared_set("k", 1, if_version=bad)  # type: ignore[arg-type]
        assert "\n" not in str(info.value)
    with pytest.raises(stalwart.UsageError, match="by="):
        app.shared_set("k", 1, by="")
    with pytest.raises(stalwart.SerializationError, match=r"app.shared_set\('k'\).*object"):
        app.shared_set("k", object())
    with pytest.raises(RuntimeError, match=r"outside a run use app.shared_get"):
        stalwart.shared_get("k")
    with pytest.raises(RuntimeError, match=r"outside a run use app.shared_set"):
        stalwart.shared_set("k", 1)
    assert app.shared_history("k") == []


def test_an_unencodable_value_in_a_workflow_raises_there(app: stalwart.Stalwart) -> None:
    @app.workflow
    def wf() -> str:
        try:
            stalwart.shared_set("k", object())
        except stalwart.SerializationError as exc:
            return str(exc)
        return "written"

    message = app.run(wf, workflow_id="u")
    assert "run 'u': stalwart.shared_set('k')" in message and "object" in message
    assert app.shared_history("k") == [] and shared_entries(app, "u") == []


def test_pickle_apps_store_any_picklable_value(store_url: str) -> None:
    with stalwart.Stalwart(store_url, serializer="pickle") as app:
        value = Counter({"a": 2})
        assert app.shared_set("c", value) == stalwart.Versioned(value, 1)
        assert app.shared_get("c").value == value


def test_apps_in_threads_racing_on_one_key_lose_no_update(shared_url: str) -> None:
    agents, rounds = 3, 10
    apps = [stalwart.Stalwart(shared_url) for _ in range(agents)]
    try:

        def declare(app: stalwart.Stalwart) -> Any:
            @app.workflow(name="increment")
            def increment(n: int) -> int:
                lost = 0
                for _ in range(n):
                    while True:  # the compare-and-set retry loop
                        current = stalwart.shared_get("counter")
                        value = (current.value or 0) + 1
                        if stalwart.shared_set("counter", value, if_version=current.version):
                            break
                        lost += 1
                return lost

            return increment

        results: list[Any] = []

        def agent(i: int) -> None:
            increment = declare(apps[i])
            results.append(apps[i].run(increment, rounds, workflow_id=f"agent-{i}"))

        threads = [threading.Thread(target=agent, args=(i,)) for i in range(agents)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=90)
        assert len(results) == agents
        history = apps[0].shared_history("counter")
        assert [w.version for w in history] == list(range(1, agents * rounds + 1))
        assert [w.value for w in history] == [w.version for w in history]
        assert Counter(w.by for w in history) == {f"agent-{i}": rounds for i in range(agents)}
    finally:
        for app in apps:
            app.close()


# -- PostgreSQL: a write retried after a lost acknowledgement --------------------------------


@pytest.fixture
def pg_url() -> Iterator[str]:
    yield from postgres_schema_url()


@contextmanager
def _first_ack_lost(store: PostgresStore) -> Iterator[list[int]]:
    """The first ``write_shared`` commits, then its connection reports being lost."""
    import psycopg

    real_connection, real_write = store._connection, store.write_shared
    armed, lost = threading.local(), []

    @contextmanager
    def flaky() -> Iterator[Any]:
        with real_connection() as conn:
            yield conn
        if getattr(armed, "on", False) and not lost:
            lost.append(1)
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    def write_shared(*args: Any, **kwargs: Any) -> Any:
        armed.on = True
        try:
            return real_write(*args, **kwargs)
        finally:
            armed.on = False

    store._connection = flaky  # type: ignore[method-assign]
    store.write_shared = write_shared  # type: ignore[method-assign]
    try:
        yield lost
    finally:
        store._connection = real_connection  # type: ignore[method-assign]
        store.write_shared = real_write  # type: ignore[method-assign]


def test_a_write_whose_acknowledgement_was_lost_is_made_once(pg_url: str) -> None:
    with stalwart.Stalwart(pg_url) as app:
        store = store_of(app)
        assert isinstance(store, PostgresStore)
        with _first_ack_lost(store) as lost:
            assert app.shared_set("plan", "a", by="alice") == stalwart.Versioned("a", 1)
        assert lost == [1]

        @app.workflow
        def writer() -> int | None:
            made = stalwart.shared_set("plan", "b", if_version=1)
            return None if made is None else made.version

        with _first_ack_lost(store) as lost:
            assert app.run(writer, workflow_id="w") == 2
        assert lost == [1]
        assert [(w.version, w.by) for w in app.shared_history("plan")] == [(1, "alice"), (2, "w")]
        assert shared_entries(app, "w") == [("set plan", {"version": 2, "value": "b"})]


def test_show_says_what_each_shared_call_answered(tmp_path: Any) -> None:
    from stalwart._format import timeline

    with stalwart.Stalwart(f"sqlite:///{tmp_path / 'show.db'}") as app:

        @app.workflow()
        def editor() -> Any:
            seen = stalwart.shared_get("plan")
            stalwart.shared_set("plan", ["a"], if_version=seen.version)
            return stalwart.shared_set("plan", ["b"], if_version=seen.version)

        assert app.run(editor, workflow_id="ed") is None
        details = [
            line.split("  ")[-1].strip() for line in timeline(app.journal("ed")).lines()[2:5]
        ]
        assert details == [
            "never written (version 0)",
            'version 1: ["a"]',
            "not written: the version moved since it was read",
        ]
