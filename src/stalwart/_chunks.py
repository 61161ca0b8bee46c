"""A chunk of a run's stream as readers see it, and the text a reader shows of a stream."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = ["StreamChunk", "stream_text"]


@dataclass(frozen=True)
class StreamChunk:
    """One chunk a run emitted (``stalwart.emit``) to one of its streams.

    ``offset`` counts 0, 1, 2, ... per run and stream, gap-free, in write order; ``seq`` and
    ``attempt`` name the step call and attempt that emitted it (``seq`` is ``None`` for
    workflow code); ``data`` is the value emitted, decoded; ``at`` when it was emitted (UTC).
    """

    offset: int
    stream: str
    seq: int | None
    attempt: int
    data: Any
    at: _dt.datetime


def stream_text(chunks: Iterable[StreamChunk]) -> str:
    """The text of a stream's ``str`` chunks, as a reader shows it: once a later attempt of a
    step call (a ``seq``) shows up, the chunks of its earlier attempts are dropped (a retried
    or recovered attempt streams its text again). Chunks whose data is not a ``str`` are
    skipped."""
    kept: list[StreamChunk] = []
    latest: dict[int, int] = {}  # seq -> the latest attempt seen
    for chunk in chunks:
        if chunk.seq is not None:
            seen = latest.get(chunk.seq)
            if seen is None or chunk.attempt > seen:
                if seen is not None:
                    kept = [c for c in kept if c.seq != chunk.seq]
                latest[chunk.seq] = chunk.attempt
            elif chunk.attempt < seen:
                continue
        kept.append(chunk)
    return "".join(chunk.data for chunk in kept if isinstance(chunk.data, str))
