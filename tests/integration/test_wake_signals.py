"""How the threads of one process wait for a store to change (``Store.changes``): another
connection's commit wakes them, one of them polls for all on SQLite, PostgreSQL's listener
pushes each notification and, while it is down, its waiters fall back to polling."""

from __future__ import annotations

import threading
import time

import stalwart
from stalwart.testing import store_of

WAIT_S = 30.0  # far beyond any wake-up: reached only when the signal never comes


def _workflows(app: stalwart.Stalwart) -> object:
    @app.workflow(name="parked")
    def parked() -> object:
        return stalwart.wait_for_event("go")

    return parked


def test_another_connections_commit_wakes_a_waiter(shared_url: str) -> None:
    with stalwart.Stalwart(shared_url) as waiter, stalwart.Stalwart(shared_url) as other:
        parked = _workflows(other)
        changes = store_of(waiter).changes
        seen = changes.current()  # on PostgreSQL, starts listening (and says so: a change)
        seen = changes.wait(seen, 0.5) if changes.version != seen else seen
        seen = changes.current()
        moved: list[int] = []
        thread = threading.Thread(target=lambda: moved.append(changes.wait(seen, WAIT_S)))
        thread.start()
        other.start(parked, workflow_id="one")
        began = time.monotonic()
        thread.join(timeout=WAIT_S + 5)
        assert moved and moved[0] != seen, "the commit of another connection woke no one"
        assert time.monotonic() - began < WAIT_S


def test_a_wait_without_a_change_times_out_with_the_same_version(shared_url: str) -> None:
    with stalwart.Stalwart(shared_url) as app:
        changes = store_of(app).changes
        changes.wait(changes.current(), 0.3)  # PostgreSQL: let the listener connect
        seen = changes.current()
        assert changes.wait(seen, 0.05) == seen


def test_many_waiters_share_one_poller(tmp_path: object) -> None:
    polls = 0

    with stalwart.Stalwart(f"sqlite:///{tmp_path}/one.db") as app:
        store = store_of(app)
        changes = store.changes
        real = store.data_version

        def counted() -> int:
            nonlocal polls
            polls += 1
            return real()

        changes._poll = counted

        def polls_while(waiters: int) -> int:
            nonlocal polls
            seen = changes.current()
            polls = 0
            threads = [
                threading.Thread(target=changes.wait, args=(seen, 0.3)) for _ in range(waiters)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            return polls

        alone, crowd = polls_while(1), polls_while(20)
    assert alone > 0
    assert crowd < 3 * alone, f"1 waiter polled {alone} times, 20 waiters {crowd} times"


def test_a_caller_of_this_process_wakes_on_a_run_it_settled(shared_url: str) -> None:
    """The store's own connection moves no data_version: settling a run pushes instead."""
    with stalwart.Stalwart(shared_url) as app:
        changes = store_of(app).changes
        changes.wait(changes.current(), 0.3)
        seen = changes.current()

        @app.workflow(name="quick")
        def quick() -> int:
            return 1

        assert app.run(quick) == 1
        assert changes.version != seen
