"""The one rule every duration, limit and name of the API is checked by (``_inputs``), as
truth tables."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import pytest

from stalwart import Budget, Stalwart, UsageError
from stalwart._inputs import CENTURY, count, limit, name, number, seconds, text


@pytest.mark.parametrize(
    ("value", "finite", "as_limit"),
    [
        (0, 0.0, None),  # None: refused as a limit that must be > 0
        (1.5, 1.5, 1.5),
        (dt.timedelta(minutes=2), 120.0, 120.0),
        (math.inf, None, math.inf),
        (dt.timedelta.max, None, math.inf),
        (10**400, None, math.inf),
        (CENTURY, None, math.inf),
        (CENTURY - 1, CENTURY - 1, CENTURY - 1),
        (math.nan, None, None),
        (-1, None, None),
        (dt.timedelta(seconds=-1), None, None),
        (True, None, None),
        ("5", None, None),
        (None, None, None),
    ],
    ids=lambda v: repr(v)[:24],
)
def test_seconds(value: Any, finite: float | None, as_limit: float | None) -> None:
    def outcome(**kw: Any) -> float | None:
        try:
            return seconds(value, "t", **kw)
        except UsageError as exc:
            shown = repr(value) if len(repr(value)) <= 60 else f"{repr(value)[:40]}..."
            assert str(exc).startswith(f"t={shown}: pass seconds (a ")
            return None

    assert outcome() == finite
    assert outcome(positive=True, unlimited=True) == as_limit


def test_limits_read_inf_as_none_and_say_what_they_accept() -> None:
    assert limit(None, "t") is None and limit(math.inf, "t") is None and limit(2, "t") == 2.0
    assert number(math.inf, "max_cost") is None and number(0.5, "max_cost") == 0.5
    assert count(math.inf, "max_steps") is None and count(3, "max_steps") == 3
    with pytest.raises(UsageError, match=r"^Budget\(max_cost=nan\): pass a number > 0, or"):
        number(math.nan, "max_cost", "Budget", positive=True)
    with pytest.raises(UsageError, match=r"^Budget\(max_steps=1.5\): pass an int >= 1, or None"):
        count(1.5, "max_steps", "Budget")


@pytest.mark.parametrize(
    ("value", "code", "index"),
    [("a\x00b", "U+0000", 1), ("\n", "U+000A", 0), ("x\x7f", "U+007F", 1), ("\x9f", "U+009F", 0)],
)
def test_names_refuse_control_characters_and_say_which(value: str, code: str, index: int) -> None:
    with pytest.raises(UsageError) as info:
        name(value, "workflow_id")
    assert str(info.value).startswith(f"workflow_id={value!r}: holds a control character, {code}")
    assert f"at index {index};" in str(info.value)


def test_names_take_any_other_text_and_free_text_takes_newlines() -> None:
    for ok in ("a b/ü?#%", "日本語", "emoji 🙂", "x" * 1000, "a\u200bb"):
        assert name(ok, "name") == ok
    assert text("two\nlines\tand a tab", "reason") == "two\nlines\tand a tab"
    with pytest.raises(UsageError, match="lone surrogate, U\\+D800"):
        name("\ud800", "name")
    with pytest.raises(UsageError, match=r"reason='a\\x00': holds a control character, U\+0000"):
        text("a\x00", "reason")


def test_a_number_limit_is_not_a_duration_a_big_one_stays_a_limit() -> None:
    """The century rule is for durations: a budget of 5e9 dollars is still a limit."""
    assert number(5e9, "max_cost") == 5e9
    assert Budget(max_cost=5e9).max_cost == 5e9
    assert number(math.inf, "max_cost") is None


def test_a_name_that_is_not_a_str_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="pass a str"):
        name(5, "workflow_id")  # type: ignore[arg-type]


@pytest.mark.parametrize("price", [(math.nan, 1.0), (1.0, math.inf)])
def test_prices_must_be_finite(price: tuple[float, float]) -> None:
    with pytest.raises(UsageError, match="prices="):
        Stalwart("memory://", prices={"m": price})


def test_an_approval_subject_is_text_for_people_newlines_and_all() -> None:
    """A subject is a label (newlines kept, as an earlier release recorded them); only what no
    store can keep is refused."""
    assert text("Refund\nfor order 42", "subject") == "Refund\nfor order 42"
    with pytest.raises(UsageError, match="U\\+0000"):
        text("a\x00b", "subject")
