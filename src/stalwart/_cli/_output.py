"""What the command line reads: the times ``--before`` and ``--since`` take."""

from __future__ import annotations

import datetime as _dt
import re
from typing import TYPE_CHECKING, Any

import click

__all__ = ["WholeNumber", "parse_when"]

_AGO = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


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


if TYPE_CHECKING:  # generic since click 8.2; the package allows 8.1
    _IntType = click.ParamType[int, Any]
else:
    _IntType = click.ParamType


class WholeNumber(_IntType):
    """An integer option or argument whose error says what to pass (``--limit 20``), not
    click's "not a valid integer range"."""

    name = "integer"

    def __init__(self, low: int | None = None, high: int | None = None, *, example: int) -> None:
        self.low, self.high, self.example = low, high, example

    def _wants(self, param: click.Parameter | None) -> str:
        if self.low is not None and self.high is not None:
            span = f"give {self.low} to {self.high}"
        elif self.low is not None:
            span = f"give {self.low} or more"
        else:
            span = "give a whole number"
        flag = param.opts[0] + " " if isinstance(param, click.Option) and param.opts else ""
        return f"{span}, for example {flag}{self.example}"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        """``value`` as an int in range, else a usage error saying what to pass."""
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            try:
                number = int(str(value).strip(), 10)
            except ValueError:
                self.fail(f"{value!r} is not a whole number; {self._wants(param)}", param, ctx)
        if (self.low is not None and number < self.low) or (
            self.high is not None and number > self.high
        ):
            self.fail(f"{number} is out of range; {self._wants(param)}", param, ctx)
        return number
