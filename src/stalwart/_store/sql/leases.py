"""Who executes a run: claiming, the lease and the queue limits a start must fit.

``take_lease`` does three jobs in one transaction (a claim is one round trip): admit the start
into its queue, count the recoveries in a row, and compare-and-set the lease. Each job is a
helper of its own; ``take_lease`` only sequences them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from ..base import Entry, LeaseAsk, LeaseClaim, QueueLimits
from ._base import _inline
from .claim_reads import ClaimReads
from .pipeline import Write

__all__ = ["LeaseVerbs"]

# Starts are pruned this long after they leave a rate's window: a worker whose clock reading
# is a little older than the last writer's must still count every start in its window.
START_RETENTION_S = 60.0

_REFUSED = LeaseClaim(taken=False)
_TAKEN = LeaseClaim(taken=True, recoveries=0)  # a start's claim (no recovery counted)


@dataclass(frozen=True, slots=True)
class _Admission:
    """Whether a queue lets a run start now, and the queue whose rate the start counts
    against (``None``: no rate applies, or the run is not starting)."""

    admitted: bool
    rate_queue: str | None = None


@dataclass(frozen=True, slots=True)
class _Recoveries:
    """The recovery count to store with the lease, and the progress it was measured at."""

    count: int = 0
    mark: int | None = None


def _unlimited(limits: QueueLimits | None) -> bool:
    """Whether a queue's ``limits`` admit every start (none to check)."""
    return limits is None or (limits.concurrency is None and limits.rate is None)


def _taken(claim: LeaseClaim) -> bool:
    return claim.taken


