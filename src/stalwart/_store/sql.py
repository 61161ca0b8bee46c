"""The verbs every SQL backend shares; backends supply connections, transactions, retries and
their dialect's query text (``sql/<backend>/queries.sql``, same names in every dialect).

Writers that touch a run begin by locking its row (``_lock_run``): on PostgreSQL that
serializes them per run as SQLite's ``BEGIN IMMEDIATE`` serializes every writer, so each verb
reads what the previous one committed and decides on it alone.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, TypeVar, cast

from .._errors import CorruptRecord, StoreError, mask_url
from .base import SCHEMA_VERSION, ApprovalRow, Entry, IndexRow, JournalRow, QueueLimits, RunRow
from .payloads import INLINE_LIMIT, pack, unpack
from .queries import load_migrations

__all__ = ["SQLStore"]

T = TypeVar("T")

START_RETENTION_S = 60.0


class _Fenced(Exception):
    """Rolls back a multi-entry append whose lease was lost midway."""


def _inline(entry: Entry) -> bool:
    return (entry.input is None or len(entry.input) <= INLINE_LIMIT) and (
        entry.output is None or len(entry.output) <= INLINE_LIMIT
    )


class SQLStore:
    """Store verbs over a DB-API-like connection; subclasses provide the plumbing."""

    url: str
    durable: bool
    _q: dict[str, str]

    # -- what a backend provides ----------------------------------------------------------

    def _write(self, work: Callable[[Any], T]) -> T:
        """Run ``work(conn)`` in one write transaction, retried while the store is busy."""
        raise NotImplementedError

    def _run(self, work: Callable[[Any], T]) -> T:
        """Run ``work(conn)`` outside an explicit transaction (each statement commits)."""
        raise NotImplementedError

    def _list(self, values: list[str]) -> Any:
        """A list parameter as the dialect's ``IN`` clause takes it."""
        raise NotImplementedError

    def _lock_run(self, conn: Any, workflow_id: str, *, skip_locked: bool = False) -> bool:
        """Inside ``_write``: serialize writers of one run (a no-op where writers are serial).

        With ``skip_locked``, a run another writer holds is not waited for: ``False``."""
        return True

    def _lock_queue(self, conn: Any, queue: str) -> None:
        """Inside ``_write``: serialize the starts of one queue's runs."""

    def close(self) -> None:
        """Release connections."""
        raise NotImplementedError

    def reserve_connections(self, threads: int) -> None:
        """Make room for ``threads`` threads using the store at once (where that matters)."""

    def data_version(self) -> int:
        """Changes whenever another connection commits (a cheap change detector)."""
        raise NotImplementedError

    def _apply_script(self, conn: Any, sql: str) -> None:
        """Execute one migration file's statements inside the migration transaction."""
        raise NotImplementedError

    def _migrate_in(self, conn: Any, backend: str) -> None:
        """Inside a write transaction: check the store's schema and apply what is missing.

        Migrations are expand-then-contract: a migration that only adds leaves the store usable
        by the previous release; one that removes or changes what older code reads declares the
        oldest code it still serves (``-- oldest-compatible: N``), and the store records it.
        """
        conn.execute(self._q["schema_table"])
        row = conn.execute(self._q["schema_version"]).fetchone()
        current, oldest = (int(row[0]), int(row[1])) if row else (0, 0)
        if oldest > SCHEMA_VERSION:
            raise StoreError(
                f"the store {mask_url(self.url)} has schema version {current}, which needs "
                f"stalwart code of schema version {oldest} or newer (this code has "
                f"{SCHEMA_VERSION}); upgrade stalwart on this machine"
            )
        for migration in load_migrations(backend):
            if migration.version > current:
                self._apply_script(conn, migration.sql)
                oldest = max(oldest, migration.oldest_compatible)
                conn.execute(
                    self._q["set_schema_version"],
                    {"version": migration.version, "oldest_compatible": oldest},
                )

    def _once(
        self,
        workflow_id: str,
        footprint: Entry | None,
        work: Callable[[Any], T],
        *,
        transaction: bool = True,
    ) -> T:
        """Run ``work`` once even when it is retried after a lost connection.

        A commit can land and its acknowledgement be lost. ``footprint`` is the journal entry
        ``work`` writes, stamped here with an id of this call; a retry whose first try may
        have committed (it got as far as the commit, or was one autocommitted statement)
        looks for that entry first and, when it is there, returns what the first try decided
        (for a lone statement: that it landed) instead of doing it again."""
        if footprint is not None:
            footprint.call_id = uuid.uuid4().hex  # this call's, even for a reused Entry
        decided: list[T] = []
        tried = False

        def attempt(conn: Any) -> T:
            nonlocal tried
            if footprint is not None and (decided or (tried and not transaction)):
                found = conn.execute(
                    self._q["entry_exists"],
                    {"workflow_id": workflow_id, "call_id": footprint.call_id},
                ).fetchone()
                if found is not None:
                    return decided[0] if decided else cast(T, True)
            tried = True
            decided[:] = [work(conn)]
            return decided[0]

        return self._write(attempt) if transaction else self._run(attempt)

    def _rows(self, name: str, params: dict[str, Any]) -> list[Any]:
        query = self._q[name]
        return self._run(lambda conn: list(conn.execute(query, params).fetchall()))

    def _changes(self, name: str, params: dict[str, Any]) -> int:
        query = self._q[name]
        return self._run(lambda conn: int(conn.execute(query, params).rowcount))

    # -- payloads -------------------------------------------------------------------------

    def _stash(self, conn: Any, payload: bytes | None) -> bytes | None:
        if payload is None or len(payload) <= INLINE_LIMIT:
            return payload

        def put(digest: bytes, data: bytes) -> None:
            conn.execute(self._q["put_payload"], {"digest": digest, "data": data})

        return pack(payload, put)

    def _fetch_on(self, conn: Any, digests: list[bytes]) -> dict[bytes, bytes]:
        found = {}
        for digest in dict.fromkeys(digests):
            row = conn.execute(self._q["get_payload"], {"digest": digest}).fetchone()
            if row is None:
                raise KeyError(digest.hex())
            found[digest] = bytes(row[0])
        return found

    def load_payload(self, stored: bytes, conn: Any = None) -> bytes:
        """The encoded payload behind a stored column value (read on ``conn`` when a
        transaction already holds one, so it never waits for a second connection)."""

        def fetch(digests: list[bytes]) -> dict[bytes, bytes]:
            if conn is not None:
                return self._fetch_on(conn, digests)
            return self._run(lambda c: self._fetch_on(c, digests))

        try:
            return unpack(bytes(stored), fetch)
        except KeyError as exc:
            raise CorruptRecord(f"payload piece {exc.args[0]} is missing from the store") from None

    def _entry_params(
        self, conn: Any, workflow_id: str, entry: Entry, owner: str | None
    ) -> dict[str, Any]:
        return {
            "workflow_id": workflow_id,
            "owner": owner,
            "seq": entry.seq,
            "position": entry.position,
            "kind": entry.kind,
            "name": entry.name,
            "status": entry.status,
            "attempt": entry.attempt,
            "started_at": entry.started_at,
            "finished_at": entry.finished_at,
            "input": self._stash(conn, entry.input),
            "output": self._stash(conn, entry.output),
            "error": entry.error,
            "by": entry.by,
            "compensable": int(entry.compensable),
            "call_id": entry.call_id,
        }

    # -- verbs ----------------------------------------------------------------------------

    def create_run(
        self,
        *,
        workflow_id: str,
        name: str,
        status: str,
        queue: str,
        priority: int,
        input: bytes,
        now: float,
        owner: str | None,
        lease_until: float | None,
        entry: Entry,
        deadline: float | None = None,
    ) -> bool:
        """Insert a run and its first journal entry; ``False`` if the id exists."""

        def work(conn: Any) -> bool:
            cur = conn.execute(
                self._q["create_run"],
                {
                    "workflow_id": workflow_id,
                    "name": name,
                    "status": status,
                    "queue": queue,
                    "priority": priority,
                    "input": self._stash(conn, input),
                    "now": now,
                    "owner": owner,
                    "lease_until": lease_until,
                    "deadline": deadline,
                },
            )
            if cur.rowcount != 1:
                return False
            conn.execute(
                self._q["append_entry"], self._entry_params(conn, workflow_id, entry, None)
            )
            return True

        return self._once(workflow_id, entry, work)

    def get_run(self, workflow_id: str) -> RunRow | None:
        """The run, or ``None``."""
        rows = self._rows("get_run", {"workflow_id": workflow_id})
        return RunRow(*rows[0]) if rows else None

    def take_lease(
        self,
        workflow_id: str,
        *,
        owner: str,
        expected_owner: str | None,
        now: float,
        lease_until: float,
        entry: Entry | None = None,
        recovery: bool = False,
        holder_gone: bool = False,
        limits: QueueLimits | None = None,
    ) -> tuple[bool, int]:
        """Compare-and-set the lease of a claimable run (the holder's lease lapsed, or the
        caller saw its process gone: ``holder_gone``); count recoveries in a row.

        With ``limits``, starting a pending or suspended run also needs a free slot in its
        queue (fewer than ``concurrency`` runs of the queue running) and, for a pending run,
        room in the queue's rate (fewer than ``rate`` starts in the last ``period`` seconds);
        taking over a running run needs neither: it holds its slot already."""

        def work(conn: Any) -> tuple[bool, int]:
            if not self._lock_run(conn, workflow_id, skip_locked=True):
                return False, 0  # another worker is claiming it right now
            start = None
            if limits is not None:
                start = self._admit(conn, workflow_id, limits, now)
                if start is False:
                    return False, 0
            count, mark = 0, None
            if recovery:
                key = {"workflow_id": workflow_id}
                state = conn.execute(self._q["recovery_state"], key).fetchone()
                if state is None:
                    return False, 0
                count, mark, progress = state
                count = count + 1 if mark is not None and progress <= mark else 1
                mark = progress
            cur = conn.execute(
                self._q["take_lease"],
                {
                    "workflow_id": workflow_id,
                    "owner": owner,
                    "expected_owner": expected_owner,
                    "now": now,
                    "lease_until": lease_until,
                    "recoveries": count,
                    "recovery_mark": mark,
                    "holder_gone": int(holder_gone),
                },
            )
            if cur.rowcount != 1:
                return False, 0
            if isinstance(start, str):
                conn.execute(self._q["record_start"], {"queue": start, "now": now})
            if entry is not None:
                conn.execute(
                    self._q["append_entry"], self._entry_params(conn, workflow_id, entry, None)
                )
            return True, count

        return self._once(workflow_id, entry, work)

    def _admit(self, conn: Any, workflow_id: str, limits: QueueLimits, now: float) -> bool | str:
        """Whether a queue's limits let this run start now: ``False`` if not, the queue's name
        if the start counts against its rate, ``True`` otherwise."""
        state = conn.execute(self._q["run_state"], {"workflow_id": workflow_id}).fetchone()
        if state is None or state[0] not in ("pending", "suspended"):
            return True
        status, queue = state
        self._lock_queue(conn, queue)
        if limits.concurrency is not None:
            running = conn.execute(self._q["queue_running"], {"queue": queue}).fetchone()[0]
            if running >= limits.concurrency:
                return False
        if limits.rate is None or status != "pending":
            return True
        window = {"queue": queue, "since": now - limits.period}
        # Starts are pruned well after they leave the window: a worker whose clock reading
        # is a little older than the last writer's must still count every start in its window.
        stale = {"queue": queue, "since": now - limits.period - START_RETENTION_S}
        conn.execute(self._q["prune_starts"], stale)
        if conn.execute(self._q["recent_starts"], window).fetchone()[0] >= limits.rate:
            return False
        return str(queue)

    def next_start(self, queue: str, limits: QueueLimits) -> float | None:
        """When the queue's rate next lets a run start (``None``: it has no rate)."""
        if limits.rate is None:
            return None
        rows = self._rows("nth_latest_start", {"queue": queue, "offset": limits.rate - 1})
        return None if not rows else float(rows[0][0]) + limits.period

    def renew_lease(self, workflow_id: str, *, owner: str, lease_until: float) -> bool | None:
        """Extend a held lease: ``None`` if it was lost, else whether cancel was requested."""
        params = {"workflow_id": workflow_id, "owner": owner, "lease_until": lease_until}
        rows = self._rows("renew_lease", params)
        return bool(rows[0][0]) if rows else None

    def record_progress(
        self,
        workflow_id: str,
        *,
        owner: str,
        progress: bytes | None,
        now: float,
        lease_until: float,
    ) -> bool:
        """Store heartbeat details and extend the lease."""
        params = {
            "workflow_id": workflow_id,
            "owner": owner,
            "progress": progress,
            "now": now,
            "lease_until": lease_until,
        }
        return self._changes("record_progress", params) == 1

    def release_lease(self, workflow_id: str, *, owner: str, now: float) -> bool:
        """Give up a held lease."""
        params = {"workflow_id": workflow_id, "owner": owner, "now": now}
        return self._changes("release_lease", params) == 1

    def mark_retry(self, workflow_id: str, *, owner: str, marker: str) -> bool:
        """Note on a held run that a step's retry began (``seq:attempt``)."""
        params = {"workflow_id": workflow_id, "owner": owner, "marker": marker}
        return self._changes("mark_retry", params) == 1

    def append(self, workflow_id: str, entry: Entry, *, owner: str | None) -> bool:
        """Append a journal entry, fenced by the lease when ``owner`` is given; recorded once
        even when retried after a lost acknowledgement."""
        name = "append_entry" if owner is None else "append_entry_if_owner"

        def work(conn: Any) -> bool:
            params = self._entry_params(conn, workflow_id, entry, owner)
            return self._insert_entry(conn, name, params)

        # one inline statement is its own transaction
        return self._once(workflow_id, entry, work, transaction=not _inline(entry))

    def _insert_entry(self, conn: Any, name: str, params: dict[str, Any]) -> bool:
        """Run an append query; backends may prepare the hot one."""
        return bool(conn.execute(self._q[name], params).rowcount == 1)

    def finish_run(
        self,
        workflow_id: str,
        *,
        owner: str,
        status: str,
        output: bytes | None,
        error: str | None,
        now: float,
        entry: Entry,
    ) -> bool:
        """Set the final status, release the lease and journal it, in one transaction."""

        def work(conn: Any) -> bool:
            self._lock_run(conn, workflow_id)
            cur = conn.execute(
                self._q["finish_run"],
                {
                    "workflow_id": workflow_id,
                    "owner": owner,
                    "status": status,
                    "output": self._stash(conn, output),
                    "error": error,
                    "now": now,
                },
            )
            if cur.rowcount != 1:
                return False
            conn.execute(
                self._q["append_entry"], self._entry_params(conn, workflow_id, entry, None)
            )
            close = {"workflow_id": workflow_id, "now": now, "reason": f"run {status}"}
            conn.execute(self._q["close_approvals"], close)
            return True

        return self._once(workflow_id, entry, work)

    def replay_index(self, workflow_id: str) -> list[IndexRow]:
        """Positioned journal rows, without inputs."""
        rows = self._rows("replay_index", {"workflow_id": workflow_id})
        return [IndexRow(*row) for row in rows]

    def journal(self, workflow_id: str) -> list[JournalRow]:
        """All journal rows with payloads resolved."""
        rows = self._rows("journal", {"workflow_id": workflow_id})
        out = []
        for row in rows:
            values = list(row)
            for i in (8, 9):
                if values[i] is not None:
                    try:
                        values[i] = self.load_payload(bytes(values[i]))
                    except CorruptRecord as exc:
                        raise CorruptRecord(
                            f"run {workflow_id!r}, seq {values[1]} ({values[2]} {values[3]!r}): "
                            f"{exc}; restore the payloads table from a backup",
                            workflow_id=workflow_id,
                            seq=values[1],
                        ) from exc
            out.append(JournalRow(*values))
        return out

    def list_runs(
        self, *, status: str | None, name: str | None, limit: int, before: float | None
    ) -> list[RunRow]:
        """Runs, newest first."""
        params = {"status": status, "name": name, "limit": limit, "before": before}
        return [RunRow(*row) for row in self._rows("list_runs", params)]

    # -- workers and waits ------------------------------------------------------------------

    def claim_candidates(
        self, *, names: list[str], queues: list[str], now: float, limit: int
    ) -> list[tuple[str, str, str | None]]:
        """Runs a worker of these workflows and queues may claim, best first."""
        params = {
            "names": self._list(names),
            "queues": self._list(queues),
            "now": now,
            "limit": limit,
        }
        return [tuple(row) for row in self._rows("claim_candidates", params)]

    def held_on_host(self, *, host_prefix: str, names: list[str]) -> list[tuple[str, str]]:
        """Running runs whose lease holder names this host."""
        params = {"host_prefix": host_prefix + "%", "names": self._list(names)}
        return [tuple(row) for row in self._rows("held_on_host", params)]

    def next_wake(self, *, names: list[str], queues: list[str]) -> float | None:
        """The earliest time a suspended run of these workflows becomes claimable."""
        params = {"names": self._list(names), "queues": self._list(queues)}
        rows = self._rows("next_wake", params)
        return rows[0][0] if rows else None

    def suspend_run(
        self,
        workflow_id: str,
        *,
        owner: str,
        wake_at: float | None,
        waiting_for: str | None,
        now: float,
        entry: Entry | None = None,
    ) -> bool:
        """Release the lease and suspend, unless what the run waits for is already there."""
        kind, _, key = (waiting_for or "").partition(":")
        params = {
            "workflow_id": workflow_id,
            "owner": owner,
            "wake_at": wake_at,
            "waiting_for": waiting_for,
            "now": now,
            "event_name": key if kind == "event" else None,
            "approval_id": key if kind == "approval" else None,
        }

        def work(conn: Any) -> bool:
            self._lock_run(conn, workflow_id)
            if conn.execute(self._q["suspend_run"], params).rowcount != 1:
                return False
            if entry is not None:
                conn.execute(
                    self._q["append_entry"], self._entry_params(conn, workflow_id, entry, None)
                )
            return True

        return self._once(workflow_id, entry, work)

    def open_wait(
        self, workflow_id: str, entry: Entry, *, owner: str, approval: dict[str, Any] | None = None
    ) -> bool:
        """Journal a wait as scheduled (and its approval request), fenced by the lease."""

        def work(conn: Any) -> bool:
            self._lock_run(conn, workflow_id)
            params = self._entry_params(conn, workflow_id, entry, owner)
            if conn.execute(self._q["append_entry_if_owner"], params).rowcount != 1:
                return False
            if approval is not None:
                conn.execute(self._q["create_approval"], {"workflow_id": workflow_id, **approval})
            return True

        return self._once(workflow_id, entry, work)

    def resolve_wait(
        self,
        workflow_id: str,
        entry: Entry,
        *,
        owner: str,
        event_name: str | None = None,
        approval_id: str | None = None,
        time_out: bool = False,
        now: float = 0.0,
        encode_decision: Callable[[ApprovalRow], bytes] | None = None,
        until: float | None = None,
    ) -> tuple[str, bytes | None]:
        """Decide a wait in one transaction and journal the winner as ``entry`` completed.

        An event sent after ``until`` (the wait's timeout) does not count: the timer passed
        first, and the event stays in the inbox for a later wait.

        The oldest unconsumed event named ``event_name`` wins first (it is consumed and its
        payload becomes the output), then a decision on ``approval_id`` (``encode_decision``
        turns it into the output), then, when ``time_out`` is set, the timer (the
        pending approval is marked expired). Returns ``(winner, data)`` with winner one of
        ``"event"``, ``"approval"``, ``"timer"``, ``"none"`` (nothing yet) or ``"lost"`` (the
        lease is gone or the wait was already decided).
        """

        def work(conn: Any) -> tuple[str, bytes | None]:
            self._lock_run(conn, workflow_id)
            held = {"workflow_id": workflow_id, "owner": owner}
            if conn.execute(self._q["lease_held"], held).fetchone() is None:
                return "lost", None
            if conn.execute(
                self._q["seq_completed"], {"workflow_id": workflow_id, "seq": entry.seq}
            ).fetchone():
                return "lost", None
            winner, data = "none", None
            if event_name is not None:
                key = {"workflow_id": workflow_id, "name": event_name, "until": until}
                found = conn.execute(self._q["oldest_event"], key).fetchone()
                if found is not None:
                    conn.execute(self._q["consume_event"], {"id": found[0], "seq": entry.seq})
                    data = None if found[1] is None else self.load_payload(bytes(found[1]), conn)
                    winner, entry.output = "event", data
            if winner == "none" and approval_id is not None:
                key = {"workflow_id": workflow_id, "approval_id": approval_id}
                row = conn.execute(self._q["get_approval"], key).fetchone()
                if row is not None and row[6] is not None and row[7] is not None:
                    assert encode_decision is not None
                    winner = "approval"
                    data = entry.output = encode_decision(ApprovalRow(*row))
            if winner == "none" and time_out:
                if approval_id is not None:
                    conn.execute(
                        self._q["expire_approval"],
                        {"workflow_id": workflow_id, "approval_id": approval_id, "now": now},
                    )
                winner = "timer"
            if winner == "none":
                return winner, None
            conn.execute(
                self._q["append_entry"], self._entry_params(conn, workflow_id, entry, None)
            )
            return winner, data

        return self._once(workflow_id, entry, work)

    def deliver_event(
        self,
        workflow_id: str,
        *,
        name: str,
        payload: bytes | None,
        dedup_key: str | None,
        now: float,
        entry: Entry,
    ) -> bool:
        """Store an event in the run's inbox and wake the run if it waits for it.

        ``False`` when a previous event had the same ``dedup_key``; ``KeyError`` for an unknown
        run."""

        def work(conn: Any) -> bool:
            self._lock_run(conn, workflow_id)
            if conn.execute(self._q["get_run"], {"workflow_id": workflow_id}).fetchone() is None:
                raise KeyError(workflow_id)
            cur = conn.execute(
                self._q["insert_event"],
                {
                    "workflow_id": workflow_id,
                    "name": name,
                    "payload": self._stash(conn, payload),
                    "dedup_key": dedup_key,
                    "now": now,
                    "by": entry.by,
                },
            )
            if cur.rowcount != 1:
                return False
            conn.execute(
                self._q["append_entry"], self._entry_params(conn, workflow_id, entry, None)
            )
            conn.execute(
                self._q["wake_run"],
                {"workflow_id": workflow_id, "now": now, "waiting_for": f"event:{name}"},
            )
            return True

        return self._once(workflow_id, entry, work)

    def get_approval(self, workflow_id: str, approval_id: str) -> ApprovalRow | None:
        """One approval request."""
        rows = self._rows("get_approval", {"workflow_id": workflow_id, "approval_id": approval_id})
        return ApprovalRow(*rows[0]) if rows else None

    def list_approvals(self, *, pending: bool, workflow_id: str | None = None) -> list[ApprovalRow]:
        """Approval requests, oldest first."""
        params = {"pending": int(pending), "workflow_id": workflow_id}
        return [ApprovalRow(*row) for row in self._rows("list_approvals", params)]

    def decide_approval(
        self,
        workflow_id: str,
        approval_id: str,
        *,
        approved: bool,
        by: str,
        reason: str | None,
        now: float,
        entry: Entry,
    ) -> bool:
        """Store a decision on a pending request and wake its run; ``False`` if decided."""

        def work(conn: Any) -> bool:
            self._lock_run(conn, workflow_id)
            cur = conn.execute(
                self._q["decide_approval"],
                {
                    "workflow_id": workflow_id,
                    "approval_id": approval_id,
                    "now": now,
                    "approved": int(approved),
                    "by": by,
                    "reason": reason,
                },
            )
            if cur.rowcount != 1:
                return False
            conn.execute(
                self._q["append_entry"], self._entry_params(conn, workflow_id, entry, None)
            )
            conn.execute(
                self._q["wake_run"],
                {"workflow_id": workflow_id, "now": now, "waiting_for": f"approval:{approval_id}"},
            )
            return True

        return self._once(workflow_id, entry, work)

    def cancel_run(self, workflow_id: str, *, now: float, error: str, entry: Entry) -> str:
        """Cancel at once a run nobody executes; else flag it for its holder.

        Returns ``"cancelled"``, ``"requested"`` or ``"finished"`` (nothing to cancel)."""

        def work(conn: Any) -> str:
            self._lock_run(conn, workflow_id)
            params = {"workflow_id": workflow_id, "now": now, "error": error}
            key = {"workflow_id": workflow_id, "now": now}
            if conn.execute(self._q["cancel_waiting_run"], params).rowcount == 1:
                verdict = "cancelled"
                close = {"workflow_id": workflow_id, "now": now, "reason": "run cancelled"}
                conn.execute(self._q["close_approvals"], close)
            elif conn.execute(self._q["cancel_to_roll_back"], key).rowcount == 1:
                verdict = "requested"  # its compensations run first: the next executor does it
            elif conn.execute(self._q["request_cancel"], key).rowcount == 1:
                verdict = "requested"
            else:
                return "finished"
            conn.execute(
                self._q["append_entry"], self._entry_params(conn, workflow_id, entry, None)
            )
            return verdict

        return self._once(workflow_id, entry, work)

    def cancel_requested_for(self, owner_prefix: str) -> set[str]:
        """The runs held by owners starting with ``owner_prefix`` that were asked to cancel."""
        params = {"owner_prefix": owner_prefix}
        return {row[0] for row in self._rows("cancel_requested_for", params)}

    def redrive(self, workflow_id: str, *, now: float, entries: list[Entry]) -> bool:
        """Make a failed or needs_attention run pending again, journaling ``entries`` (the
        resets and the operator action) in the same transaction."""

        def work(conn: Any) -> bool:
            self._lock_run(conn, workflow_id)
            params = {"workflow_id": workflow_id, "now": now}
            if conn.execute(self._q["redrive_run"], params).rowcount != 1:
                return False
            for entry in entries:
                conn.execute(
                    self._q["append_entry"], self._entry_params(conn, workflow_id, entry, None)
                )
            return True

        return self._once(workflow_id, entries[-1] if entries else None, work)

    def release_run(self, workflow_id: str, *, owner: str, now: float) -> bool:
        """Give a held run back as ``pending``: a graceful stop, not a recovery."""
        params = {"workflow_id": workflow_id, "owner": owner, "now": now}
        return self._changes("release_run", params) == 1

    def compensation_plan(self, workflow_id: str) -> list[tuple[Any, ...]]:
        """Journal rows of compensable steps and of compensations, in order, payloads
        resolved: ``(id, seq, position, name, status, attempt, input, output, kind, error)``."""
        rows = self._rows("compensation_plan", {"workflow_id": workflow_id})
        out = []
        for row in rows:
            values = list(row)
            for i in (6, 7):
                if values[i] is not None:
                    values[i] = self.load_payload(bytes(values[i]))
            out.append(tuple(values))
        return out

    def append_many(self, workflow_id: str, entries: list[Entry], *, owner: str) -> bool:
        """Append several entries in one transaction, fenced by the lease."""

        def work(conn: Any) -> bool:
            self._lock_run(conn, workflow_id)
            for entry in entries:
                params = self._entry_params(conn, workflow_id, entry, owner)
                if conn.execute(self._q["append_entry_if_owner"], params).rowcount != 1:
                    raise _Fenced()
            return True

        try:
            return self._once(workflow_id, entries[-1] if entries else None, work)
        except _Fenced:
            return False

    def fork_candidates(self, workflow_id: str) -> list[tuple[Any, ...]]:
        """``(id, seq, position, kind, name, status, compensable)`` of positioned rows."""
        return [tuple(r) for r in self._rows("fork_candidates", {"workflow_id": workflow_id})]

    def fork_run(
        self,
        source: str,
        *,
        new_id: str,
        name: str,
        queue: str,
        input: bytes | None,
        now: float,
        reuse: list[int],
        started: Entry,
        by: str,
        notes: Entry,
    ) -> bool:
        """Create run ``new_id`` whose journal reuses rows ``reuse`` of ``source`` (their
        payloads are shared, not copied); ``False`` if ``new_id`` exists."""

        def work(conn: Any) -> bool:
            self._lock_run(conn, source)
            cur = conn.execute(
                self._q["create_run"],
                {
                    "workflow_id": new_id,
                    "name": name,
                    "status": "pending",
                    "queue": queue,
                    "priority": 0,
                    "input": input,
                    "now": now,
                    "owner": None,
                    "lease_until": None,
                    "deadline": None,
                },
            )
            if cur.rowcount != 1:
                return False
            conn.execute(self._q["append_entry"], self._entry_params(conn, new_id, started, None))
            for row_id in reuse:
                conn.execute(
                    self._q["copy_entry_reused"], {"new_id": new_id, "by": by, "id": row_id}
                )
            conn.execute(self._q["append_entry"], self._entry_params(conn, source, notes, None))
            return True

        return self._once(new_id, started, work)

    def rollback_in_progress(self, workflow_id: str) -> bytes | None:
        """The output of the run's last 'rolling_back' entry, unless a retry came after it."""
        rows = self._rows("rollback_state", {"workflow_id": workflow_id})
        if not rows or rows[0][0] != "rolling_back" or rows[0][1] is None:
            return None
        return self.load_payload(bytes(rows[0][1]))
