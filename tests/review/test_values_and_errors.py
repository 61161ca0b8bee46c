"""Review: value round-trips, paging and error reporting (strict xfails prove the bugs)."""

from __future__ import annotations

import enum
import sqlite3
from pathlib import Path

import pytest

import stalwart
from stalwart._serde import make_codec
from stalwart.testing import FakeClock

pytestmark = pytest.mark.timeout(30)


class Color(str, enum.Enum):  # noqa: UP042 - the pre-3.11 spelling users still write
    RED = "red"


class Level(enum.StrEnum):
    HIGH = "high"


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'review.db'}"


@pytest.mark.parametrize("member", [Color.RED, Level.HIGH])
def test_str_enums_round_trip_exactly(member: enum.Enum) -> None:
    codec = make_codec("json")
    value = codec.decode(codec.encode({"choice": member}))
    assert type(value["choice"]) is type(member)


def test_paging_with_before_does_not_repeat_the_boundary_row(tmp_path: Path) -> None:
    clock = FakeClock(start=1_767_225_600.0000007)  # sub-microsecond, as time.time() gives
    with stalwart.Stalwart(_url(tmp_path), clock=clock) as app:

        @app.workflow
        def wf() -> None:
            return None

        app.start(wf, workflow_id="older")
        clock.advance(1.0)
        app.start(wf, workflow_id="newer")
        first = app.list_workflows(limit=1)
        second = app.list_workflows(limit=1, before=first[-1].created_at)
        assert [r.workflow_id for r in first] == ["newer"]
        assert [r.workflow_id for r in second] == ["older"]


def test_journal_names_run_and_seq_of_a_row_with_a_missing_payload(tmp_path: Path) -> None:
    with stalwart.Stalwart(_url(tmp_path), clock=FakeClock()) as app:

        @app.step
        def big() -> str:
            return "x" * 1000  # stored apart from the journal row

        @app.workflow
        def wf() -> str:
            return big()

        app.run(wf, workflow_id="w")
        with sqlite3.connect(tmp_path / "review.db") as db:
            db.execute("DELETE FROM payloads")
        with pytest.raises(stalwart.CorruptRecord) as info:
            app.journal("w")
        assert "'w'" in str(info.value)
        assert "seq 1" in str(info.value)
        assert info.value.seq == 1


def test_async_step_own_timeout_error_keeps_its_type(tmp_path: Path) -> None:
    with stalwart.Stalwart(_url(tmp_path), clock=FakeClock()) as app:

        @app.step(timeout=30, retry=stalwart.Retry.never())
        async def call_api() -> str:
            raise TimeoutError("upstream read timed out")

        @app.workflow
        async def wf() -> str:
            try:
                return await call_api()
            except stalwart.StepFailed as exc:
                return exc.cause_type

        assert app.run(wf, workflow_id="w") == "TimeoutError"


def test_retry_rejects_or_accepts_a_list_of_exception_classes() -> None:
    try:
        policy = stalwart.Retry(retry_on=[ValueError])  # type: ignore[arg-type]
    except TypeError:
        return
    assert policy.is_retryable(ValueError("x"))
