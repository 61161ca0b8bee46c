"""How the command line prints: tables (drawn with ``rich`` on a terminal, plain aligned text
when piped), local times with their zone, durations, and the times ``--before``/``--since``
take."""

from __future__ import annotations

import datetime as _dt
import re
import sys
from collections.abc import Sequence
from typing import Any

import click

__all__ = ["Table", "duration", "local_time", "parse_when"]

_AGO = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


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


def parse_when(text: str, option: str) -> _dt.datetime:
    """``--before``/``--since``: ISO 8601 (a naive time is local) or a duration back from now
    (``30s``, ``15m``, ``2h``, ``7d``, ``1w``)."""
    ago = _AGO.match(text.strip())
    if ago:
        seconds = float(ago[1]) * _UNIT[ago[2]]
        return _dt.datetime.now(_dt.UTC) - _dt.timedelta(seconds=seconds)
    try:
        when = _dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise click.BadParameter(
            f"{text!r}: write an ISO 8601 time (2026-12-01T09:30) or a duration back from now "
            "(15m, 2h, 7d)",
            param_hint=option,
        ) from None
    return when if when.tzinfo is not None else when.astimezone()


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
        widths = [
            max([len(h), *(len(row[i]) for row in self.rows)]) for i, h in enumerate(self.headers)
        ]
        for row in [self.headers, *self.rows]:
            cells = []
            for i, cell in enumerate(row):
                last = i == len(row) - 1
                if self.headers[i] in self.right:
                    cells.append(cell.rjust(widths[i]))
                else:
                    cells.append(cell if last else cell.ljust(widths[i]))
            click.echo("  ".join(cells).rstrip())
