"""``app.count_by_status``: how many runs have each status under the other filters of
``count_workflows``, in one grouped query (what the console's status tabs show)."""

from __future__ import annotations

import datetime as _dt

import pytest

import stalwart
from stalwart.testing import FakeClock


def test_every_status_is_counted_under_the_other_filters(
    app: stalwart.Stalwart, clock: FakeClock
) -> None:
    @app.workflow(name="ok")
    def ok() -> int:
        return 1

    @app.workflow(name="later", queue="slow")
    def later() -> None: ...

    app.run(ok, workflow_id="a")
    start = clock.time()
    clock.advance(10)
    for wid in ("b", "c"):
        app.start(later, workflow_id=wid)
    counts = app.count_by_status()
    assert counts == {
        "pending": 2,
        "running": 0,
        "suspended": 0,
        "completed": 1,
        "failed": 0,
        "cancelled": 0,
        "needs_attention": 0,
    }
    assert sum(counts.values()) == app.count_workflows()
    assert app.count_by_status(name="ok")["completed"] == 1
    assert app.count_by_status(name="ok")["pending"] == 0
    assert app.count_by_status(queue="slow")["pending"] == 2
    after = _dt.datetime.fromtimestamp(start + 5, _dt.UTC)
    assert app.count_by_status(since=after) == {**counts, "completed": 0}
    with pytest.raises(ValueError, match="queue"):
        app.count_by_status(queue="")