class LeaseVerbs(ClaimReads):
    """The ``LeaseStore`` verbs over SQL (the reads that find claimable runs in ``ClaimReads``)."""

    # -- taking the lease -----------------------------------------------------------------

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
        replay: bool = False,
    ) -> LeaseClaim:
        """Compare-and-set the lease of a claimable run (the holder's lease lapsed, or the
        caller saw its process gone: ``holder_gone``); count recoveries in a row.

        With ``limits``, starting a pending or suspended run also needs a free slot in its
        queue (fewer than ``concurrency`` runs of the queue running) and, for a pending run,
        room in the queue's rate (fewer than ``rate`` starts in the last ``period`` seconds);
        taking over a running run needs neither: it holds its slot already."""
        ask = LeaseAsk(
            workflow_id,
            owner,
            expected_owner,
            now,
            lease_until,
            entry,
            recovery=recovery,
            holder_gone=holder_gone,
            limits=limits,
            replay=replay,
        )
        write = self._take_write(ask)
        # a claim that journals nothing could not tell a retry whether it landed: alone
        return cast(LeaseClaim, write.alone() if entry is None else self._batched(write))

    def take_leases(self, asks: Sequence[LeaseAsk]) -> list[LeaseClaim | Exception]:
        """``take_lease`` of each of ``asks``, those that journal an entry in the pipeline's
        next transaction: a worker's claims of the runs it found together, from one thread."""
        writes = [self._take_write(ask) for ask in asks]
        together = [write for ask, write in zip(asks, writes, strict=True) if ask.entry is not None]
        decided = iter(self._batched_each(together))
        claims: list[LeaseClaim | Exception] = []
        for ask, write in zip(asks, writes, strict=True):
            if ask.entry is not None:
                claims.append(next(decided))
                continue
            try:
                claims.append(write.alone())
            except Exception as exc:
                claims.append(exc)
        return claims

    def _take_write(self, ask: LeaseAsk) -> Write:
        """The pipeline's write of ``take_lease``."""
        workflow_id, owner, now, entry = ask.workflow_id, ask.owner, ask.now, ask.entry
        recovery, limits, replay = ask.recovery, ask.limits, ask.replay
        swap = {
            "workflow_id": workflow_id,
            "owner": owner,
            "expected_owner": ask.expected_owner,
            "now": now,
            "lease_until": ask.lease_until,
            "holder_gone": int(ask.holder_gone),
        }

        # The run's replay read, sent with a lone claim's transaction (``send``), if it was
        read: list[Callable[[], list[Any] | None]] = []

        def work(conn: Any) -> LeaseClaim:
            read.clear()
            if not self._lock_run(conn, workflow_id, skip_locked=True):
                return _REFUSED  # another worker is claiming it right now
            admission = _Admission(admitted=True)
            if limits is not None:
                admission = self._admit(conn, workflow_id, limits, now)
                if not admission.admitted:
                    return _REFUSED
            recoveries = _Recoveries()
            if recovery:
                counted = self._count_recovery(conn, workflow_id)
                if counted is None:
                    return _REFUSED
                recoveries = counted
            if not self._swap_lease(conn, swap, recoveries):
                return _REFUSED
            if admission.rate_queue is not None:
                conn.execute(self._q["record_start"], {"queue": admission.rate_queue, "now": now})
            if entry is not None:
                self._journal_in(conn, workflow_id, entry)
            if replay and not self._sends_batches:  # a local read: the journal as it left it
                rows = conn.execute(self._q["replay_state"], {"workflow_id": workflow_id})
                return LeaseClaim(True, recoveries.count, replay=self._replay_of(rows.fetchall()))
            return LeaseClaim(taken=True, recoveries=recoveries.count)

        if entry is None:
            return Write(workflow_id, work, lambda: self._once(workflow_id, None, work))
        resumed: Entry = entry

        def send(conn: Any) -> LeaseClaim:
            read.clear()
            conn.execute(self._q["take_lease_ahead"], swap)
            self._journal_in(conn, workflow_id, resumed)
            if replay:  # in the claim's transaction: the journal as the claim left it
                read.append(self._send_rows(conn, "replay_state", {"workflow_id": workflow_id}))
            return _TAKEN

        def claimed(value: LeaseClaim | bool) -> LeaseClaim:
            # ``True``: a retry found this call's entry journaled, the first try's COMMIT
            # landed with its answer lost (a recovery's count is then read again)
            if isinstance(value, LeaseClaim):
                return value
            if value and recovery:
                return self._run(functools.partial(self._recovered, workflow_id=workflow_id))
            return _TAKEN if value else _REFUSED

        def alone() -> LeaseClaim:
            if recovery or not _inline(resumed) or not _unlimited(limits):
                return claimed(self._once(workflow_id, resumed, work))
            claim = claimed(self._once_ahead(workflow_id, resumed, work, send, refused=_REFUSED))
            rows = read[0]() if read and claim.taken else None
            return claim if rows is None else LeaseClaim(True, replay=self._replay_of(rows))

        # Claims a worker makes together (a burst of new runs, a restart's takeovers) share
        # a transaction; a refusal changes no run and journals nothing, so the others commit.
        # Where the batch goes out whole, each is one statement (a recovery's after its lock).
        one = self._sends_batches and _inline(resumed) and _unlimited(limits)
        write = Write(workflow_id, work, alone, wrote=_taken)
        write.outcomes = (_REFUSED, _TAKEN)
        if one and recovery:
            write.send = functools.partial(self._send_recovery, swap=swap, entry=resumed)
            write.landed = functools.partial(self._recovered, workflow_id=workflow_id)
        elif one:
            write.send = functools.partial(
                self._send_claim, swap=swap, entry=resumed, replay=replay
            )
        return write

    def _send_claim(
        self, conn: Any, *, swap: dict[str, Any], entry: Entry, replay: bool
    ) -> Callable[[], LeaseClaim]:
        """A claim inside a batch sent whole, as one statement (``claim_in_batch``), and with
        ``replay`` the run's replay state read after it, in no round trip more; what it
        decided, once answered."""
        workflow_id = swap["workflow_id"]
        params = {**self._entry_params(conn, workflow_id, entry, swap["owner"]), **swap}
        taken = self._send_prepared(conn, "claim_in_batch", params)
        rows = (
            self._send_rows(conn, "replay_state", {"workflow_id": workflow_id}) if replay else None
        )

        def decided() -> LeaseClaim:
            if not taken():
                return _REFUSED
            read = None if rows is None else rows()
            return _TAKEN if read is None else LeaseClaim(True, replay=self._replay_of(read))

        return decided

    def _send_recovery(
        self, conn: Any, *, swap: dict[str, Any], entry: Entry
    ) -> Callable[[], LeaseClaim]:
        """A recovery's claim inside a batch sent whole: the run's lock, then the claim as one
        statement (``recover_in_batch``); what it decided, once answered."""
        workflow_id = swap["workflow_id"]
        params = {**self._entry_params(conn, workflow_id, entry, swap["owner"]), **swap}
        self._send_lock_run(conn, workflow_id, skip_locked=True)
        counted = self._send_returning(conn, "recover_in_batch", params)
        rows = self._send_rows(conn, "replay_state", {"workflow_id": workflow_id})

        def decided() -> LeaseClaim:
            row = counted()
            if row is None:
                return _REFUSED
            read = rows()
            replay = None if read is None else self._replay_of(read)
            return LeaseClaim(True, int(row[0]), replay=replay)

        return decided

    def _recovered(self, conn: Any, *, workflow_id: str) -> LeaseClaim:
        """A recovery's claim that landed in a batch whose answer was lost: the count it
        stored."""
        row = conn.execute(self._q["recovery_state"], {"workflow_id": workflow_id}).fetchone()
        return LeaseClaim(True, int(row[0]))

    def _admit(self, conn: Any, workflow_id: str, limits: QueueLimits, now: float) -> _Admission:
        """Queue admission: whether the queue's limits let this run start now."""
        state = conn.execute(self._q["run_state"], {"workflow_id": workflow_id}).fetchone()
        if state is None or state[0] not in ("pending", "suspended"):
            return _Admission(admitted=True)  # not a start: a takeover holds its slot
        status, queue = state
        self._lock_queue(conn, queue)
        if limits.concurrency is not None:
            running = conn.execute(self._q["queue_running"], {"queue": queue}).fetchone()[0]
            if running >= limits.concurrency:
                return _Admission(admitted=False)
        if limits.rate is None or status != "pending":
            return _Admission(admitted=True)
        window = {"queue": queue, "since": now - limits.period}
        stale = {"queue": queue, "since": now - limits.period - START_RETENTION_S}
        conn.execute(self._q["prune_starts"], stale)
        if conn.execute(self._q["recent_starts"], window).fetchone()[0] >= limits.rate:
            return _Admission(admitted=False)
        return _Admission(admitted=True, rate_queue=str(queue))

    def _count_recovery(self, conn: Any, workflow_id: str) -> _Recoveries | None:
        """Recovery counting: one more in a row unless the run completed journal entries
        since the last recovery (then 1); ``None`` for an unknown run."""
        state = conn.execute(self._q["recovery_state"], {"workflow_id": workflow_id}).fetchone()
        if state is None:
            return None
        count, mark, progress = state
        in_a_row = mark is not None and progress <= mark
        return _Recoveries(count=count + 1 if in_a_row else 1, mark=progress)

    def _swap_lease(self, conn: Any, swap: dict[str, Any], recoveries: _Recoveries) -> bool:
        """The lease compare-and-set: the run (``swap``'s ``workflow_id``) is claimable and
        still held by ``expected_owner``; it becomes ``running``, held by ``owner`` until
        ``lease_until``, with the recovery count stored beside the lease."""
        params = {**swap, "recoveries": recoveries.count, "recovery_mark": recoveries.mark}
        return bool(conn.execute(self._q["take_lease"], params).rowcount == 1)

    # -- holding the lease ----------------------------------------------------------------

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

    def publish_step(self, workflow_id: str, *, owner: str, current: str | None) -> bool:
        """Say which step the holder executes now (JSON), for operators; ``None``: none."""
        params = {"workflow_id": workflow_id, "owner": owner, "current": current}
        return self._changes("publish_step", params) == 1

    def release_lease(self, workflow_id: str, *, owner: str, now: float) -> bool:
        """Give up a held lease."""
        params = {"workflow_id": workflow_id, "owner": owner, "now": now}
        return self._changes("release_lease", params) == 1

    def release_run(self, workflow_id: str, *, owner: str, now: float) -> bool:
        """Give a held run back as ``pending``: a graceful stop, not a recovery."""
        params = {"workflow_id": workflow_id, "owner": owner, "now": now}
        return self._changes("release_run", params) == 1
