"""The HTTP API's long answers built straight from store rows: what ``approval_json`` and
``entry_json`` write of the typed values, without the typed values in between.

The approvals lists have no limit and a journal read without one is every entry, so each row's
cost is the answer's. A stored input, output or details that is plain JSON (written by the JSON
codec, nothing tagged in it) is parsed as it stands by orjson instead of being decoded to
Python values by the codec and walked back to JSON by ``jsonable``; anything else takes that
way. tests/integration/test_api_answers.py holds both ways to the same answer.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from typing import Any

from ._keyring import open_text
from ._model import Usage
from ._serde import JSON_TAG, Codec
from ._store.base import ApprovalRow, JournalRow
from ._views import Views, approval_details, decoded, error_text, journal_key, usage_of
from ._wire import jsonable

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - the ui extra installs it
    _orjson = None  # type: ignore[assignment]

__all__ = ["approvals_json", "journal_json"]

_HUGE = 2.0**63  # orjson reads an integer beyond 64 bits as a float of at least this size
_USAGE_FIELDS = tuple(f.name for f in dataclasses.fields(Usage))  # usage_json's, all scalars
_UTC = _dt.UTC
_from_epoch = _dt.datetime.fromtimestamp


def _plain(payload: bytes) -> tuple[bool, Any]:
    """``(True, value)`` when ``payload`` is JSON whose value is itself: written by the JSON
    codec, no tagged value in it (``"$``), no non-finite float (orjson refuses one) and no
    integer orjson reads inexactly."""
    # b"$" first: memchr finds a rare byte at memory speed, where a search for '"$' stops at
    # every quote (4.2 MB of a journal's payloads: 0.3 ms against 5.9)
    if _orjson is None or payload[:1] != JSON_TAG or (b"$" in payload and b'"$' in payload):
        return False, None
    try:
        value = _orjson.loads(memoryview(payload)[1:])  # no copy of a long payload
        return not _has_huge(value), value
    except (ValueError, RecursionError):  # orjson.JSONDecodeError is a ValueError
        return False, None


def _has_huge(value: Any) -> bool:
    """Whether ``value`` holds a float as large as an integer orjson read inexactly (one
    written as a float takes the codec's way too, which is merely slower)."""
    kind = type(value)
    if kind is float:
        return not -_HUGE < value < _HUGE
    if kind is dict:
        value = value.values()
    elif kind is not list:
        return False
    return any(_has_huge(v) for v in value)


def _iso(seconds: float | None) -> str | None:
    return None if seconds is None else _from_epoch(seconds, _UTC).isoformat()


def approvals_json(views: Views, pending: bool) -> list[dict[str, Any]]:
    """``approval_json`` of each of ``views.approvals(pending)``."""
    codec = views.runtime.codec
    return [_approval(codec, row) for row in views.store.list_approvals(pending=pending)]


def _approval(codec: Codec, row: ApprovalRow) -> dict[str, Any]:
    details: Any = None
    if row.details is not None:
        plain, details = _plain(row.details)
        if not plain:
            details = jsonable(approval_details(codec, row))
    decided = row.decided_at is not None and row.approved is not None
    return {
        "workflow_id": row.workflow_id,
        "approval_id": row.approval_id,
        "subject": row.subject,
        "details": details,
        "requested_at": _iso(row.requested_at),
        "expires_at": _iso(row.expires_at),
        "decision": {
            "approved": bool(row.approved),
            "by": row.by or "",
            "reason": open_text(codec.opener, row.reason),
            "decided_at": _iso(row.decided_at),
        }
        if decided
        else None,
    }


def journal_json(
    views: Views, workflow_id: str, after: int | None, limit: int | None
) -> list[dict[str, Any]]:
    """``entry_json`` of each of ``views.journal(workflow_id, after, limit)``."""
    codec = views.runtime.codec
    return [
        _entry(codec, workflow_id, row) for row in views.journal_rows(workflow_id, after, limit)
    ]


def _entry(codec: Codec, workflow_id: str, row: JournalRow) -> dict[str, Any]:
    usage = usage_of(workflow_id, row)  # first, as entry_of reads it: a corrupt one raises
    return {
        "id": row.id,
        "seq": row.seq,
        "kind": row.kind,
        "name": row.name,
        "status": row.status,
        "attempt": row.attempt,
        "started_at": _iso(row.started_at),
        "finished_at": _iso(row.finished_at),
        "input": _value(codec, workflow_id, row, "input", row.input),
        "output": _value(codec, workflow_id, row, "output", row.output),
        "error": error_text(row.error, codec.opener),
        "by": row.by,
        "usage": None if usage is None else {f: getattr(usage, f) for f in _USAGE_FIELDS},
        "idempotency_key": journal_key(workflow_id, row.kind, row.status, row.position),
    }


def _value(
    codec: Codec, workflow_id: str, row: JournalRow, label: str, stored: bytes | None
) -> Any:
    if stored is None:
        return None
    plain, value = _plain(stored)
    if plain:
        return value
    return jsonable(decoded(codec, workflow_id, row, label, stored))
