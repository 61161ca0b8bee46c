"""The HTTP API's long answers built straight from store rows (``app._journal_json``,
``app._approvals_json``) are, to the byte, what ``entry_json`` and ``approval_json`` write of
the typed values: plain JSON parsed as it stands, everything else (tagged values, non-finite
floats, integers beyond 64 bits, payloads stored as trees) the codec's way. And
``app._pending_approvals`` counts what ``app.approvals()`` lists."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import stalwart
from stalwart import testing
from stalwart._wire import approval_json, entry_json

VALUES: list[Any] = [
    {"plain": [1, 2.5, True, None, "é 😀"]},
    {"when": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC), "pair": (1, 2)},
    {"$looks": "tagged"},
    float("nan"),
    2**70,
    -(2**63) - 1,
    2**64 - 1,
    1e300,
    [[[["deep"]]]],
    {"prompt": "You are a careful agent. " * 400},  # a payload stored as a tree
    "x" * 5000,
    None,
]


def _same(new: list[dict[str, Any]], old: list[dict[str, Any]]) -> None:
    assert json.dumps(new) == json.dumps(old)  # json tells an int from an equal float


def test_the_journal_answer_is_what_entry_json_writes(app: stalwart.Stalwart) -> None:
    @app.step
    def echo(value: Any) -> Any:
        return value

    @app.workflow
    def echoes() -> None:
        for value in VALUES:
            echo(value)

    app.run(echoes, workflow_id="echoes")
    whole = [entry_json(e) for e in app.journal("echoes")]
    assert len(whole) > len(VALUES)
    _same(app._journal_json("echoes"), whole)
    ids = [e["id"] for e in whole]
    _same(app._journal_json("echoes", after=ids[3]), whole[4:])
    _same(app._journal_json("echoes", after=ids[3], limit=5), whole[4:9])
    with pytest.raises(stalwart.WorkflowNotFound):
        app._journal_json("nobody")
    with pytest.raises(stalwart.UsageError):
        app._journal_json("echoes", limit=0)


def test_the_approvals_answer_is_what_approval_json_writes(
    app: stalwart.Stalwart, raw_sql: Callable[..., list[Any]]
) -> None:
    @app.workflow
    def asks(index: int) -> Any:
        decision = stalwart.request_approval(f"ask {index}", details=VALUES[index])
        return decision and decision.approved

    worker = testing.worker(app, concurrency=4)
    thread = threading.Thread(target=worker.serve, daemon=True)
    thread.start()
    try:
        for index in range(len(VALUES)):
            app.start(asks, index, workflow_id=f"ask-{index}")
        deadline = time.monotonic() + 20
        while len(app.approvals()) < len(VALUES):
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        worker.stop()
        thread.join(10)
    app.approve("ask-0", by="ops", reason="fine")
    app.reject("ask-1", by="ops")
    expired = "UPDATE approvals SET decided_at = 1, reason = 'expired' WHERE workflow_id = :w"
    raw_sql(app, expired, {"w": "ask-2"})  # as an expiry leaves it: decided, no decision
    for pending in (True, False):
        _same(app._approvals_json(pending), [approval_json(r) for r in app.approvals(pending)])
    assert app._pending_approvals() == len(app.approvals()) == len(VALUES) - 3
    assert len(app._approvals_json(False)) == len(VALUES)
