"""The operator's pure planners, on hand-made journal rows: what a fork reuses, and which steps
a retry finds failed for good.

``fork_plan(rows, from_seq)`` takes ``fork_candidates`` rows, ``(id, seq, position, kind, name,
status, compensable)`` in journal order, and returns ``(reuse, again, in_doubt)``: the row ids to
copy (the latest completed row of each position before ``from_seq``, plus the first marking row
of an irreversible step), the completed irreversible steps from ``from_seq`` on that the fork
would run again, and the irreversible steps in doubt anywhere in the journal.

``failed_for_good(index, interrupted=)`` returns the replay-index rows whose position's latest
row is a final step failure the run failed through (or, for a poison run, an interrupted
attempt); a failure the workflow caught (its task, or a task awaiting it, made a later call) is
an outcome, kept as it is, and a fork reuses it; but never the failure the run ended with
(``through=``, its seq), whatever was recorded after it.
"""

from __future__ import annotations

import json
from typing import Any

from stalwart._engine.lifecycle import lifecycle
from stalwart._model import ErrorRecord, ErrorType
from stalwart._operator import failed_for_good, fork_plan, redrive_plan
from stalwart._store import Entry, IndexRow
from stalwart._store.base import ForkCandidate

Row = ForkCandidate


def _candidates(*rows: tuple[int, str, str, str]) -> list[Row]:
    """``fork_candidates`` rows from ``(seq, kind, name, status)``, ids and positions in order."""
    return [
        Row(row_id, seq, str(seq - 1), kind, name, status, 0)
        for row_id, (seq, kind, name, status) in enumerate(rows, start=1)
    ]


# -- fork_plan ----------------------------------------------------------------------------


def test_an_empty_journal_plans_nothing() -> None:
    assert fork_plan([], 1) == ([], [], [])
    assert fork_plan([], 10) == ([], [], [])


def test_a_fork_reuses_the_completed_rows_before_its_seq_and_nothing_after() -> None:
    rows = _candidates(
        (1, "step", "search", "completed"),
        (2, "now", "now", "completed"),
        (3, "step", "draft", "completed"),
        (4, "step", "send", "completed"),
    )
    assert fork_plan(rows, 3) == ([1, 2], [], [])
    assert fork_plan(rows, 1) == ([], [], [])  # from the first seq: a fresh run
    assert fork_plan(rows, 99) == ([1, 2, 3, 4], [], [])  # past the end: everything


def test_a_fork_does_not_reuse_the_failure_the_run_ended_with() -> None:
    rows = [
        Row(1, 1, "t0.0", "step", "flaky", "failed", 0),
        Row(2, 2, "0", "step", "slow", "completed", 0),  # made while the task still ran
    ]
    assert fork_plan(rows, 3) == ([1, 2], [], [])  # as if caught: the task awaiting it went on
    assert fork_plan(rows, 3, through=1) == ([2], [], [])


def test_only_the_latest_row_of_a_position_is_reused() -> None:
    rows: list[Row] = [
        Row(1, 1, "0", "step", "fetch", "failed", 0),
        Row(2, 1, "0", "step", "fetch", "completed", 0),
        Row(3, 2, "1", "sleep", "sleep", "scheduled", 0),
        Row(4, 2, "1", "sleep", "sleep", "completed", 0),
    ]
    assert fork_plan(rows, 3) == ([2, 4], [], [])


def test_rows_that_did_not_complete_before_the_seq_are_not_reused() -> None:
    rows = _candidates(
        (1, "step", "charge", "compensated"),  # undone by a rollback: runs again
        (2, "event", "go", "scheduled"),  # a wait still open
        (3, "step", "ok", "completed"),
        (4, "step", "fetch", "failed"),  # the failure the run failed through: runs again
    )
    assert fork_plan(rows, 5) == ([3], [], [])


def test_a_step_failure_the_workflow_went_on_from_is_reused_as_an_outcome() -> None:
    rows = _candidates(
        (1, "step", "lookup", "failed"),  # caught: the same task made a later call
        (2, "step", "notify", "completed"),
    )
    assert fork_plan(rows, 3) == ([1, 2], [], [])
    assert fork_plan(rows, 2) == ([1], [], [])
    sibling = [
        Row(1, 1, "t0.0", "step", "a", "failed", 0),
        Row(2, 2, "t1.0", "step", "b", "completed", 0),
    ]
    assert fork_plan(sibling, 3) == ([2], [], [])  # a sibling task's later call is no catch


def test_rows_a_fork_reused_are_reused_again_by_a_fork_of_the_fork() -> None:
    rows = _candidates((1, "step", "search", "reused"), (2, "step", "draft", "completed"))
    assert fork_plan(rows, 3) == ([1, 2], [], [])


