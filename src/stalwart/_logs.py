"""How a worker process writes its logs (and Python's warnings, and the tracebacks of threads):
``text`` (one line per record) or ``json`` (one JSON object per line with the keys ``ts``,
``level``, ``msg``, ``workflow_id``, ``step``, ``seq``, ``attempt`` and ``worker``, ``null``
when not applicable).

The run's fields come from the record's ``extra`` (the engine's own lines set them), else from
the run and step the line was written in (``CURRENT_RUN``/``CURRENT_STEP``), so a line that a
step's own code logs, through any logger, carries its run, step, seq and attempt too. No field
is parsed out of a message.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import sys
import threading
from typing import Any

from ._engine.invocation import CURRENT_RUN, CURRENT_STEP

__all__ = ["FORMATS", "RunFields", "configure"]

FORMATS = ("text", "json")
_KEYS = ("workflow_id", "step", "seq", "attempt", "worker")


class RunFields(logging.Filter):
    """Gives every record the run's fields: from ``extra``, else from the run and step it was
    written in (``worker``: the id of the worker executing that run, else ``worker``)."""

    def __init__(self, worker: str | None = None) -> None:
        super().__init__()
        self.worker = worker

    def filter(self, record: logging.LogRecord) -> bool:
        step = CURRENT_STEP.get()
        inv = step.invocation if step is not None else CURRENT_RUN.get()
        known = record.__dict__
        if "workflow_id" not in known:
            record.workflow_id = inv.workflow_id if inv is not None else None
        if "step" not in known:
            record.step = step.name if step is not None else None
            record.seq = step.seq if step is not None else None
            record.attempt = step.attempt if step is not None else None
        for key in ("seq", "attempt"):
            known.setdefault(key, None)
        if known.get("worker") is None:
            record.worker = inv.runtime.owner if inv is not None else self.worker
        return True


class JsonLines(logging.Formatter):
    """One JSON object per record, on one line (a traceback is the ``exc`` key's value)."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = _dt.datetime.fromtimestamp(record.created, _dt.UTC)
        line: dict[str, Any] = {
            "ts": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "msg": record.getMessage(),
        }
        for key in _KEYS:
            line[key] = getattr(record, key, None)
        if record.name != "stalwart":
            line["logger"] = record.name
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        elif record.stack_info:
            line["exc"] = self.formatStack(record.stack_info)
        return json.dumps(line, default=str)


def configure(level: str, fmt: str, *, stream: Any = None) -> RunFields:
    """Send every log record of this process (and Python's warnings) to ``stream`` (stderr)
    at ``level`` in ``fmt``; returns the filter that fills in the run's fields."""
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r}: use one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    fields = RunFields()
    handler.addFilter(fields)
    text = logging.Formatter("%(asctime)s %(levelname)s %(message)s")
    handler.setFormatter(JsonLines() if fmt == "json" else text)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    logging.captureWarnings(True)
    threading.excepthook = _uncaught  # a thread's traceback is a log line too, not raw text
    return fields


def _uncaught(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "?"
    logging.getLogger("stalwart").error(
        "thread %s raised %s", name, args.exc_type.__name__, exc_info=args.exc_value
    )
