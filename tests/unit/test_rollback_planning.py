"""The rollback's pure planners, on hand-made journal rows: which completed steps a rollback still
has to undo, and how an interrupted rollback ends its run.

``pending_compensations(rows, codec=, workflow_id=)`` takes ``compensation_plan`` rows, ``(id,
seq, position, name, status, attempt, input, output, kind, error)`` in journal order, and returns
the steps still to undo, newest completion first, each with its recorded call and result and the
attempts its compensation already used. ``rollback_state(core, workflow_id, stored)`` reads the
``rolling_back`` entry: ``(then, detail)``, ``then`` being ``failed`` or ``cancelled`` and
``detail`` the ``ErrorRecord`` the run ends with (a plain text its message). A row
either cannot read is a ``CorruptRecord`` naming the run (and the row's seq).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from stalwart import CorruptRecord
from stalwart._engine.compensation import Undo, pending_compensations
from stalwart._engine.executor import rollback_state
from stalwart._model import ErrorRecord
from stalwart._serde import Codec, make_codec
from stalwart._store.base import CompensationRow

CODEC = make_codec("json")
Row = CompensationRow


def _call(*args: Any, **kwargs: Any) -> bytes:
    return CODEC.encode({"args": list(args), "kwargs": kwargs})


def _step(
    row_id: int,
    seq: int,
    name: str,
    status: str = "completed",
    *,
    input: bytes | None = None,
    output: bytes | None = None,
    attempt: Any = 1,
) -> Row:
    return Row(row_id, seq, str(seq - 1), name, status, attempt, input, output, "step", None)


def _undo(row_id: int, seq: int, name: str, status: str, attempt: Any) -> Row:
    error = '{"type": "RuntimeError", "message": "refund API down"}' if status == "failed" else None
    return Row(row_id, seq, str(seq - 1), name, status, attempt, None, None, "compensation", error)


def _plan(rows: list[Row]) -> list[Undo]:
    return pending_compensations(rows, codec=CODEC, workflow_id="order-7")


# -- pending_compensations ----------------------------------------------------------------


def test_an_empty_journal_has_nothing_to_undo() -> None:
    assert _plan([]) == []


def test_completed_steps_are_undone_newest_completion_first_with_their_call_and_result() -> None:
    rows = [
        _step(1, 1, "reserve", input=_call("sku-1", qty=2), output=CODEC.encode("r-9")),
        _step(2, 2, "charge", input=_call(40), output=CODEC.encode({"id": "ch_1"})),
    ]
    assert _plan(rows) == [
        Undo(2, "1", "charge", [40], {}, {"id": "ch_1"}, 0),
        Undo(1, "0", "reserve", ["sku-1"], {"qty": 2}, "r-9", 0),
    ]


def test_newest_completion_first_follows_the_rows_not_the_seqs() -> None:
    # Concurrent steps: seq 2 was allocated first but completed after seq 3.
    rows = [_step(1, 1, "a"), _step(2, 3, "c"), _step(3, 2, "b")]
    assert [u.seq for u in _plan(rows)] == [2, 3, 1]


def test_a_step_reused_by_a_fork_is_undone_like_a_completed_one() -> None:
    assert [u.name for u in _plan([_step(1, 1, "reserve", "reused")])] == ["reserve"]


def test_a_step_without_recorded_input_or_output_is_undone_with_none() -> None:
    assert _plan([_step(1, 1, "ping")]) == [Undo(1, "0", "ping", [], {}, None, 0)]


def test_a_compensated_step_is_not_undone_again() -> None:
    rows = [
        _step(1, 1, "reserve"),
        _step(2, 2, "charge"),
        _undo(3, 2, "charge", "completed", 1),
        _step(4, 2, "charge", "compensated"),
    ]
    assert [u.name for u in _plan(rows)] == ["reserve"]
    rows += [_undo(5, 1, "reserve", "completed", 1), _step(6, 1, "reserve", "compensated")]
    assert _plan(rows) == []  # the rollback is done


def test_a_compensated_step_that_ran_again_after_a_retry_is_undone_again_afresh() -> None:
    rows = [
        _step(1, 1, "charge"),
        _undo(2, 1, "charge", "failed", 1),
        _undo(3, 1, "charge", "failed", 2),
        _step(4, 1, "charge", "compensated"),
        _step(5, 1, "charge", input=_call(50)),  # the retried run charged again
    ]
    assert _plan(rows) == [Undo(1, "0", "charge", [50], {}, None, 0)]


def test_the_attempts_a_compensation_already_failed_are_carried() -> None:
    rows = [_step(1, 1, "charge"), _undo(2, 1, "charge", "failed", 1)]
    assert _plan(rows)[0].attempts == 1
    rows.append(_undo(3, 1, "charge", "failed", 3))
    assert _plan(rows)[0].attempts == 3  # the latest failure's count
    rows.append(_undo(4, 1, "charge", "failed", None))
    assert _plan(rows)[0].attempts == 0


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        (_step(1, 4, "charge", "in_doubt"), "status 'in_doubt'"),
        (_step(1, 4, "charge", "failed"), "status 'failed'"),
        (_undo(1, 4, "charge", "scheduled", 1), "status 'scheduled'"),
        (Row(1, 4, "3", "nap", "completed", 1, None, None, "sleep", None), "status 'completed'"),
        (_step(1, 4, "charge", attempt=-1), "attempt -1"),
        (_step(1, 4, "charge", attempt="2"), "attempt '2'"),
        (_step(1, 4, "charge", attempt=True), "attempt True"),
        (_step(1, 4, "charge", input=b"J{garbled"), "cannot be decoded"),
        (_step(1, 4, "charge", output=b"J{garbled"), "cannot be decoded"),
        (_step(1, 4, "charge", input=CODEC.encode([1, 2])), "not an argument record"),
        (_step(1, 4, "charge", input=CODEC.encode({"args": "x"})), "not an argument record"),
        (_step(1, 4, "charge", input=CODEC.encode({"kwargs": [1]})), "not an argument record"),
    ],
)
def test_a_row_the_plan_cannot_read_is_a_corrupt_record(row: Row, problem: str) -> None:
    with pytest.raises(CorruptRecord, match=problem) as excinfo:
        _plan([_step(9, 1, "fine"), row])
    assert (excinfo.value.workflow_id, excinfo.value.seq) == ("order-7", 4)
    assert "'order-7'" in str(excinfo.value) and "seq 4" in str(excinfo.value)


def test_a_damaged_value_of_a_step_already_compensated_is_never_read() -> None:
    rows = [_step(1, 1, "charge", output=b"J{garbled"), _step(2, 1, "charge", "compensated")]
    assert _plan(rows) == []


# -- rollback_state -----------------------------------------------------------------------


@dataclass
class _Runtime:
    """All ``rollback_state`` reads of the app's runtime: its codec."""

    codec: Codec


