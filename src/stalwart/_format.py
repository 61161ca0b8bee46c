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

__all__ = [
    "Table",
    "cut",
    "duration",
    "local_time",
    "one_line",
    "short",
    "timeline",
    "usage_line",
]


def short(value: Any, width: int | None = 48) -> str:
    """A value as JSON, cut to ``width`` characters (``None``: whole)."""
    text = "" if value is None else json.dumps(value, default=str)
    return cut(text, width)


_ESCAPED = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F]} | {
    0x09: "\\t",
    0x0A: "\\n",
    0x0D: "\\r",
}


def one_line(text: str) -> str:
    """``text`` on one line: a newline, tab or other control character written as its escape
    (``\\n``), so a piped row stays one line however free the text in it (an approval's
    subject may hold newlines)."""
    return text.translate(_ESCAPED)


def cut(text: str, width: int | None) -> str:
    """``text`` cut to ``width`` characters, the last one ``…`` (``None``: whole)."""
    return text if width is None or len(text) <= width else text[: width - 1] + "…"


def usage_line(usage: Any, *, under_way: bool = False) -> str:
    """A run's ``Usage`` in words; totals that miss an interrupted attempt's usage
    (``partial``) read as a lower bound: ``≥ 360 tokens in, ≥ 80 out, ...``; ``under_way``:
    a step attempt is running, counted apart (``0 step attempt(s) finished, 1 under way``)."""
    at_least = "≥ " if usage.partial else ""
    text = (
        f"{at_least}{usage.input_tokens} tokens in, {at_least}{usage.output_tokens} out, cost "
        f"{at_least}{usage.cost:.6f}, {usage.attempts} step attempt(s)"
    )
    if under_way:
        text += " finished, 1 under way"
    if usage.partial:
        text += " (a crash interrupted an attempt before its usage was recorded)"
    return text


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
    columns (the last column is not padded, so piped output has no trailing spaces).

    ``wrap``: columns that, on a terminal, wrap within the screen's width rather than being
    cut (the others are kept on one line); ``ratio``: how much of the width left over by the
    one-line columns a wrapping column gets against the others' 1 each, and ``min_width`` the
    least it keeps while the screen allows, so a long key cannot squeeze the detail away;
    ``clip``: the most characters a column's cells keep in plain text (piped output stays one
    line per row)."""

    def __init__(
        self,
        *headers: str,
        right: Sequence[str] = (),
        wrap: Sequence[str] = (),
        ratio: dict[str, int] | None = None,
        min_width: dict[str, int] | None = None,
        clip: dict[str, int] | None = None,
    ) -> None:
        self.headers = list(headers)
        self.right = set(right)
        self.wrap = set(wrap)
        self.ratio = dict(ratio or {})
        self.min_width = dict(min_width or {})
        self.clip = dict(clip or {})
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
                console = Console()
                widths = self.widths(console.width) if self.wrap else {}
                table = RichTable(box=None, header_style="bold", pad_edge=False)
                for header in self.headers:
                    table.add_column(
                        header,
                        justify="right" if header in self.right else "left",
                        overflow="fold" if header in self.wrap else "ellipsis",
                        no_wrap=bool(self.wrap) and header not in self.wrap,
                        width=widths.get(header),
                    )
                for row in self.rows:
                    table.add_row(*row)
                console.print(table)
                return
        for line in self.lines():
            click.echo(line)

    def widths(self, screen: int) -> dict[str, int]:
        """The widths of the ``wrap`` columns on a screen ``screen`` characters wide: each its
        whole width if all fit beside the one-line columns; else each first keeps its
        ``min_width`` (8 unless given; a given one shrinks to what the screen leaves), and the
        rest of the room goes out by ``ratio``, no column past its whole width."""
        natural = {
            h: max(_cells(h), *(_cells(row[i]) for row in self.rows))
            for i, h in enumerate(self.headers)
        }
        room = screen - 2 * (len(self.headers) - 1)  # one space either side between columns
        room -= sum(n for h, n in natural.items() if h not in self.wrap)
        whole = {h: n for h, n in natural.items() if h in self.wrap}
        if sum(whole.values()) <= room:
            return {}
        shares = {h: min(n, 8) for h, n in whole.items() if h not in self.min_width}
        for h in [h for h in whole if h in self.min_width]:
            shares[h] = min(whole[h], self.min_width[h], room - sum(shares.values()))
        if min(shares.values()) < min(8, *whole.values()):
            return {}  # too narrow to share out: rich's own squeeze
        room -= sum(shares.values())
        while room > 0:
            growing = [h for h in whole if shares[h] < whole[h]]
            weight = sum(self.ratio.get(h, 1) for h in growing)
            for h in growing:
                more = min(whole[h] - shares[h], max(1, room * self.ratio.get(h, 1) // weight))
                more = min(more, room)
                shares[h] += more
                room -= more
        return shares

    def plain(self, row: list[str]) -> list[str]:
        """``row``'s cells as plain text prints them: each on one line (see :func:`one_line`)
        and cut to its column's ``clip``."""
        return [cut(one_line(cell), self.clip.get(self.headers[i])) for i, cell in enumerate(row)]

    def lines(self) -> list[str]:
        """The table as plain aligned text (no trailing spaces)."""
        rows = [self.plain(row) for row in self.rows]
        widths = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(self.headers)]
        lines = []
        for row in [self.headers, *rows]:
            cells = []
            for i, cell in enumerate(row):
                last = i == len(row) - 1
                if self.headers[i] in self.right:
                    cells.append(cell.rjust(widths[i]))
                else:
                    cells.append(cell if last else cell.ljust(widths[i]))
            lines.append("  ".join(cells).rstrip())
        return lines


