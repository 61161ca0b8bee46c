"""The JSON codec round-trips every type the contract lists, and refuses the rest."""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import uuid
from decimal import Decimal
from typing import Any

import pydantic
import pytest

from stalwart import SerializationError
from stalwart._serde import make_codec, restorer_for


class Color(enum.Enum):
    RED = "red"
    BLUE = 2


@dataclasses.dataclass
class Point:
    x: int
    when: dt.datetime


class Invoice(pydantic.BaseModel):
    number: str
    total: Decimal
    lines: list[Point] = []


CODEC = make_codec("json")
PICKLE = make_codec("pickle")  # reads both formats


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -3,
        2.5,
        "tëxt",
        [1, "a", None],
        {"a": {"b": [1, 2]}},
        (1, (2, 3)),
        {1, 2, 3},
        frozenset({"a"}),
        dt.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC),
        dt.datetime(2026, 1, 2, 3, 4, 5),
        dt.date(2026, 11, 29),
        Decimal("10.10"),
        uuid.UUID("12345678-1234-5678-1234-567812345678"),
        b"\x00\xffbytes",
        Color.RED,
        Color.BLUE,
        {"$dt": "not a tag", "$t": 1},
        {"nested": {"$set": [1]}},
        [],
        {},
    ],
)
def test_round_trip_is_exact(value: Any) -> None:
    back = CODEC.decode(CODEC.encode(value))
    assert back == value
    assert type(back) is type(value)


def test_dataclasses_and_models_become_dicts_and_are_restored_by_annotation() -> None:
    when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    raw = CODEC.decode(CODEC.encode(Point(1, when)))
    assert raw == {"x": 1, "when": when}
    restore = restorer_for(Point)
    assert restore is not None and restore(raw) == Point(1, when)
    invoice = Invoice(number="A-1", total=Decimal("9.99"), lines=[Point(2, when)])
    raw = CODEC.decode(CODEC.encode(invoice))
    assert isinstance(raw, dict)
    restore = restorer_for(list[Invoice])
    assert restore is not None and restore([raw]) == [invoice]
    assert restorer_for(int) is None and restorer_for(None) is None


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (object(), "object at value"),
        ({"a": [1, {2: 3}]}, "dict key int"),
        ({"a": lambda: 1}, "function at value['a']"),
        (dt.time(1, 2), "time at value"),
    ],
)
def test_unsupported_values_name_type_and_place(value: Any, fragment: str) -> None:
    with pytest.raises(SerializationError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        CODEC.encode(value)


def test_pickle_only_when_asked() -> None:
    class Custom:
        pass

    with pytest.raises(SerializationError):
        CODEC.encode(Custom())
    payload = make_codec("pickle").encode(Point(1, dt.datetime(2026, 1, 1)))
    assert PICKLE.decode(payload) == Point(1, dt.datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="serializer='yaml'"):
        make_codec("yaml")


@pytest.mark.parametrize("garbage", [b"", b"Xabc", b"J{not json", b"P\x00garbage", b"J\xff\xfe"])
def test_undecodable_payloads_raise(garbage: bytes) -> None:
    with pytest.raises(ValueError):
        PICKLE.decode(garbage)


class StrColor(str, enum.Enum):  # noqa: UP042 - the pre-3.11 spelling users still write
    RED = "red"


class Level(enum.StrEnum):
    HIGH = "high"


@pytest.mark.parametrize("member", [StrColor.RED, Level.HIGH])
def test_str_enums_round_trip_exactly(member: enum.Enum) -> None:
    codec = make_codec("json")
    value = codec.decode(codec.encode({"choice": member}))
    assert type(value["choice"]) is type(member)