def test_an_irreversible_step_before_the_seq_is_reused_with_its_mark() -> None:
    rows: list[Row] = [
        Row(1, 1, "0", "step", "search", "completed", 0),
        Row(2, 2, "1", "step", "pay", "scheduled", 0),  # the mark: the step is irreversible
        Row(3, 2, "1", "step", "pay", "completed", 0),
        Row(4, 3, "2", "step", "email", "completed", 0),
    ]
    assert fork_plan(rows, 3) == ([1, 2, 3], [], [])


def test_the_first_mark_of_an_irreversible_step_is_the_one_reused() -> None:
    rows: list[Row] = [
        Row(1, 1, "0", "step", "pay", "scheduled", 0),
        Row(2, 1, "0", "step", "pay", "in_doubt", 0),
        Row(3, 1, "0", "step", "pay", "scheduled", 0),  # resolved with rerun: marked again
        Row(4, 1, "0", "step", "pay", "completed", 0),
    ]
    assert fork_plan(rows, 2) == ([1, 4], [], [])


def test_a_completed_irreversible_step_from_the_seq_on_would_run_again() -> None:
    rows: list[Row] = [
        Row(1, 1, "0", "step", "search", "completed", 0),
        Row(2, 2, "1", "step", "pay", "scheduled", 0),
        Row(3, 2, "1", "step", "pay", "completed", 0),
        Row(4, 3, "2", "step", "email", "completed", 0),  # reversible: rerunning it is fine
    ]
    assert fork_plan(rows, 2) == ([1], [(2, "pay")], [])
    assert fork_plan(rows, 1) == ([], [(2, "pay")], [])


def test_an_irreversible_step_in_doubt_is_reported_wherever_it_lies() -> None:
    rows: list[Row] = [
        Row(1, 1, "0", "step", "search", "completed", 0),
        Row(2, 2, "1", "step", "pay", "scheduled", 0),  # crashed with no outcome
        Row(3, 3, "2", "step", "ship", "scheduled", 0),
        Row(4, 3, "2", "step", "ship", "in_doubt", 0),  # its verify could not tell
    ]
    before = fork_plan(rows, 4)
    assert before == ([1], [], [(2, "pay"), (3, "ship")])  # in doubt: not reusable
    assert fork_plan(rows, 1) == ([], [], [(2, "pay"), (3, "ship")])


def test_a_wait_left_scheduled_is_not_an_irreversible_step_in_doubt() -> None:
    rows = _candidates((1, "sleep", "sleep", "scheduled"), (2, "approval", "ok?", "scheduled"))
    assert fork_plan(rows, 3) == ([], [], [])


def test_the_plan_is_sorted() -> None:
    rows: list[Row] = [
        Row(9, 3, "t1.0", "step", "b", "completed", 0),
        Row(4, 1, "t0.0", "step", "a", "completed", 0),
        Row(7, 5, "0", "step", "z", "scheduled", 0),
        Row(2, 4, "1", "step", "y", "scheduled", 0),
    ]
    assert fork_plan(rows, 4) == ([4, 9], [], [(4, "y"), (5, "z")])


# -- failed_for_good ----------------------------------------------------------------------


def _index(
    seq: int,
    position: str,
    status: str,
    error: dict[str, Any] | str | None = None,
    *,
    kind: str = "step",
) -> IndexRow:
    text = json.dumps(error) if isinstance(error, dict) else error
    return IndexRow(seq, position, kind, f"s{seq}", status, 1, None, text)


FINAL = {"type": "ValueError", "message": "bad input", "final": True}
RETRYABLE = {"type": "ConnectionError", "message": "503", "final": False}
CRASHED = {"type": "AttemptInterrupted", "message": "worker died", "final": False}


def test_an_empty_index_has_no_failed_steps() -> None:
    assert failed_for_good([]) == []
    assert failed_for_good([], interrupted=True) == []


def test_a_final_failure_is_failed_for_good_and_a_retryable_one_is_not() -> None:
    final = _index(1, "t0.0", "failed", FINAL)  # gathered tasks: none awaits another
    rows = [
        final,
        _index(2, "t1.0", "failed", RETRYABLE),
        _index(3, "t2.0", "failed", {"type": "X"}),
    ]
    assert failed_for_good(rows) == [final]


def test_a_final_failure_the_workflow_went_on_from_is_not_reopened() -> None:
    caught, through = _index(1, "0", "failed", FINAL), _index(2, "1", "failed", FINAL)
    assert failed_for_good([caught, through]) == [through]
    in_task = _index(1, "t0.0", "failed", FINAL)
    awaited = [in_task, _index(2, "0", "completed")]  # the task awaiting it went on
    assert failed_for_good(awaited) == []
    assert failed_for_good([in_task, _index(2, "t1.0", "completed")]) == [in_task]


