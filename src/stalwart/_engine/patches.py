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
"""

from __future__ import annotations

from .._model import EntryKind, EntryStatus
from .._store import Entry
from .invocation import Invocation, guarded

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


@guarded
def patched(inv: Invocation, patch_id: str) -> bool:
    """``stalwart.patched`` inside a workflow: see the module docstring."""
    inv.check_alive()
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
