"""A run's journal: what its holder appends, and the views replay and compensation read."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from ..._errors import CorruptRecord
from ..base import CompensationRow, Entry, IndexRow, JournalRow, NewChunk, ReplayState
from ._base import _built, _Fenced, _inline, _typed
from .pipeline import Write
from .streams import StreamVerbs

__all__ = ["JournalVerbs"]


def _nothing(_decided: object) -> bool:
    return False


class JournalVerbs(StreamVerbs):
    """The ``JournalStore`` verbs over SQL."""

    def append(
        self,
        workflow_id: str,
        entry: Entry,
        *,
        owner: str | None,
        chunks: Sequence[NewChunk] = (),
    ) -> bool:
        """Append a journal entry, fenced by the lease when ``owner`` is given; recorded once
        even when retried after a lost acknowledgement. A fenced append (a step's outcome)
        goes through the pipeline: it may share its transaction with other runs' writes; the
        stream ``chunks`` emitted before it are written in that transaction, first."""
        if owner is None:
            return self._append_alone(workflow_id, entry, owner=None)
        if chunks:
            return self.append_many(workflow_id, [entry], owner=owner, chunks=chunks)
        return bool(self._batched(self._fenced_append(workflow_id, entry, owner)))

    async def append_async(self, workflow_id: str, entry: Entry, *, owner: str) -> bool:
        """``append`` of a held run's entry for a caller on an event loop, which goes on
        while the entry waits for the transaction it shares with other writes to commit."""
        return bool(await self._batched_async(self._fenced_append(workflow_id, entry, owner)))

    def _fenced_append(self, workflow_id: str, entry: Entry, owner: str) -> Write:
        """The pipeline's write of ``entry``, journaled while ``owner`` holds the lease."""

        def work(conn: Any) -> bool:
            params = self._entry_params(conn, workflow_id, entry, owner)
            return self._insert_entry(conn, "append_entry_if_owner", params)

        def alone() -> bool:
            return self._append_alone(workflow_id, entry, owner=owner)

        def send(conn: Any) -> Callable[[], bool]:
            params = self._entry_params(conn, workflow_id, entry, owner)
            return self._send_entry(conn, "append_entry_if_owner", params)

        # an inline entry is one statement, which can be sent ahead of the batch's answers
        if not _inline(entry):
            return Write(workflow_id, work, alone)
        return Write(workflow_id, work, alone, send=send, fenced=(entry, owner))

    def _append_alone(self, workflow_id: str, entry: Entry, *, owner: str | None) -> bool:
        """``append`` in a transaction of its own."""
        name = "append_entry" if owner is None else "append_entry_if_owner"

        def work(conn: Any) -> bool:
            params = self._entry_params(conn, workflow_id, entry, owner)
            return self._insert_entry(conn, name, params)

        # one inline statement is its own transaction
        return self._once(workflow_id, entry, work, transaction=not _inline(entry))

    def append_many(
        self,
        workflow_id: str,
        entries: list[Entry],
        *,
        owner: str,
        chunks: Sequence[NewChunk] = (),
    ) -> bool:
        """Append several entries in one transaction, fenced by the lease, after the stream
        ``chunks`` emitted before them; with chunks, through the pipeline."""

        def work(conn: Any) -> bool:
            self._lock_run(conn, workflow_id)
            # the fence first: a lost lease writes nothing (in a shared batch, nothing to undo)
            if chunks and not self._put_chunks(conn, workflow_id, owner, chunks):
                return False
            for entry in entries:
                params = self._entry_params(conn, workflow_id, entry, owner)
                if conn.execute(self._q["append_entry_if_owner"], params).rowcount != 1:
                    raise _Fenced()  # the lock holds the lease still: not reached in a batch
            return True

        def alone() -> bool:
            try:
                return self._once(workflow_id, entries[-1] if entries else None, work)
            except _Fenced:
                return False

        if not chunks:
            return alone()
        return bool(self._batched(Write(workflow_id, work, alone)))

    def mark_retry(self, workflow_id: str, *, owner: str, marker: str) -> bool:
        """Note on a held run that a step's retry began (``seq:attempt``)."""
        params = {"workflow_id": workflow_id, "owner": owner, "marker": marker}

        def work(conn: Any) -> bool:
            return bool(conn.execute(self._q["mark_retry"], params).rowcount == 1)

        def alone() -> bool:
            return self._changes("mark_retry", params) == 1

        def send(conn: Any) -> Callable[[], bool]:
            return self._send_prepared(conn, "mark_retry", params)

        # idempotent (it sets the marker it is given), so it journals nothing to be found by
        one = send if self._sends_batches else None
        return bool(self._batched(Write(workflow_id, work, alone, wrote=_nothing, send=one)))

    def replay_index(self, workflow_id: str) -> list[IndexRow]:
        """Positioned journal rows, without inputs."""
        return self._records("replay_index", {"workflow_id": workflow_id}, IndexRow)

    def replay_state(self, workflow_id: str) -> ReplayState:
        """The replay index and the rollback in progress, in one read."""
        return self._replay_of(self._rows("replay_state", {"workflow_id": workflow_id}))

    def journal(
        self, workflow_id: str, *, after: int | None = None, limit: int | None = None
    ) -> list[JournalRow]:
        """All journal rows (or those whose id is over ``after``; at most ``limit`` of them)
        with payloads resolved, read on one connection."""
        params: dict[str, Any] = {"workflow_id": workflow_id}
        if limit is not None:
            query = self._q["journal_page"]
            params.update(after=after or 0, limit=limit)
        elif after is not None:
            query = self._q["journal_after"]
            params["after"] = after
        else:
            query = self._q["journal"]

        def work(conn: Any) -> list[JournalRow]:
            # the rows are typed once, with their payloads loaded (a long journal's rows
            # built twice, through dataclasses.replace, cost more than reading them)
            cur = conn.execute(query, params)
            names = tuple(column[0] for column in cur.description)
            rows = [list(row) for row in cur.fetchall()]
            at = {name: names.index(name) for name in ("seq", "kind", "name", "input", "output")}

            def named(column: int, exc: CorruptRecord) -> CorruptRecord:
                row = rows[column // 2]
                seq, kind, name = row[at["seq"]], row[at["kind"]], row[at["name"]]
                return CorruptRecord(
                    f"run {workflow_id!r}, seq {seq} ({kind} {name!r}): "
                    f"{exc}; restore the payloads table from a backup",
                    workflow_id=workflow_id,
                    seq=seq,
                )

            columns = [column for row in rows for column in (row[at["input"]], row[at["output"]])]
            values = self._load_all(conn, columns, named)
            for row, loaded_input, loaded_output in zip(
                rows, values[::2], values[1::2], strict=True
            ):
                row[at["input"]], row[at["output"]] = loaded_input, loaded_output
            return _built(names, rows, JournalRow)

        return self._run(work)

    def journal_size(self, workflow_id: str) -> int:
        """How many journal rows the run has."""
        return int(self._rows("journal_size", {"workflow_id": workflow_id})[0][0])

    def compensation_plan(self, workflow_id: str) -> list[CompensationRow]:
        """Journal rows of compensable steps and of compensations, in order, payloads
        resolved."""
        query = self._q["compensation_plan"]

        def work(conn: Any) -> list[CompensationRow]:
            rows = _typed(conn.execute(query, {"workflow_id": workflow_id}), CompensationRow)
            values = self._load_all(conn, [c for row in rows for c in (row.input, row.output)])
            return [
                dataclasses.replace(row, input=loaded_input, output=loaded_output)
                for row, loaded_input, loaded_output in zip(
                    rows, values[::2], values[1::2], strict=True
                )
            ]

        return self._run(work)

    def rollback_in_progress(self, workflow_id: str) -> bytes | None:
        """The output of the run's last 'rolling_back' entry, unless a retry came after it."""
        rows = self._rows("rollback_state", {"workflow_id": workflow_id})
        if not rows or rows[0][0] != "rolling_back" or rows[0][1] is None:
            return None
        return self.load_payload(bytes(rows[0][1]))
