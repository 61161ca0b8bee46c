"""What the operator's tools answer: the JSON of the HTTP API's reads and writes, built once
from the app's read models so that ``stalwart ui`` (``_ui``) and ``stalwart mcp`` (``_mcp``)
can never describe a run two ways. Each function takes the app (a
:class:`~stalwart.Stalwart`) and returns plain JSON; checking the request is the caller's."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as dt
import json
from typing import Any

from ._model import STATUSES, WorkflowInfo
from ._wire import detail_json, info_json, iso

__all__ = [
    "approvals_answer",
    "decode_cursor",
    "encode_cursor",
    "iso_time",
    "journal_answer",
    "run_answer",
    "runs_page",
]


def encode_cursor(info: WorkflowInfo) -> str:
    """Where the next page starts: the last run's creation time and id, opaque to clients."""
    raw = json.dumps([iso(info.created_at), info.workflow_id], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def iso_time(text: str) -> dt.datetime | None:
    """An ISO 8601 time (naive: UTC), or ``None`` when ``text`` is not one a store can
    compare (year 1 in a zone east of UTC has no epoch time)."""
    text = text.strip()
    if "T" in text and " " in text:  # an unencoded "+" of a zone arrives as a space
        text = text.replace(" ", "+")
    try:
        when = dt.datetime.fromisoformat(text)
        when = when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)
        when.timestamp()
    except (ValueError, OverflowError):
        return None
    return when


def decode_cursor(text: str) -> WorkflowInfo | None:
    """The run a page's ``next_before`` names (only its creation time and id are set), or
    ``None`` when ``text`` is not a cursor."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        created, workflow_id = json.loads(raw)
    except (binascii.Error, ValueError, TypeError):
        return None
    when = iso_time(created) if isinstance(created, str) else None
    if when is None or not isinstance(workflow_id, str):
        return None
    fields: dict[str, Any] = {f.name: None for f in dataclasses.fields(WorkflowInfo)}
    fields.update(workflow_id=workflow_id, created_at=when, updated_at=when)
    return WorkflowInfo(**fields)


def runs_page(
    app: Any,
    status: str | None,
    name: str | None,
    limit: int,
    *,
    before: Any = None,
    queue: str | None = None,
    since: Any = None,
    parent_id: str | None = None,
) -> dict[str, Any]:
    """``GET /runs``: runs matching every filter, newest first on (created_at, workflow_id),
    each with what it waits for, whether more follow (``next_before`` names where), and the
    number of runs per status for the filters other than ``status``."""
    runs = app._list_waiting(
        status, name, limit + 1, before, queue=queue, since=since, parent_id=parent_id
    )
    counts = {s: app.count_workflows(s, name, queue, since, parent_id=parent_id) for s in STATUSES}
    page = runs[:limit]
    more = len(runs) > limit
    return {
        "runs": [{**info_json(info), "waiting_for": waiting} for info, waiting in page],
        "more": more,
        "next_before": encode_cursor(page[-1][0]) if more else None,
        "counts": counts,
    }


def run_answer(app: Any, workflow_id: str, **extra: Any) -> dict[str, Any]:
    """``GET /runs/{id}``, also what every write answers: the run as ``describe`` gives it
    (with ``extra`` fields, such as ``delivered`` after an event)."""
    return {**detail_json(app.describe(workflow_id)), **extra}


def journal_answer(
    app: Any, workflow_id: str, after: int | None = None, limit: int | None = None
) -> dict[str, Any]:
    """``GET /runs/{id}/journal``: the entries after the entry id ``after``, at most ``limit``
    (``more`` says whether others follow), and ``total``, the whole journal's size counted
    after the entries were read."""
    entries = app._journal_json(workflow_id, after, None if limit is None else limit + 1)
    more = limit is not None and len(entries) > limit
    entries = entries[:limit]
    whole = after is None and not more
    return {
        "workflow_id": workflow_id,
        "entries": entries,
        "more": more,
        "total": len(entries) if whole else app.journal_size(workflow_id),
    }


def approvals_answer(app: Any, *, pending: bool = True) -> dict[str, Any]:
    """``GET /approvals``: the requests, oldest first, undecided only unless ``pending`` is
    false."""
    return {"approvals": app._approvals_json(pending=pending)}
