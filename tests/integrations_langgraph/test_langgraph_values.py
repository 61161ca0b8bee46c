"""How StalwartSaver encodes what it stores: the encodings are compatibility data (rows written
today are read by every later release), so their bytes are pinned here."""

from __future__ import annotations

import hashlib
import os

import pytest

from stalwart.integrations.langgraph import _values
from stalwart.integrations.langgraph._values import (
    digest,
    frame,
    link,
    pack,
    rebuild,
    unframe,
    unpack,
)


def test_the_deflate_dictionary_never_changes() -> None:
    # A row tagged "d" was deflated with these exact bytes; a new dictionary needs a new tag.
    assert hashlib.sha256(_values._DICTIONARY).hexdigest() == (
        "01dfc5cfa6186eba2c27b6622dd3e1018196aafb4cc9e23ee356ec6ade1f4fba"
    )


@pytest.mark.parametrize(
    "data", [b"", b"x", b"short", b"abc" * 400, os.urandom(600), b"\xc7\x88\x05\x94" * 30]
)
def test_pack_round_trips_and_only_deflates_what_shrinks(data: bytes) -> None:
    stored = pack(data)
    assert unpack(stored) == data
    assert len(stored) <= len(data) + 1
    assert stored[:1] == (b"d" if len(stored) <= len(data) else b"r")


def test_pinned_encodings_still_read() -> None:
    assert unpack(b"rhello") == b"hello"
    assert unpack(pack(b"hello world, hello world, hello world")) == (
        b"hello world, hello world, hello world"
    )
    with pytest.raises(ValueError, match="unknown value encoding"):
        unpack(b"?abc")


def test_frames_keep_each_element_and_its_type() -> None:
    elements = [("msgpack", b"\x01\x02"), ("null", b""), ("bytes", b"x" * 70_000)]
    assert unframe(frame(elements)) == elements
    assert frame([]) == b""


def _els(*names: str) -> list[tuple[str, bytes]]:
    return [("msgpack", name.encode()) for name in names]


def test_a_link_keeps_the_prefix_it_shares_with_its_base() -> None:
    base = _els("a", "b", "c")
    digests = [digest(e) for e in base]
    assert link("v1", digests, _els("a", "b", "c", "d")) == ("v1", 3, _els("d"))
    assert link("v1", digests, _els("a", "B", "c")) == ("v1", 1, _els("B", "c"))
    assert link("v1", digests, _els("a")) == ("v1", 1, [])
    assert link("v1", digests, _els("z", "a")) == (None, 0, _els("z", "a"))  # nothing shared
    assert link(None, [], _els("a")) == (None, 0, _els("a"))


def test_a_chain_rebuilds_its_list_root_first() -> None:
    chain = [
        (0, pack(frame(_els("a", "b")))),
        (2, pack(frame(_els("c")))),
        (1, pack(frame(_els("B", "C")))),  # replaced b and c
        (3, pack(frame([]))),  # the same list again
    ]
    assert rebuild(chain) == _els("a", "B", "C")
