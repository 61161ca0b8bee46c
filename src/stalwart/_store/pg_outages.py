"""How the PostgreSQL store tells a lost connection from a failed statement, and logs an
outage once: when it begins and when it ends, however many connections fail in between."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

from .._errors import StoreError, mask_url

__all__ = ["RECONNECT_GIVE_UP_S", "Outages", "connection_lost", "first_line"]

log = logging.getLogger("stalwart")

RECONNECT_GIVE_UP_S = 300.0
OUTAGE_QUIET_S = 10.0

# SQLSTATEs of a server that is going away or not there yet; other errors are not outages.
# admin_shutdown, crash_shutdown, cannot_connect_now, idle_session_timeout
_GOING_AWAY = {"57P01", "57P02", "57P03", "57P05"}


def connection_lost(exc: Exception) -> bool:
    """Whether ``exc`` says the connection, not the statement, failed: worth retrying."""
    import psycopg
    import psycopg_pool

    if isinstance(exc, psycopg_pool.PoolTimeout):
        return True
    if isinstance(exc, psycopg.errors.IdleInTransactionSessionTimeout):
        return True  # the server ended a session idle mid-transaction: rolled back, retry
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in _GOING_AWAY


def first_line(exc: Exception) -> str:
    """The first line of an error's message (a server's detail lines left out)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class Outages:
    """A store's record of the outage under way, if any (see ``_outage``)."""

    url: str
    _pool: Any

    def _init_outages(self) -> None:
        self._outage_since: float | None = None
        self._outage_logged_at = -OUTAGE_QUIET_S
        self._outage_logged = False
        self._outage_lock = threading.Lock()

    def _outage(self, exc: Exception, since: float) -> None:
        """Note a lost connection; raise once this call (begun at ``since``) has waited too
        long.

        One outage is logged once: connections the pool held when the server went away fail
        one by one after it is back, and those failures within ``OUTAGE_QUIET_S`` of the last
        logged outage are the same outage, not news."""
        now = time.monotonic()
        first = False
        with self._outage_lock:
            if self._outage_since is None:
                self._outage_since = now
                first = True
                if now - self._outage_logged_at > OUTAGE_QUIET_S:
                    self._outage_logged_at = now
                    self._outage_logged = True
                    log.warning(
                        "store %s unreachable (%s); retrying with backoff for up to %.0f s",
                        mask_url(self.url),
                        first_line(exc),
                        RECONNECT_GIVE_UP_S,
                    )
        if now - since > RECONNECT_GIVE_UP_S:
            raise StoreError(
                f"the PostgreSQL store {mask_url(self.url)} has been unreachable for "
                f"{now - since:.0f} s: {first_line(exc)}"
            ) from exc
        if first:
            with contextlib.suppress(Exception):
                self._pool.check()  # drop the other dead connections now, not one by one

    def _outage_over(self) -> None:
        with self._outage_lock:
            if self._outage_since is None:
                return
            if self._outage_logged:
                log.warning(
                    "store %s reachable again after %.1f s",
                    mask_url(self.url),
                    time.monotonic() - self._outage_since,
                )
                self._outage_logged = False
            self._outage_since = None
