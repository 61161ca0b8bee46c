"""Runs started at once from several threads of one process (an application's request
handlers, each calling ``app.start``) share transactions: the store's write pipeline commits
the creations that arrive while a commit is under way together, in the next transaction, and
each ``app.start`` returns once the transaction holding its run committed."""

from __future__ import annotations

from typing import Any

import pytest

import stalwart
from batches import together
from stalwart import testing
from stalwart._store.group_commit import Pending
from stalwart._store.sql.pipeline import Write

pytestmark = pytest.mark.timeout(60)

STARTERS = 12


def _counting_commits(store: Any) -> list[int]:
    """The sizes of the batches the store's pipeline commits from now on, one a transaction."""
    sizes: list[int] = []
    real = store._pipeline._commit

    def counted(batch: list[Pending[Write]]) -> None:
        sizes.append(len(batch))
        real(batch)

    store._pipeline._commit = counted
    return sizes


def test_concurrent_starts_commit_together_and_every_run_exists(app: stalwart.Stalwart) -> None:
    @app.workflow
    def greet(name: str) -> str:
        return f"hello {name}"

    store = testing.store_of(app)
    commits = _counting_commits(store)
    ids = [f"start-{i:02d}" for i in range(STARTERS)]
    starts = [lambda wid=wid: app.start(greet, wid, workflow_id=wid) for wid in ids]

    results, batches = together(store, starts)

    assert [handle.workflow_id for handle in results] == ids
    # one transaction for the write the pipeline was busy with when the starts came, one for
    # all of the starts: fewer transactions than starts
    assert commits == [1, STARTERS]
    assert batches == [STARTERS]
    assert len(commits) < STARTERS
    for wid in ids:
        assert app.handle(wid).status() == "pending"
        assert [e.name for e in app.journal(wid)] == ["started"]


def test_a_repeated_id_among_concurrent_starts_creates_one_run_and_the_others_commit(
    app: stalwart.Stalwart,
) -> None:
    @app.workflow
    def greet(name: str) -> str:
        return f"hello {name}"

    app.start(greet, "first", workflow_id="taken")
    store = testing.store_of(app)
    commits = _counting_commits(store)
    ids = ["a", "taken", "b", "taken", "c"]
    starts = [
        lambda i=i, wid=wid: app.start(greet, str(i), workflow_id=wid) for i, wid in enumerate(ids)
    ]

    results, _ = together(store, starts)

    assert [handle.workflow_id for handle in results] == ids
    assert commits == [1, len(ids)]
    for wid in ("a", "b", "c"):
        assert app.handle(wid).status() == "pending"
    # the existing run kept its input: neither repeat wrote anything
    assert [e.name for e in app.journal("taken")] == ["started"]
    assert len(app.list_workflows(limit=10)) == 4
