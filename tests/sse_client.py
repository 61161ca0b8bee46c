"""A reader of Server-Sent Events for the tests: the events of an ``httpx`` streamed answer,
parsed as a browser's ``EventSource`` parses them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = ["Event", "events"]


@dataclass
class Event:
    """One event: its ``id``, its type and its ``data`` (parsed as JSON)."""

    id: str | None
    event: str
    data: Any


def events(response: httpx.Response) -> Iterator[Event]:
    """The events of ``response`` as they arrive (comments skipped)."""
    fields: dict[str, list[str]] = {}
    for line in response.iter_lines():
        if line == "":
            if "data" in fields:
                ids = fields.get("id")
                yield Event(
                    ids[-1] if ids else None,
                    fields.get("event", ["message"])[-1],
                    json.loads("\n".join(fields["data"])),
                )
            fields = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            fields.setdefault(name, []).append(value.removeprefix(" "))
