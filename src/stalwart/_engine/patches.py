"""``patched(patch_id)``: one journaled branch point that old and new runs replay alike.

The decision is read from the journal at the call's position (the next position of the task
that calls it):

- a recorded ``patch`` entry with this id: the run took the new branch before, so ``True``;
- a recorded entry of anything else there, or further on in the same task or in a task it
  created after this point: the run went past this point with code that had no patch, so
  ``False``. The position is *not* taken: the old
  code's next call finds its own record there, exactly as before the deploy;
- nothing recorded there or further on (the task is at its frontier): record the patch there
  and return ``True``.

A run therefore decides each patch point once, with whatever code first reaches it, and every
replay after that repeats the decision.

One id belongs to one place in the code: the same call reached again (in a loop, or by tasks
running the same coroutine) is that place again, but a second call site asking for an id
already asked elsewhere in the run is refused (``RegistrationError``, the run needs attention)
before it decides anything, as the journal could not tell the two places' decisions apart.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .._errors import RegistrationError
from .._model import EntryKind, EntryStatus
from .._store import Entry
from .invocation import Invocation, guarded

# stalwart's own frames are skipped (with the separator: a sibling ``stalwart_app/`` is not it)
_PACKAGE = str(Path(__file__).resolve().parent.parent) + os.sep

__all__ = ["patched"]


def _split(position: str) -> tuple[str, int]:
    """A position's task path and its index in that task: ``"t0.3"`` -> ``("t0.", 3)``."""
    head, dot, index = position.rpartition(".")
    return (head + dot, int(index))


def _went_past(inv: Invocation, position: str) -> bool:
    """Whether the task of ``position`` has a record at or after it: one of its own calls, or
    a call of a task it created after this point (``asyncio.gather`` of coroutines, say)."""
    path, index = _split(position)
    created = inv.children.get(path, 0)  # the tasks it created before this point
    for recorded in inv.recorded:
        if not recorded.startswith(path):
            continue
        rest = recorded[len(path) :]
        if rest.isdigit() and int(rest) >= index:
            return True
        task, dot, _ = rest.partition(".")
        if dot and task[:1] == "t" and task[1:].isdigit() and int(task[1:]) >= created:
            return True
    return False


def _call_site() -> tuple[str, int, int, int]:
    """Where workflow code called ``patched``: the first frame outside stalwart, as its file,
    its code object's first line, the instruction (a loop reaches the same one again) and,
    for messages, the line."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
    code = frame.f_code
    return (code.co_filename, code.co_firstlineno, frame.f_lasti, frame.f_lineno)


def _one_place(inv: Invocation, patch_id: str) -> None:
    """Refuse a patch id asked for at a second place in the run's code."""
    site = _call_site()
    first = inv.patch_sites.setdefault(patch_id, site)
    if first[:3] == site[:3]:
        return
    here, there = (f"{Path(at[0]).name}:{at[3]}" for at in (site, first))
    error = RegistrationError(
        f"run {inv.workflow_id!r}: patch id {patch_id!r} is asked for at {here} and already "
        f"at {there}; give each patch point its own id (docs/changing-code.md), deploy that, "
        "then retry the run"
    )
    raise inv.abort(error, attention=True)


@guarded
def patched(inv: Invocation, patch_id: str) -> bool:
    """``stalwart.patched`` inside a workflow: see the module docstring."""
    inv.check_alive()
    _one_place(inv, patch_id)
    position = inv.peek_position()
    rec = inv.recorded.get(position)
    mine = rec is not None and rec.kind == EntryKind.PATCH and rec.name == patch_id
    if not mine and position not in inv.damaged and _went_past(inv, position):
        return False  # the run passed here before the patch existed: the old branch
    taken = inv.next_position()
    assert taken == position, (taken, position)
    if inv.lookup(position, EntryKind.PATCH, patch_id) is not None:
        return True
    inv.recovering = False
    now = inv.runtime.clock.time()
    inv.append(
        Entry(
            kind=EntryKind.PATCH,
            name=patch_id,
            status=EntryStatus.COMPLETED,
            seq=inv.alloc_seq(),
            position=position,
            attempt=1,
            started_at=now,
            finished_at=now,
        )
    )
    return True
