"""What the command line reads: the times ``--before`` and ``--since`` take."""

from __future__ import annotations

import datetime as _dt
import re

import click

__all__ = ["parse_when"]

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
