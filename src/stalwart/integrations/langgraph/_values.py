"""How the saver stores bytes: compressed when it pays, and list values as chains of tails.

A channel whose value is a list (a conversation's messages) is stored per version as a *link*:
the version it extends (its base), how many of the base's elements it keeps, and the elements
it adds after them (its tail). A conversation that grows by a message per step stores each
message once, not once per checkpoint: what a thread stores grows with its state, not with
the square of it. A version whose list shares no prefix with the last one is a root (no
base, the whole list as its tail); so is every ``MAX_DEPTH``-th link, so that reading a value
never walks more than ``MAX_DEPTH`` rows.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Iterable, Sequence
from typing import NamedTuple

__all__ = [
    "LIST_TYPE",
    "MAX_DEPTH",
    "Element",
    "Link",
    "digest",
    "frame",
    "link",
    "list_digest",
    "pack",
    "rebuild",
    "unframe",
    "unpack",
]

LIST_TYPE = "stalwart:list"  # the type column of a link row; serde types never look like it
MAX_DEPTH = 1000
_RAW, _DEFLATED = b"r", b"d"
_COMPRESS_FROM = 24  # bytes; smaller values never shrink
_LENGTHS = struct.Struct(">BI")

# Deflate's preset dictionary: what LangGraph's serializer writes around every checkpoint and
# message (key names, class paths), so a small value does not pay for them. Values tagged
# ``d`` were deflated with exactly these bytes: never change them (a new dictionary needs a
# new tag, and ``unpack`` must keep reading this one).
_DICTIONARY = (
    b"\xa2ts\xd9 2026-01-01T00:00:00.000000+00:00\xb0channel_versions\xadversions_seen"
    b"\xa9__input__\x80\xa9__start__\xafbranch:to:\xb0updated_channels\x91\xa8messages"
    b"\x85\xa1v\x04\x81\xa8messages\x91\xa8__root__\xa9__pregel_tasks"
    b"\xc7\xac\x05\x94\xbclangchain_core.messages.tool\xabToolMessage\x89\xa7content"
    b"\xa8artifact\xc0\xa6status\xa7success\xactool_call_id"
    b"\xc7\x89\x05\x94\xbelangchain_core.messages.system\xadSystemMessage\x86\xa7content"
    b"\xaatool_calls\x91\x84\xa4name\xa4args\x81\xa2id\xa4type\xa9tool_call"
    b"\xb2invalid_tool_calls\x90\xaeusage_metadata\x83\xacinput_tokens\xadoutput_tokens"
    b"\xactotal_tokens\xbainput_token_details\xbboutput_token_details\xaamodel_name"
    b"\xadfinish_reason\xa4stop"
    b"\xc8\x01\x00\x05\x94\xbalangchain_core.messages.ai\xa9AIMessage\x89\xa7content"
    b"\xb1additional_kwargs\x80\xb1response_metadata\x80\xa4type\xa2ai\xa4name\xc0\xa2id"
    b"\xb3model_validate_json"
    b"\xc7\x88\x05\x94\xbdlangchain_core.messages.human\xacHumanMessage\x86\xa7content"
    b"\xb1additional_kwargs\x80\xb1response_metadata\x80\xa4type\xa5human\xa4name\xc0\xa2id"
    b"\xc0\xb3model_validate_json"
)

Element = tuple[str, bytes]  # one list element as the serializer wrote it: (type, bytes)


def pack(data: bytes) -> bytes:
    """``data`` as stored: deflated (raw, with the preset dictionary) when that makes it
    smaller, tagged either way."""
    if len(data) >= _COMPRESS_FROM:
        deflate = zlib.compressobj(6, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, _DICTIONARY)
        deflated = deflate.compress(data) + deflate.flush()
        if len(deflated) < len(data):
            return _DEFLATED + deflated
    return _RAW + data


def unpack(stored: bytes) -> bytes:
    """The bytes ``pack`` was given."""
    tag, body = stored[:1], stored[1:]
    if tag == _DEFLATED:
        inflate = zlib.decompressobj(-15, _DICTIONARY)
        return inflate.decompress(body) + inflate.flush()
    if tag == _RAW:
        return body
    raise ValueError(f"unknown value encoding {tag!r}")


def frame(elements: Iterable[Element]) -> bytes:
    """Elements as one byte string (a type's length fits a byte: serde types are short)."""
    parts = []
    for type_, data in elements:
        name = type_.encode()
        parts += [_LENGTHS.pack(len(name), len(data)), name, data]
    return b"".join(parts)


def unframe(framed: bytes) -> list[Element]:
    """The elements ``frame`` was given."""
    elements, at = [], 0
    while at < len(framed):
        size, length = _LENGTHS.unpack_from(framed, at)
        at += _LENGTHS.size
        name = framed[at : at + size].decode()
        at += size
        elements.append((name, framed[at : at + length]))
        at += length
    return elements


def digest(element: Element) -> bytes:
    """A short key of one element, to find the prefix a new version shares with its base."""
    return hashlib.blake2b(element[0].encode() + b"\0" + element[1], digest_size=16).digest()


def list_digest(digests: Iterable[bytes]) -> bytes:
    """The key of a whole list, from its elements' keys: a link row keeps it, so a saver that
    remembers a version's elements can check that the row still holds them."""
    return hashlib.blake2b(b"".join(digests), digest_size=16).digest()


class Link(NamedTuple):
    """One version of a list channel as stored: ``keep`` elements of ``base``, then ``tail``."""

    base: str | None
    keep: int
    tail: Sequence[Element]


def link(base: str | None, base_digests: Sequence[bytes], elements: Sequence[Element]) -> Link:
    """The link that stores ``elements`` on top of the version ``base`` (whose elements have
    ``base_digests``), or a root when they share no prefix."""
    keep = 0
    for known, element in zip(base_digests, elements, strict=False):
        if known != digest(element):
            break
        keep += 1
    if base is None or keep == 0:
        return Link(None, 0, elements)
    return Link(base, keep, elements[keep:])


def rebuild(chain: Iterable[tuple[int, bytes]]) -> list[Element]:
    """A list's elements from its links ``(keep, stored tail)``, root first."""
    elements: list[Element] = []
    for keep, stored in chain:
        elements = elements[:keep] + unframe(unpack(stored))
    return elements
