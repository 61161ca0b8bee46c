"""The chaos soak's checker catches each violation planted in an otherwise clean history, and
finds none in the clean one."""

from __future__ import annotations

from typing import Any

import pytest
from soak_checker import (
    Fault,
    History,
    LeaseSample,
    Outcome,
    Run,
    check,
)

INGRESS_QUEUE = "stalwart-soak"


def _line(op: str, **fields: Any) -> dict[str, Any]:
    return {"t": 0.0, "pid": 1, "op": op, **fields}


def clean() -> History:
    """A history that keeps every invariant, touching each of them."""
    runs = [
        Run("pay-1", "pay", "completed"),
        Run("notify-1", "notify", "completed"),
        Run("notify-2", "notify", "needs_attention", "an irreversible step is in doubt"),
        Run("count-1", "count", "completed"),
        Run("count-2", "count", "completed"),
        Run("talk-1", "talk", "completed"),
        Run(f"{INGRESS_QUEUE}:m1", "ingested", "completed"),
        Run("review-1", "review", "failed", "StepFailed: no"),
    ]
    return History(
        runs={run.workflow_id: run for run in runs},
        outcomes=[
            Outcome("pay-1", "step", 1, 1, "failed"),
            Outcome("pay-1", "step", 1, 2, "completed"),
            Outcome("pay-1", "step", 2, 1, "in_doubt"),  # interrupted; verify found the charge
            Outcome("pay-1", "step", 2, 1, "completed"),
        ],
        counters={
            "soak-counter-0": (3, [(1, 1, "count-1"), (2, 2, "driver"), (3, 3, "count-2")]),
        },
        streams={"talk-1": [0, 1, 2, 3]},
        log=[
            _line("started", wid="pay-1"),
            _line("started", wid="notify-1"),
            _line("charge", wid="pay-1", key="pay-1/1"),
            _line("email", wid="notify-1", key="notify-1/1"),
            _line("inc_ack", wid="count-1", key="soak-counter-0", version=1),
            _line("inc_ack", wid="count-1", key="soak-counter-0", version=1),  # ack step rerun
            _line("inc_ack", wid="driver", key="soak-counter-0", version=2),
            _line("published", id="m1"),
        ],
        samples=[
            LeaseSample(100.0, "pay-1", 7, 104.0),
            LeaseSample(130.0, "pay-1", 8, 100.0),  # long past its lease, but its holder lives
        ],
        faults=[Fault("kill", 7, 101.0, None), Fault("stop", 9, 90.0, 99.0)],
        grace=15.0,
    )


def test_a_clean_history_has_no_violation() -> None:
    assert check(clean()) == []


def _plant(history: History, kind: str) -> None:
    if kind == "unaccounted":
        history.runs["family-1"] = Run("family-1", "family", "suspended")
    elif kind == "unaccounted_reasonless":
        history.runs["notify-2"] = Run("notify-2", "notify", "needs_attention", None)
    elif kind == "unaccounted_lost_start":
        history.log.append(_line("started", wid="pay-9"))
    elif kind == "effect":
        history.log.append(_line("email", wid="notify-1", key="notify-1/1"))
    elif kind == "effect_missing":
        history.log = [line for line in history.log if line["op"] != "charge"]
    elif kind == "lost_update":
        # two writers both acknowledged version 3 and the counter moved once
        history.log.append(_line("inc_ack", wid="count-9", key="soak-counter-0", version=3))
        history.log.append(_line("inc_ack", wid="count-8", key="soak-counter-0", version=4))
    elif kind == "lost_update_value":
        history.counters["soak-counter-0"] = (2, history.counters["soak-counter-0"][1])
    elif kind == "stream_gap":
        history.streams["talk-1"] = [0, 1, 3]
    elif kind == "message":
        history.log.append(_line("published", id="m2"))
    elif kind == "message_extra":
        history.runs[f"{INGRESS_QUEUE}:m3"] = Run(f"{INGRESS_QUEUE}:m3", "ingested", "completed")
    elif kind == "attempt":
        history.outcomes.append(Outcome("pay-1", "step", 1, 2, "failed"))
    elif kind == "stale_lease":
        history.samples.append(LeaseSample(130.0, "pay-1", 7, 110.0))  # 7 was killed at 101
    elif kind == "stale_lease_paused":
        history.samples.append(LeaseSample(98.0, "talk-1", 9, 80.0))  # 9 paused 90..99
    else:
        raise AssertionError(kind)


@pytest.mark.parametrize(
    ("planted", "invariant"),
    [
        ("unaccounted", "unaccounted"),
        ("unaccounted_reasonless", "unaccounted"),
        ("unaccounted_lost_start", "unaccounted"),
        ("effect", "effect"),
        ("effect_missing", "effect"),
        ("lost_update", "lost_update"),
        ("lost_update_value", "lost_update"),
        ("stream_gap", "stream_gap"),
        ("message", "message"),
        ("message_extra", "message"),
        ("attempt", "attempt"),
        ("stale_lease", "stale_lease"),
        ("stale_lease_paused", "stale_lease"),
    ],
)
def test_each_planted_violation_is_caught(planted: str, invariant: str) -> None:
    history = clean()
    _plant(history, planted)
    found = check(history)
    assert found, f"{planted} went unnoticed"
    assert {v.invariant for v in found} == {invariant}, [str(v) for v in found]
