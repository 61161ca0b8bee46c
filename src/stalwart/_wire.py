"""The JSON forms of the read models: what ``--json`` prints and what the HTTP API answers.

One function per value type, so the CLI and the console can never describe a run two ways.
Times are ISO 8601 in UTC; recorded inputs and outputs become plain JSON (models and
dataclasses as their fields, anything else JSON cannot hold as its ``str``).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
from typing import Any

from ._model import (
    ApprovalRequest,
    BreakerState,
    CurrentStep,
    JournalEntry,
    QueueInfo,
    RunDetail,
    Schedule,
    SharedWrite,
    Usage,
    Versioned,
    WorkerInfo,
    WorkflowInfo,
)

__all__ = [
    "approval_json",
    "breaker_json",
    "chunk_json",
    "detail_json",
    "dumps",
    "entry_json",
    "info_json",
    "iso",
    "jsonable",
    "queue_json",
    "schedule_json",
    "shared_write_json",
    "usage_json",
    "versioned_json",
    "worker_json",
]


def iso(when: _dt.datetime | None) -> str | None:
    """``when`` as ISO 8601 in UTC, or ``None``."""
    return None if when is None else when.astimezone(_dt.UTC).isoformat()


def jsonable(value: Any) -> Any:
    """A recorded value as plain JSON: containers recursively, models and dataclasses as
    their fields, datetimes as ISO 8601, bytes and anything else JSON cannot hold as ``str``."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, _dt.datetime):
        return iso(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return jsonable(dump(mode="json"))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    return str(value)


def chunk_json(chunk: Any) -> dict[str, Any]:
    """A ``StreamChunk`` as the HTTP API and ``stalwart tail --json`` print it (``at`` in ISO
    8601, UTC)."""
    return {
        "offset": chunk.offset,
        "stream": chunk.stream,
        "seq": chunk.seq,
        "attempt": chunk.attempt,
        "data": jsonable(chunk.data),
        "at": iso(chunk.at),
    }


def dumps(value: Any, *, indent: int | None = None) -> str:
    """``value`` (already made of the forms below) as a JSON string."""
    return json.dumps(jsonable(value), indent=indent)


def usage_json(usage: Usage) -> dict[str, Any]:
    """Usage totals: ``input_tokens``, ``output_tokens``, ``cost``, ``attempts``."""
    return dataclasses.asdict(usage)


def info_json(info: WorkflowInfo) -> dict[str, Any]:
    """A run as ``list_workflows`` gives it."""
    return {
        "workflow_id": info.workflow_id,
        "name": info.name,
        "status": info.status,
        "queue": info.queue,
        "created_at": iso(info.created_at),
        "updated_at": iso(info.updated_at),
        "error": info.error,
        "parent_id": info.parent_id,
    }


def _current_json(current: CurrentStep | None) -> dict[str, Any] | None:
    if current is None:
        return None
    return {
        "name": current.name,
        "seq": current.seq,
        "attempt": current.attempt,
        "started_at": iso(current.started_at),
        "heartbeat": jsonable(current.heartbeat),
        "holder": current.holder,
    }


def detail_json(detail: RunDetail) -> dict[str, Any]:
    """A run as ``describe`` gives it: the fields of :func:`info_json`, then ``waiting_for``,
    ``current`` (the step it executes now, or ``None``) and ``usage``."""
    return {
        **info_json(detail.info),
        "waiting_for": detail.waiting_for,
        "current": _current_json(detail.current),
        "usage": usage_json(detail.usage),
    }


def entry_json(entry: JournalEntry) -> dict[str, Any]:
    """One journal entry, every field of :class:`~stalwart.JournalEntry`."""
    return {
        "id": entry.id,
        "seq": entry.seq,
        "kind": entry.kind,
        "name": entry.name,
        "status": entry.status,
        "attempt": entry.attempt,
        "started_at": iso(entry.started_at),
        "finished_at": iso(entry.finished_at),
        "input": jsonable(entry.input),
        "output": jsonable(entry.output),
        "error": entry.error,
        "by": entry.by,
        "usage": None if entry.usage is None else usage_json(entry.usage),
        "idempotency_key": entry.idempotency_key,
    }


def approval_json(request: ApprovalRequest) -> dict[str, Any]:
    """An approval request, with its ``decision`` (``None`` while it waits)."""
    d = request.decision
    return {
        "workflow_id": request.workflow_id,
        "approval_id": request.approval_id,
        "subject": request.subject,
        "details": jsonable(request.details),
        "requested_at": iso(request.requested_at),
        "expires_at": iso(request.expires_at),
        "decision": None
        if d is None
        else {
            "approved": d.approved,
            "by": d.by,
            "reason": d.reason,
            "decided_at": iso(d.decided_at),
        },
    }


def breaker_json(breaker: BreakerState) -> dict[str, Any]:
    """A breaker's state as the fleet shares it."""
    fields = dataclasses.asdict(breaker)
    fields["opened_at"] = iso(breaker.opened_at)
    fields["retry_at"] = iso(breaker.retry_at)
    return fields


def queue_json(queue: QueueInfo) -> dict[str, Any]:
    """A queue: its limits and its pending and running runs."""
    return dataclasses.asdict(queue)


def worker_json(worker: WorkerInfo) -> dict[str, Any]:
    """A worker process, as its last renewal left it."""
    fields = dataclasses.asdict(worker)
    fields["started_at"] = iso(worker.started_at)
    fields["seen_at"] = iso(worker.seen_at)
    return fields


def schedule_json(schedule: Schedule) -> dict[str, Any]:
    """A schedule: its workflow, cron expression, time zone, catch-up policy and next tick."""
    fields = dataclasses.asdict(schedule)
    fields["next_tick"] = iso(schedule.next_tick)
    return fields


def versioned_json(key: str, versioned: Versioned) -> dict[str, Any]:
    """A shared key as read or written: ``key``, ``version`` and ``value``."""
    return {"key": key, "version": versioned.version, "value": jsonable(versioned.value)}


def shared_write_json(write: SharedWrite) -> dict[str, Any]:
    """One write of a shared key: ``key``, ``version``, ``value``, ``by`` and ``at``."""
    return {
        "key": write.key,
        "version": write.version,
        "value": jsonable(write.value),
        "by": write.by,
        "at": iso(write.at),
    }
