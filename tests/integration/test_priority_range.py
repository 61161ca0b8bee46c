"""``priority`` is an int in [-2**31, 2**31 - 1] on every store; anything else is a ValueError."""

from __future__ import annotations

import pytest

import stalwart


@pytest.mark.parametrize("priority", [2**63, 2**31, -(2**31) - 1, -(2**70)])
def test_a_priority_out_of_range_is_refused_before_anything_is_recorded(
    app: stalwart.Stalwart, priority: int
) -> None:
    @app.workflow
    def job() -> None:
        return None

    with pytest.raises(ValueError, match=r"-2\*\*31.*2\*\*31 - 1") as info:
        app.start(job, priority=priority)
    assert "\n" not in str(info.value)
    assert app.list_workflows() == []


@pytest.mark.parametrize("priority", [2**31 - 1, -(2**31), 0])
def test_the_ends_of_the_range_are_accepted(app: stalwart.Stalwart, priority: int) -> None:
    @app.workflow
    def job() -> int:
        return 1

    app.start(job, workflow_id="p", priority=priority)
    assert app.run(job, workflow_id="p") == 1