def _cells(text: str) -> int:
    """How many screen cells the widest line of ``text`` takes."""
    from rich.cells import cell_len

    return max(cell_len(line) for line in text.split("\n"))


def _words(e: Any, previous: Any, width: int | None) -> tuple[str, str]:
    """What a journal entry says happened: a status word and a detail in words, its values
    cut to ``width`` characters (``None``: whole)."""
    if e.kind == "run":
        out = e.output if isinstance(e.output, dict) else {}
        if e.name == "started":
            return "started", f"with {short(e.input, width)}" if e.input else ""
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
                return "completed", short(e.output, width) if e.output is not None else ""
            ended = "cancelled" if (e.error or "").startswith("WorkflowCancelled") else "failed"
            return ended, e.error or ""
        if e.error:
            return e.name, e.error
        return e.name, short(e.output, width) if e.output is not None else ""
    if e.kind == "operator":
        return e.name, f"by {e.by}" + (f": {short(e.input, width)}" if e.input is not None else "")
    if e.kind == "shared" and e.status in ("completed", "reused"):
        if e.output is None:  # a compare-and-set that found the version moved
            return e.status, "not written: the version moved since it was read"
        if isinstance(e.output, dict) and "version" in e.output:
            if not e.output["version"]:
                return e.status, "never written (version 0)"
            value = short(e.output.get("value"), width)
            return e.status, f"version {e.output['version']}: {value}"
    if e.kind == "send" and e.status != "failed" and isinstance(e.input, dict):
        sent = "delivered to" if e.output is True else "already delivered to"
        return (
            e.status,
            f"{sent} {e.input.get('workflow_id')} (dedup key {e.input.get('dedup_key')})",
        )
    if e.attempt == 0 and e.status == "failed":
        return "reset", f"{e.error}: the next attempt starts afresh" if e.error else "reset"
    return e.status, e.error if e.error else short(e.output, width)


def _detached(e: Any, detached: frozenset[str]) -> str | None:
    """The id of the detached child a ``child`` entry started (its row stays ``scheduled``:
    the parent never waits on it), else ``None``."""
    if e.kind != "child" or e.status != "scheduled" or not isinstance(e.input, dict):
        return None
    child = e.input.get("workflow_id")
    return child if isinstance(child, str) and child in detached else None


def timeline(
    entries: list[Any], *, full: bool = False, detached: frozenset[str] = frozenset()
) -> Table:
    """A run's journal as a table: seq, what happened in words, when, for how long, the
    idempotency key of each step. On a terminal its ``NAME``, ``FINISHED``, ``KEY`` and
    ``DETAIL`` wrap (``DETAIL`` gets the most room, however long the key); in plain text
    ``DETAIL`` is cut to 90 characters; its values are cut to 200. With ``full`` nothing is
    cut: every column wraps on a terminal. A child entry of a run in ``detached`` (the ids of
    the run's detached children) says ``detached``."""
    headers = ("SEQ", "KIND", "NAME", "STATUS", "TRY", "FINISHED", "DURATION", "KEY", "DETAIL")
    table = Table(
        *headers,
        right=("SEQ", "TRY"),
        wrap=tuple(headers) if full else ("NAME", "FINISHED", "KEY", "DETAIL"),
        ratio={"DETAIL": 3},
        min_width={"DETAIL": 30, "FINISHED": 12},  # a time wraps at its space: 2 lines
        clip=None if full else {"DETAIL": 90},
    )
    previous = None
    for e in entries:
        status, detail = _words(e, previous, None if full else 200)
        if (child := _detached(e, detached)) is not None:
            status, detail = (
                "detached",
                f"{child}: its parent's end, cancel and retry leave it alone",
            )
        took = None
        if e.started_at is not None and e.finished_at is not None and e.kind == "step":
            took = (e.finished_at - e.started_at).total_seconds()
        shown = duration(took) if took is not None else ""
        if took is not None and (e.error or "").startswith("AttemptInterrupted"):
            shown = f"~{shown}" if took > 0 else "-"  # until its last sign of life, or unknown
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
