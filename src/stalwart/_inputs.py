"""What the public API is given, checked by one set of rules: durations, limits and names.

Durations are seconds, an ``int`` or a ``float``, or a ``timedelta``. A duration that is a
limit (a timeout, a cap on a delay) takes ``float('inf')`` or ``timedelta.max`` for no limit;
one the engine counts with (a lease, a breaker's window and cooldown, a queue's period, a first
retry delay) must be finite. NaN, negative values, ``bool`` and anything else raise
:class:`UsageError` saying what was given and what is accepted. A limit on a number (a budget's
cost or tokens) follows the same rule.

Names (run ids, workflow, step, queue, event, schedule, breaker and patch names, shared keys,
approval ids and subjects, dedup keys, who acted) are text without control characters: NUL
cannot be stored by PostgreSQL, the others (newlines, tabs, escapes) garble logs and terminals,
and a lone surrogate cannot be written as UTF-8. They are refused before any store is asked.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from typing import Any

from ._errors import UsageError

__all__ = ["CENTURY", "count", "given", "limit", "name", "number", "seconds", "text"]

# A duration of a century or more has no end that matters: as a limit it is no limit (and a
# thread's join or a datetime could not take much more), and it is never a usable interval.
CENTURY = 3_155_760_000.0

_NO_LIMIT = "float('inf') for no limit"
_REFUSED = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_REFUSED_IN_TEXT = re.compile("[\x00\ud800-\udfff]")


def _accepted(unit: str, positive: bool, unlimited: bool) -> str:
    kind = f"{'' if unlimited else 'finite '}number {'> 0' if positive else '>= 0'}"
    what = f"seconds (a {kind} or a timedelta)" if unit == "seconds" else f"a {kind}"
    return f"pass {what}, or {_NO_LIMIT}" if unlimited else f"pass {what}"


def given(what: str, value: Any, call: str | None = None) -> str:
    """How an error shows the argument: ``what=value``, or ``call(what=value)``."""
    shown = repr(value) if len(repr(value)) <= 60 else f"{repr(value)[:40]}..."
    return f"{what}={shown}" if call is None else f"{call}({what}={shown})"


def _amount(
    value: Any, what: str, call: str | None, *, unit: str, positive: bool, unlimited: bool
) -> float:
    refused = f"{given(what, value, call)}: {_accepted(unit, positive, unlimited)}"
    if unit == "seconds" and isinstance(value, _dt.timedelta):
        amount = math.inf if value == _dt.timedelta.max else value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(refused)
    else:
        try:
            amount = float(value)
        except OverflowError:  # an int too large for a float
            amount = math.inf if value > 0 else -math.inf
    if math.isnan(amount) or amount < 0 or (positive and amount == 0):
        raise UsageError(refused)
    if amount == math.inf or (unit == "seconds" and amount >= CENTURY):
        if not unlimited:
            raise UsageError(refused)
        return math.inf
    return amount


def seconds(
    value: Any,
    what: str,
    call: str | None = None,
    *,
    positive: bool = False,
    unlimited: bool = False,
) -> float:
    """``value`` as seconds: ``>= 0`` (``> 0`` when ``positive``), finite unless ``unlimited``,
    where ``inf``, ``timedelta.max`` and anything of a century or more are ``math.inf``. The error
    names the argument ``what`` (of ``call``, when given)."""
    return _amount(value, what, call, unit="seconds", positive=positive, unlimited=unlimited)


def limit(
    value: Any, what: str, call: str | None = None, *, positive: bool = False
) -> float | None:
    """A duration that is a limit, as seconds, or ``None`` for no limit (``None``, ``inf``,
    ``timedelta.max``)."""
    if value is None:
        return None
    amount = seconds(value, what, call, positive=positive, unlimited=True)
    return None if amount == math.inf else amount


def number(
    value: Any, what: str, call: str | None = None, *, positive: bool = False
) -> float | None:
    """A limit on a number (not a duration): ``None`` for no limit (``None``, ``inf``)."""
    if value is None:
        return None
    amount = _amount(value, what, call, unit="number", positive=positive, unlimited=True)
    return None if amount == math.inf else amount


def count(value: Any, what: str, call: str | None = None, *, minimum: int = 1) -> int | None:
    """A limit on a count: an ``int >= minimum``, or ``None`` for no limit (``None``,
    ``float('inf')``)."""
    if value is None or (isinstance(value, float) and value == math.inf):
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UsageError(
            f"{given(what, value, call)}: pass an int >= {minimum}, or None for no limit"
        )
    return value


def name(value: str, what: str, call: str | None = None) -> str:
    """``value``, a str, refused when it holds a control character or a lone surrogate."""
    return _refuse(
        _REFUSED,
        value,
        (what, call),
        "ids and names are text without control characters (NUL, newlines, tabs, escapes)",
    )


def text(value: str, what: str, call: str | None = None) -> str:
    """``value``, free text (a reason), refused when it holds NUL or a lone surrogate, which no
    store can keep; newlines and tabs are text here."""
    return _refuse(
        _REFUSED_IN_TEXT,
        value,
        (what, call),
        "pass text without NUL characters or lone surrogates",
    )


def _refuse(
    refused: re.Pattern[str], value: str, named: tuple[str, str | None], accepted: str
) -> str:
    if not isinstance(value, str):
        raise UsageError(f"{given(named[0], value, named[1])}: pass a str")
    found = refused.search(value)
    if found is None:
        return value
    shown = given(named[0], value, named[1])  # only for the error: most values pass
    char = found.group()
    kind = "a lone surrogate" if "\ud800" <= char <= "\udfff" else "a control character"
    raise UsageError(
        f"{shown}: holds {kind}, U+{ord(char):04X}, at index {found.start()}; {accepted}"
    )
