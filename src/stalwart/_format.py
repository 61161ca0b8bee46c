"""How runs and journals read as text: the CLI, the demo and the console share these."""

from __future__ import annotations

import datetime as _dt
import json
from typing import Any

from ._model import EntryKind

__all__ = ["format_time", "format_timeline", "short"]


def format_time(value: _dt.datetime | None) -> str:
    """A time as the CLI and the demo print it (``-`` for none)."""
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def short(value: Any, width: int = 48) -> str:
    """A value as JSON, cut to ``width`` characters."""
    text = "" if value is None else json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def format_timeline(entries: list[Any]) -> list[str]:
    """Readable lines for a run's journal, with the idempotency key of each step (keys count
    positions from 0, seqs start at 1: print the key rather than have anyone derive it)."""
    width = max([3, *(len(e.idempotency_key or "") for e in entries)])
    lines = [
        f"{'SEQ':>4}  {'KIND':12} {'NAME':24} {'STATUS':10} {'TRY':>3}  {'FINISHED':19}  "
        f"{'KEY':{width}}  DETAIL"
    ]
    for e in entries:
        if e.kind == EntryKind.OPERATOR:
            detail = f"by {e.by}" + (f": {short(e.input)}" if e.input is not None else "")
        else:
            detail = e.error if e.error else short(e.output)
        lines.append(
            f"{'' if e.seq is None else e.seq:>4}  {e.kind:12} {e.name:24} {e.status:10} "
            f"{'' if e.attempt is None else e.attempt:>3}  {format_time(e.finished_at):19}  "
            f"{e.idempotency_key or '':{width}}  {detail}"
        )
    return lines
