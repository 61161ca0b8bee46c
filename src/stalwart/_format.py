"""How runs and journals read as text: the CLI, the demo and the console share these: local
times with their zone, durations, values cut short, tables (drawn with ``rich`` on a terminal,
plain aligned text when piped), and a run's timeline in words."""

from __future__ import annotations

import datetime as _dt
import json
import sys
from collections.abc import Sequence
from typing import Any

import click

__all__ = ["Table", "duration", "local_time", "short", "timeline"]


def short(value: Any, width: int = 48) -> str:
    """A value as JSON, cut to ``width`` characters."""
    text = "" if value is None else json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def local_time(value: _dt.datetime | None) -> str:
    """A time in this machine's zone, the zone named (``-`` for none)."""
    if value is None:
        return "-"
    return value.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")


def duration(seconds: float | None) -> str:
    """``0.25s``, ``12.0s``, ``3m04s``, ``2h05m``, ``3d04h`` (``-`` for none)."""
    if seconds is None or seconds < 0:
        return "-"
    if seconds < 60:
        return f"{seconds:.2f}s" if seconds < 10 else f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


class Table:
    """Rows under headers; ``echo`` draws them with rich on a terminal, else as plain text
    columns (the last column is not padded, so piped output has no trailing spaces)."""

    def __init__(self, *headers: str, right: Sequence[str] = ()) -> None:
        self.headers = list(headers)
        self.right = set(right)
        self.rows: list[list[str]] = []

    def add(self, *cells: Any) -> None:
        self.rows.append(["" if cell is None else str(cell) for cell in cells])

    def echo(self) -> None:
        if sys.stdout.isatty():
            try:
                from rich.console import Console
                from rich.table import Table as RichTable
            except ImportError:  # pragma: no cover - rich is a dependency
                pass
            else:
                table = RichTable(box=None, header_style="bold", pad_edge=False)
                for header in self.headers:
                    table.add_column(header, justify="right" if header in self.right else "left")
                for row in self.rows:
                    table.add_row(*row)
                Console().print(table)
                return
        for line in self.lines():
            click.echo(line)

    def lines(self) -> list[str]:
        """The table as plain aligned text (no trailing spaces)."""
        widths = [
            max([len(h), *(len(row[i]) for row in self.rows)]) for i, h in enumerate(self.headers)
        ]
        lines = []
        for row in [self.headers, *self.rows]:
            cells = []
            for i, cell in enumerate(row):
                last = i == len(row) - 1
                if self.headers[i] in self.right:
                    cells.append(cell.rjust(widths[i]))
                else:
                    cells.append(cell if last else cell.ljust(widths[i]))
            lines.append("  ".join(cells).rstrip())
        return lines


def _words(e: Any, previous: Any) -> tuple[str, str]:
    """What a journal entry says happened: a status word and a detail in words."""
    if e.kind == "run":
        out = e.output if isinstance(e.output, dict) else {}
        if e.name == "started":
            return "started", f"with {short(e.input, 200)}" if e.input else ""
        if e.name == "resumed":
            holder = out.get("recovered_from")
            if holder:
                return "recovered", f"its holder {holder} stopped or its lease lapsed"
            after = previous is not None and previous.kind == "run" and previous.name == "started"
            return "executing", "a worker took it" if after else "a worker took it up again"
        if e.name == "suspended":
            what = str(out.get("waiting_for") or "timer").replace(":", " ", 1)
            until = out.get("until")
            return "waiting", f"for {what}" + (f" until {until}" if until else "")
        if e.name == "finished":
            if e.status == "completed":
                return "completed", short(e.output, 200) if e.output is not None else ""
            ended = "cancelled" if (e.error or "").startswith("WorkflowCancelled") else "failed"
            return ended, e.error or ""
        if e.error:
            return e.name, e.error
        return e.name, short(e.output, 200) if e.output is not None else ""
    if e.kind == "operator":
        return e.name, f"by {e.by}" + (f": {short(e.input, 200)}" if e.input is not None else "")
    if e.kind == "shared" and e.status in ("completed", "reused"):
        if e.output is None:  # a compare-and-set that found the version moved
            return e.status, "not written: the version moved since it was read"
        if isinstance(e.output, dict) and "version" in e.output:
            if not e.output["version"]:
                return e.status, "never written (version 0)"
            value = short(e.output.get("value"), 160)
            return e.status, f"version {e.output['version']}: {value}"
    if e.attempt == 0 and e.status == "failed":
        return "reset", f"{e.error}: the next attempt starts afresh" if e.error else "reset"
    return e.status, e.error if e.error else short(e.output, 200)


def timeline(entries: list[Any], *, full: bool = False) -> Table:
    """A run's journal as a table: seq, what happened in words, when, for how long, the
    idempotency key of each step."""
    table = Table(
        "SEQ",
        "KIND",
        "NAME",
        "STATUS",
        "TRY",
        "FINISHED",
        "DURATION",
        "KEY",
        "DETAIL",
        right=("SEQ", "TRY"),
    )
    previous = None
    for e in entries:
        status, detail = _words(e, previous)
        took = None
        if e.started_at is not None and e.finished_at is not None and e.kind == "step":
            took = (e.finished_at - e.started_at).total_seconds()
        shown = duration(took) if took is not None else ""
        if took is not None and (e.error or "").startswith("AttemptInterrupted"):
            shown = f"~{shown}" if took > 0 else "-"  # until its last sign of life, or unknown
        if not full:
            detail = detail if len(detail) <= 90 else detail[:89] + "…"
        table.add(
            "" if e.seq is None else e.seq,
            e.kind,
            e.name,
            status,
            "" if not e.attempt else e.attempt,
            local_time(e.finished_at) if e.finished_at else "-",
            shown,
            e.idempotency_key or "",
            detail,
        )
        previous = e
    return table
