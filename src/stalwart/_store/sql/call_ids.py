"""Ids of store calls (``CALL_ID``): unique across processes and time, as a random uuid is,
at a fraction of its cost on the hot path (a write's id is made once per step)."""

from __future__ import annotations

import itertools
import os
import uuid

__all__ = ["new_call_id"]

_prefix = ""
_counter = itertools.count()


def _reseed() -> None:
    """A random prefix of 80 bits for this process, and its counter from zero; a forked
    child takes a prefix of its own, so it never repeats its parent's ids."""
    global _prefix, _counter
    _prefix = uuid.uuid4().hex[:20]
    _counter = itertools.count()


def new_call_id() -> str:
    """A fresh id: 32 hex digits, like ``uuid4().hex`` (the process's prefix and a count)."""
    return f"{_prefix}{next(_counter):012x}"


_reseed()
os.register_at_fork(after_in_child=_reseed)
