"""An async workflow's durable wait never holds the event loop while its write waits for the
database: the app's async runs share that loop, so a wait stuck behind another writer's lock
(another process's write on SQLite, a row lock on PostgreSQL) would stall every one of them.
The write is made by a thread of the engine's, and the loop goes on meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

import stalwart
from store_urls import POSTGRES_URL

pytestmark = pytest.mark.timeout(90)

WAIT_S = 30.0  # for what surely happens
LOOK_S = 5.0  # how long the loop is given to run another task while the lock is held

# Each kind of wait, with a timeout already up: it opens (the write the lock holds back), then
# ends at once with its timer, so the run completes.
WAITS: dict[str, Callable[[], Awaitable[Any]]] = {
    "sleep": lambda: stalwart.sleep_async(0),
    "event": lambda: stalwart.wait_for_event_async("never", timeout=0),
    "approval": lambda: stalwart.request_approval_async("ship it?", timeout=0),
}


@contextlib.contextmanager
def writer_lock(url: str, workflow_id: str) -> Iterator[None]:
    """Another writer holding what the run's next write needs: SQLite's write lock (as
    another process writing), or the run's row on PostgreSQL (as another worker's write)."""
    if url.startswith("sqlite:///"):
        other = sqlite3.connect(url[len("sqlite:///") :], isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            yield
            other.execute("ROLLBACK")
        finally:
            other.close()
        return
    import psycopg

    schema = parse_qs(urlsplit(url).query)["schema"][0]
    with psycopg.connect(POSTGRES_URL, autocommit=False) as conn:
        conn.execute(f"SET search_path TO {schema}")
        locked = conn.execute(
            "SELECT 1 FROM runs WHERE workflow_id = %s FOR UPDATE", (workflow_id,)
        ).fetchall()
        assert locked == [(1,)]
        yield
        conn.rollback()


@pytest.mark.parametrize("kind", sorted(WAITS))
def test_an_async_wait_held_back_by_another_writer_leaves_the_loop_to_other_tasks(
    shared_url: str, kind: str
) -> None:
    began, armed, go, ticked, entered = (threading.Event() for _ in range(5))
    with stalwart.Stalwart(shared_url) as app:
        store: Any = app._runtime.store
        real = store.open_wait

        def observed(*args: Any, **kwargs: Any) -> Any:
            entered.set()  # the wait's write has begun (it then waits for the lock)
            return real(*args, **kwargs)

        store.open_wait = observed

        @app.workflow(name=f"waits-{kind}")
        async def waits() -> str:
            async def ticker() -> None:
                await asyncio.to_thread(go.wait, WAIT_S)
                ticked.set()  # on the loop, after the wait: only if the loop is free

            other = asyncio.ensure_future(ticker())
            began.set()
            await asyncio.to_thread(armed.wait, WAIT_S)
            await WAITS[kind]()
            await other
            return "done"

        results: list[Any] = []
        running = threading.Thread(target=lambda: results.append(app.run(waits, workflow_id="w")))
        running.start()
        try:
            assert began.wait(WAIT_S)
            with writer_lock(shared_url, "w"):
                armed.set()
                assert entered.wait(WAIT_S), "the wait never began its write"
                go.set()
                assert ticked.wait(LOOK_S), "the loop was held while the wait's write waited"
                assert not results
        finally:
            armed.set()
            go.set()
            running.join(WAIT_S)
        assert results == ["done"]
        opened = [e for e in app.journal("w") if e.kind == kind]
        assert [e.status for e in opened] == ["scheduled", "completed"], opened
