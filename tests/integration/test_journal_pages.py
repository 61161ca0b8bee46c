"""The public reads the console and the CLI use: ``app.journal(after=, limit=)`` pages a run's
journal by entry id (``JournalEntry.id``), ``app.journal_size`` counts it, and
``app.count_workflows(parent_id=)`` counts a run's children."""

from __future__ import annotations

import pytest

import stalwart


def test_the_journal_pages_by_entry_id(app: stalwart.Stalwart) -> None:
    @app.step
    def add(x: int) -> int:
        return x + 1

    @app.workflow
    def steps() -> int:
        return add(add(add(0)))

    @app.workflow
    def other() -> int:
        return add(10)

    app.run(steps, workflow_id="paged")
    app.run(other, workflow_id="noise")
    whole = app.journal("paged")
    ids = [e.id for e in whole]
    assert ids == sorted(set(ids)) and all(i > 0 for i in ids) and len(whole) >= 5
    assert app.journal("paged", after=None, limit=None) == whole
    assert app.journal("paged", after=0) == whole
    assert app.journal("paged", after=ids[1]) == whole[2:]
    assert app.journal("paged", limit=2) == whole[:2]
    pages, after = [], None
    while page := app.journal("paged", after=after, limit=2):
        pages.append(page)
        after = page[-1].id
    assert [e for page in pages for e in page] == whole
    assert [len(p) for p in pages][:-1] == [2] * (len(pages) - 1)
    assert app.journal("paged", after=ids[-1]) == []
    assert app.journal_size("paged") == len(whole)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"after": -1}, "after=-1: pass the id of a journal entry"),
        ({"after": "3"}, "after='3'"),
        ({"after": True}, "after=True"),
        ({"after": 2**63}, "after="),
        ({"limit": 0}, "limit=0: must be an int >= 1"),
        ({"limit": 1.5}, "limit=1.5"),
        ({"limit": 2**70}, "limit="),
    ],
    ids=repr,
)
def test_a_bad_after_or_limit_is_a_usage_error(
    app: stalwart.Stalwart, kwargs: dict[str, object], says: str
) -> None:
    @app.workflow
    def idle() -> None: ...

    app.start(idle, workflow_id="idle")
    with pytest.raises(stalwart.UsageError, match=says.replace("(", r"\(")):
        app.journal("idle", **kwargs)  # type: ignore[arg-type]


def test_an_unknown_run_has_no_journal_and_no_size(app: stalwart.Stalwart) -> None:
    with pytest.raises(stalwart.WorkflowNotFound):
        app.journal("nope", after=1, limit=1)
    with pytest.raises(stalwart.WorkflowNotFound):
        app.journal_size("nope")


def test_count_workflows_counts_the_children_of_a_run(app: stalwart.Stalwart) -> None:
    @app.workflow
    def child(n: int) -> int:
        return n

    @app.workflow
    def parent() -> list[int]:
        return [stalwart.start_child(child, n).result() for n in range(3)]

    @app.workflow
    def alone() -> None: ...

    app.run(parent, workflow_id="p")
    app.run(alone, workflow_id="lone")
    assert app.count_workflows(parent_id="p") == 3
    assert app.count_workflows("completed", parent_id="p") == 3
    assert app.count_workflows("failed", parent_id="p") == 0
    assert app.count_workflows(parent_id="lone") == 0
    assert app.count_workflows() == 5
