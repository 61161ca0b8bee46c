"""Circuit breakers shared by the fleet: each verb is one transaction, serialized per breaker
(PostgreSQL: an advisory lock on its name; SQLite: writers are serial), so every worker sees
one state and at most one probe is ever granted."""

from __future__ import annotations

from typing import Any

from ..base import BreakerRow
from ._base import SQLBase

__all__ = ["BreakerVerbs"]


class BreakerVerbs(SQLBase):
    """The ``BreakerStore`` verbs over SQL."""

    def breaker(self, name: str, *, now: float) -> BreakerRow | None:
        """Breaker ``name`` as stored, with its failures in the window; ``None``: never failed."""
        rows = self._records("get_breaker", {"name": name, "now": now}, BreakerRow)
        return rows[0] if rows else None

    def list_breakers(self, *, now: float) -> list[BreakerRow]:
        """Every breaker that has counted a failure, by name."""
        return self._records("list_breakers", {"now": now}, BreakerRow)

    def breaker_failed(
        self,
        name: str,
        *,
        now: float,
        failures: int,
        window: float,
        cooldown: float,
        probe: str | None,
        started: float | None = None,
    ) -> bool:
        """Count a failed attempt; open the breaker when it reaches ``failures`` in ``window``,
        or when it is the probe's (``probe``) or a probe is past its time. True if it opened."""

        def work(conn: Any) -> bool:
            conn.execute(self._q["lock_breaker"], {"name": name})
            conn.execute(self._q["ensure_breaker"], {"name": name, "window": window})
            stale = {"name": name, "started": started}
            if (
                started is not None
                and conn.execute(self._q["breaker_closed_since"], stale).fetchone()
            ):
                return False  # it began before the probe that closed the breaker succeeded
            key = {"name": name, "now": now, "window": window}
            conn.execute(self._q["prune_breaker_failures"], key)
            conn.execute(self._q["record_breaker_failure"], key)
            count = int(conn.execute(self._q["count_breaker_failures"], key).fetchone()[0])
            params = {
                "name": name,
                "now": now,
                "retry_at": now + cooldown,
                "trip": int(count >= failures),
                "probe": probe,
            }
            return self._opened(conn, name, params)

        return self._write(work)

    def _opened(self, conn: Any, name: str, params: dict[str, Any]) -> bool:
        """Open the breaker if ``params`` say so; runs waiting for a probe that failed then
        wait for the next cooldown, not for the probe's deadline."""
        if conn.execute(self._q["open_breaker"], params).rowcount != 1:
            return False
        retime = {"now": params["now"], "retry_at": params["retry_at"]}
        conn.execute(
            self._q["retime_breaker_waiters"], {**retime, "waiting_for": f"breaker:{name}"}
        )
        return True

    def expire_probe(self, name: str, *, now: float, cooldown: float) -> bool:
        """A probe still unfinished at its deadline failed then: open the breaker again as of
        that deadline (a probe lost with its worker, found long after, costs no extra
        cooldown)."""

        def work(conn: Any) -> bool:
            conn.execute(self._q["lock_breaker"], {"name": name})
            found = conn.execute(self._q["probe_deadline"], {"name": name}).fetchone()
            if found is None or found[0] is None or float(found[0]) > now:
                return False
            at = float(found[0])
            params = {"name": name, "now": at, "retry_at": at + cooldown, "trip": 0}
            if conn.execute(self._q["open_breaker"], {**params, "probe": None}).rowcount != 1:
                return False
            retime = {"now": now, "retry_at": at + cooldown, "waiting_for": f"breaker:{name}"}
            conn.execute(self._q["retime_breaker_waiters"], retime)
            conn.execute(self._q["record_breaker_failure"], {"name": name, "now": at})
            return True

        return self._write(work)

    def take_probe(self, name: str, *, probe: str, now: float, until: float) -> bool:
        """Make attempt ``probe`` the one half-open probe, if the cooldown has passed and no
        other attempt took it first."""

        def work(conn: Any) -> bool:
            conn.execute(self._q["lock_breaker"], {"name": name})
            params = {"name": name, "probe": probe, "now": now, "until": until}
            return bool(conn.execute(self._q["take_probe"], params).rowcount == 1)

        return self._write(work)

    def breaker_succeeded(self, name: str, *, probe: str, now: float) -> bool:
        """The probe succeeded: close the breaker, forget its failures and wake the runs
        waiting on it. False when the probe was no longer the breaker's."""

        def work(conn: Any) -> bool:
            conn.execute(self._q["lock_breaker"], {"name": name})
            params = {"name": name, "probe": probe, "now": now}
            if conn.execute(self._q["close_breaker"], params).rowcount != 1:
                return False
            conn.execute(self._q["clear_breaker_failures"], {"name": name})
            wake = {"now": now, "waiting_for": f"breaker:{name}"}
            conn.execute(self._q["wake_breaker_waiters"], wake)
            return True

        return self._write(work)