def test_the_failure_the_run_ended_with_is_reopened_whatever_came_after_it() -> None:
    in_task = _index(1, "t0.0", "failed", FINAL)
    meanwhile = [in_task, _index(2, "0", "completed")]  # made while the task still ran
    assert failed_for_good(meanwhile, through=1) == [in_task]
    assert failed_for_good(meanwhile, through=2) == []  # another seq: still caught


def test_only_the_latest_row_of_a_position_counts() -> None:
    healed = [_index(1, "0", "failed", FINAL), _index(1, "0", "completed")]
    assert failed_for_good(healed) == []
    latest = _index(1, "0", "failed", FINAL)
    assert failed_for_good([_index(1, "0", "failed", RETRYABLE), latest]) == [latest]


def test_an_interrupted_attempt_counts_only_for_a_poison_run() -> None:
    crashed = _index(1, "0", "failed", CRASHED)
    assert failed_for_good([crashed]) == []
    assert failed_for_good([crashed], interrupted=True) == [crashed]
    retryable = _index(2, "1", "failed", RETRYABLE)
    assert failed_for_good([retryable], interrupted=True) == []


def test_rows_that_are_not_final_step_failures_are_left_out() -> None:
    rows = [
        _index(1, "0", "failed", None),  # no error recorded
        _index(2, "1", "failed", "{not json"),  # unreadable: not a final failure
        _index(6, "5", "failed", "[1]"),  # JSON, but not an error record
        _index(3, "2", "failed", FINAL, kind="compensation"),
        _index(4, "3", "completed", FINAL),
        _index(5, "4", "in_doubt", FINAL),
    ]
    assert failed_for_good(rows) == []
    assert failed_for_good(rows, interrupted=True) == []


def test_failed_steps_come_in_the_order_their_positions_first_appear() -> None:
    a, b, c = (_index(s, p, "failed", FINAL) for s, p in ((1, "t2.0"), (2, "t0.0"), (3, "t1.0")))
    again = _index(1, "t2.0", "failed", FINAL)
    assert failed_for_good([a, b, c, again]) == [again, b, c]


# -- redrive_plan -------------------------------------------------------------------------

NOTE = Entry(kind="operator", name="retry", status="completed", by="ana")


def _redriven(entry: Entry) -> ErrorRecord:
    assert entry.error is not None
    return entry.error


def test_a_failed_run_gets_a_fresh_budget_for_each_step_that_failed_for_good() -> None:
    index = [
        _index(1, "0", "completed"),
        _index(2, "t0.0", "failed", FINAL),
        _index(3, "t1.0", "failed", RETRYABLE),
        _index(4, "t2.0", "failed", FINAL),
    ]
    error = ErrorRecord("StepFailed", "gave up")
    entries = redrive_plan(error, index, None, NOTE, now=5.0, who="ana")
    assert [(e.kind, e.seq, e.position, e.attempt) for e in entries[:-1]] == [
        ("step", 2, "t0.0", 0),
        ("step", 4, "t2.0", 0),
    ]
    assert entries[-1] is NOTE
    for entry in entries[:-1]:
        assert (entry.status, entry.started_at, entry.finished_at) == ("failed", 5.0, 5.0)
        assert _redriven(entry) == ErrorRecord(ErrorType.REDRIVEN, "retried by ana")


def test_a_poison_run_also_retries_the_steps_its_crashes_used_up() -> None:
    crashed = _index(1, "0", "failed", CRASHED)
    poison = ErrorRecord(ErrorType.WORKER_CRASHED, "crashed its worker 5 times")
    entries = redrive_plan(poison, [crashed], None, NOTE, now=1.0, who="ana")
    assert [e.seq for e in entries[:-1]] == [1]
    plain = redrive_plan(ErrorRecord("StepFailed"), [crashed], None, NOTE, now=1.0, who="ana")
    assert plain == [NOTE]


def test_a_stopped_rollback_is_continued_not_the_run() -> None:
    error = ErrorRecord(ErrorType.COMPENSATION_FAILED, "refund API down", seq=3, then="failed")
    rollback = b'J{"then": "failed"}'
    entries = redrive_plan(error, [], rollback, NOTE, now=2.0, who="ana")
    reset, note, resumed = entries
    assert (reset.kind, reset.name, reset.seq, reset.attempt) == ("compensation", "reset", 3, 0)
    assert _redriven(reset).type == ErrorType.REDRIVEN
    assert note is NOTE
    assert resumed == lifecycle("rolling_back", 2.0, output=rollback)


def test_a_compensation_failure_without_a_rollback_in_progress_retries_the_steps() -> None:
    error = ErrorRecord(ErrorType.COMPENSATION_FAILED, "refund API down", seq=3)
    failed = _index(2, "1", "failed", FINAL)
    entries = redrive_plan(error, [failed], None, NOTE, now=2.0, who="ana")
    assert [(e.kind, e.seq) for e in entries] == [("step", 2), ("operator", None)]