def _state(stored: bytes) -> tuple[str, ErrorRecord]:
    core: Any = _Runtime(CODEC)
    return rollback_state(core, "order-7", stored)


def test_an_interrupted_rollback_ends_as_its_entry_says() -> None:
    detail = '{"type": "StepFailed", "message": "card declined"}'
    assert _state(CODEC.encode({"then": "failed", "detail": detail})) == (
        "failed",
        ErrorRecord("StepFailed", "card declined"),
    )
    assert _state(CODEC.encode({"then": "cancelled", "detail": "by alice"})) == (
        "cancelled",
        ErrorRecord("Error", "by alice"),
    )


@pytest.mark.parametrize(
    "stored",
    [
        b"J{garbled",
        CODEC.encode(["failed", "x"]),
        CODEC.encode({"then": "completed", "detail": "x"}),  # a rollback never completes a run
        CODEC.encode({"then": "failed"}),
        CODEC.encode({"then": "failed", "detail": 7}),
        CODEC.encode({"detail": "x"}),
    ],
)
def test_a_rolling_back_entry_that_does_not_say_how_the_run_ends_is_corrupt(stored: bytes) -> None:
    with pytest.raises(CorruptRecord, match="rolling_back entry") as excinfo:
        _state(stored)
    assert excinfo.value.workflow_id == "order-7"
    assert "'order-7'" in str(excinfo.value)
