"""The journal entries of a run's own milestones."""

from __future__ import annotations

from .._store import Entry

__all__ = ["lifecycle"]


def lifecycle(
    name: str,
    now: float,
    *,
    input: bytes | None = None,
    output: bytes | None = None,
    by: str | None = None,
) -> Entry:
    """A milestone of the run itself in its journal (started, resumed, rolling_back)."""
    return Entry.milestone(name, now, input=input, output=output, by=by)
