"""The PostgreSQL backend (``postgresql://user@host:port/db``): one database, a fleet of workers.

Connections come from a ``psycopg_pool`` pool, in autocommit mode: single-statement verbs are
their own transaction, multi-statement verbs run in one explicit transaction that starts by
locking the run's row, so writers of one run are serialized as on SQLite while writers of
different runs proceed in parallel. Claims lock with ``SKIP LOCKED``: a worker never waits for
a run another worker is claiming, and the lease compare-and-set means no run is ever held by two.

Idle workers learn of new work through ``LISTEN``/``NOTIFY`` (a trigger on ``runs``); polling
remains as the fallback for a notification missed while the listener reconnects.

When the connection is lost (a restart, a failover) every verb retries with capped, jittered
backoff for up to ``RECONNECT_GIVE_UP_S`` seconds, logging the outage once and its end once; an
error of the statement itself is not retried. A write whose commit landed just before the
connection broke finds its own journal entry (by call id) on the retry and is not done twice.
A step's journal append, the hot path, is a prepared statement on each connection.

Query parameters of the URL that are ours, not libpq's: ``schema`` (default: the
connection's ``search_path``; created when missing) and ``pool_size`` (default 16).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .._errors import StoreError, install_hint, mask_url
from .base import READ_ONLY_DECLARATIONS, Entry, NewChunk
from .changes import Changes
from .pg_ahead import NotAhead, Refused, SentAhead, send_ahead
from .pg_outages import Outages, connection_lost, first_line
from .pg_payloads import PayloadTrees
from .queries import load_queries
from .sql import SQLStore

if TYPE_CHECKING:
    import psycopg_pool

__all__ = ["PostgresStore"]

log = logging.getLogger("stalwart")

T = TypeVar("T")

CONNECT_TIMEOUT_S = 5
CLOCK_SAMPLES = 3  # reads of the server's clock per measurement; the quickest one counts
RECONNECT_MAX_DELAY_S = 2.0
DEFAULT_POOL_SIZE = 16
LISTEN_CHANNEL = "stalwart"
POOL_NAME = "stalwart"
# A session of ours idle inside a transaction this long is ended by the server, which frees
# its row locks: its process froze mid-transaction (SIGSTOP, a paused VM), as none of ours
# waits on anything between a transaction's statements. The URL's own options may set it.
IDLE_IN_TRANSACTION_MS = 60_000
PREPARED_MAX = 32  # prepared statements a connection keeps (a lone run's writes use a dozen)
OUTAGE_POOL_WAIT_S = 0.2

# Set while this thread commits a batch of the pipeline: its connection is the writer's own.
_WRITING: contextvars.ContextVar[bool] = contextvars.ContextVar("stalwart_writing", default=False)

_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def _pyformat(sql: str) -> str:
    """``:name`` placeholders (shared with SQLite) as psycopg's ``%(name)s``."""
    return _PARAM.sub(r"%(\1)s", sql.replace("%", "%%"))


_Q = {name: _pyformat(sql) for name, sql in load_queries("postgres").items()}


class _QuietPool(logging.Filter):
    """Drops the pool's own per-connection reports of an outage: the store logs it once."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (
            message.startswith(("discarding closed connection", "discarding broken connection"))
            or message.startswith(f"error connecting in '{POOL_NAME}'")
        )


logging.getLogger("psycopg.pool").addFilter(_QuietPool())


def _configure(conn: Any) -> None:
    """A new pooled connection: psycopg remembers the last ``prepared_max`` query texts it
    ran to prepare those it sees often, but ours carry their values inline (a client-side
    cursor) and never repeat, so that memory (100 texts per connection by default, held for
    the connection's life) buys nothing; the hot path prepares its statement explicitly."""
    conn.prepared_max = PREPARED_MAX


def _split_url(url: str) -> tuple[str, str | None, int, str]:
    """The libpq URL without our own parameters, the schema, the pool size and the URL's own
    ``options`` (server settings, which ours are added to)."""
    parts = urlsplit(url)
    libpq, schema, pool_size, options = [], None, DEFAULT_POOL_SIZE, ""
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key == "schema":
            if not _IDENTIFIER.fullmatch(value):
                raise StoreError(
                    f"{mask_url(url)}: schema={value!r} is not a plain SQL identifier; use "
                    "lowercase letters, digits and underscores"
                )
            schema = value
        elif key == "pool_size":
            if not value.isdigit() or int(value) < 2:
                raise StoreError(f"{mask_url(url)}: pool_size={value!r} must be an integer >= 2")
            pool_size = int(value)
        elif key == "options":
            options = value
        else:
            libpq.append((key, value))
    scheme = "postgresql"
    libpq_url = urlunsplit((scheme, parts.netloc, parts.path, urlencode(libpq), ""))
    return libpq_url, schema, pool_size, options


class _Listener:
    """A thread that LISTENs for the store's notifications and pushes them to its
    :class:`Changes` (which polling stands in for while it reconnects)."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self.changes = store.changes
        self.streams = store.stream_changes
        self.backend_pid: int | None = None  # the server process of its connection, once up
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="stalwart-listen", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        import psycopg

        delay = 0.05
        while not self.closed.is_set():
            try:
                with psycopg.connect(
                    self.store._conninfo, autocommit=True, **self.store._connect_kwargs
                ) as conn:
                    conn.execute(f"LISTEN {LISTEN_CHANNEL}")
                    schema = conn.execute("SELECT current_schema()").fetchone()
                    mine = schema[0] if schema else None
                    self.backend_pid = conn.info.backend_pid
                    self._all(live=True)  # (re)connected: anything may have happened meanwhile
                    delay = 0.05
                    stream = f"{mine}/stream"
                    while not self.closed.is_set():
                        for note in conn.notifies(timeout=0.25):
                            if note.payload == mine:
                                self._all(live=True)
                            elif note.payload == stream:  # chunks: only stream readers wake
                                self.streams.push()
            except psycopg.Error:
                self._all(live=False)  # waiters poll until the listener is back
                self.closed.wait(random.uniform(delay / 2, delay))
                delay = min(delay * 2, RECONNECT_MAX_DELAY_S)

    def _all(self, *, live: bool) -> None:
        """Wake every waiter: runs' and streams' (a stream reader waits for its run's end
        too)."""
        for changes in (self.changes, self.streams):
            changes.live = live
            changes.push()

    def close(self) -> None:
        self.closed.set()
        self.thread.join(timeout=2)


class _ServerBinding(SQLStore):
    """Statements whose parameters PostgreSQL binds itself: big ``bytes`` (snapshot chunks)
    travel as they are instead of inlined in the statement's text."""

    def _bound(self, conn: Any, query: str, params: dict[str, Any]) -> Any:
        # The connection's client-side cursors inline a parameter as text (a snapshot chunk
        # as hex, twice its bytes, parsed by the server); this one binds them on the server,
        # in binary both ways, never prepared (a pooler may not keep prepared statements).
        import psycopg

        return psycopg.Cursor(conn).execute(query, params, prepare=False, binary=True)

    def _bound_many(self, conn: Any, query: str, rows: Sequence[dict[str, Any]]) -> None:
        import psycopg

        with psycopg.Cursor(conn) as cur:
            cur.executemany(query, rows)  # pipelined: one round trip for the lot


class _ChunkArrays:
    """PostgreSQL writes a run's stream chunks in one statement of arrays, not one each."""

    _q: dict[str, str]

    def _insert_chunks(self, conn: Any, workflow_id: str, chunks: Sequence[NewChunk]) -> None:
        params = {
            "workflow_id": workflow_id,
            "streams": [chunk.stream for chunk in chunks],
            "seqs": [chunk.seq for chunk in chunks],
            "attempts": [chunk.attempt for chunk in chunks],
            "origins": [chunk.origin for chunk in chunks],
            "datas": [chunk.data for chunk in chunks],
            "ats": [chunk.at for chunk in chunks],
        }
        conn.execute(self._q["append_chunks"], params)


class _CollectArrays:
    """PostgreSQL's collector reads and deletes a batch of payload rows in one statement
    each, not one a row (a round trip each)."""

    _q: dict[str, str]

    def _touched(self, conn: Any, digests: list[bytes]) -> dict[bytes, float | None]:
        rows = conn.execute(self._q["payloads_touched"], {"digests": digests}).fetchall()
        return {bytes(digest): touched for digest, touched in rows}

    def _delete_payloads(self, conn: Any, digests: list[bytes]) -> None:
        if digests:
            conn.execute(self._q["delete_payloads"], {"digests": digests})


class PostgresStore(Outages, SentAhead, PayloadTrees, _CollectArrays, _ChunkArrays, _ServerBinding):
    """A store in one PostgreSQL database (or one schema of it), shared by a fleet."""

    def __init__(self, url: str, *, durability: str) -> None:
        try:
            import psycopg
            import psycopg_pool
        except ImportError:
            raise StoreError(
                f"{mask_url(url)}: the PostgreSQL store needs psycopg; install it with "
                f"{install_hint('postgres')}"
            ) from None
        self.url = url
        self.durable = True
        self._q = _Q
        self._conninfo, self._schema, pool_size, options = _split_url(url)
        if self._schema is not None:
            options += f" -c search_path={self._schema}"
        # Both durabilities wait for the WAL flush (PostgreSQL's default, kept even where a
        # server or role says otherwise): the server, not this process, holds the data.
        options += " -c synchronous_commit=on"
        self._connect_kwargs: dict[str, Any] = {
            "connect_timeout": CONNECT_TIMEOUT_S,
            "options": options.strip(),
        }
        self._init_outages()
        self._listener: _Listener | None = None
        self._listen_lock = threading.Lock()
        self.changes = Changes(start=self._listen)
        self.stream_changes = Changes(start=self._listen)  # pushed by chunks, and by changes
        self._check_reachable(psycopg)
        self._pool_kwargs: dict[str, Any] = {
            "autocommit": True,
            "cursor_factory": psycopg.ClientCursor,
            **self._connect_kwargs,
        }
        self._pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            self._conninfo,
            min_size=1,
            max_size=pool_size,
            kwargs=self._pool_kwargs,
            timeout=30.0,
            # Opens connections in the background, one at a time: four at a time opened 40 in a
            # third of the time (load average 6), but at 16 a restart was no faster with them.
            num_workers=1,
            configure=_configure,
            open=True,
            name=POOL_NAME,
        )
        try:
            self._migrate_with(self._write, "postgres")
        except BaseException:
            self._pool.close()
            raise
        # The pipeline's own connection: a batch never queues for one behind the readers.
        self._writer: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            self._conninfo,
            min_size=1,
            max_size=1,
            kwargs=self._pool_kwargs,
            timeout=30.0,
            num_workers=1,
            open=True,
            name=POOL_NAME,
        )
        self._open_pipeline()

    def _check_reachable(self, psycopg: Any) -> None:
        """Connect once, eagerly, so a bad URL or a database that is down fails here."""
        try:
            with psycopg.connect(self._conninfo, autocommit=True, **self._connect_kwargs) as conn:
                self._bound_idle_transactions(conn)
                if self._schema is not None and not READ_ONLY_DECLARATIONS.get():
                    with contextlib.suppress(psycopg.errors.UniqueViolation):
                        # another process created it at the same moment: fine
                        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{self._schema}"')
        except psycopg.Error as exc:
            raise StoreError(
                f"cannot connect to the PostgreSQL store {mask_url(self.url)}: "
                f"{first_line(exc)}; check "
                "that the server is running and the URL's host, port, user and database"
            ) from None

    def _bound_idle_transactions(self, conn: Any) -> None:
        """Have every connection of ours ended by the server once idle mid-transaction for
        ``IDLE_IN_TRANSACTION_MS``, unless a stricter bound is in force already (the URL's
        options, the role's, the database's or the server's setting)."""
        options = self._connect_kwargs["options"]
        if "idle_in_transaction_session_timeout" in options.lower().replace("-", "_"):
            return  # the URL chose (0 included: none)
        found = conn.execute(
            "SELECT setting::bigint FROM pg_settings"
            " WHERE name = 'idle_in_transaction_session_timeout'"
        ).fetchone()
        bound = 0 if found is None else int(found[0])  # milliseconds; 0: none
        if bound == 0 or bound > IDLE_IN_TRANSACTION_MS:
            bounded = f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_MS}"
            self._connect_kwargs["options"] = f"{options} {bounded}".strip()

    def _lock_schema(self, conn: Any) -> None:
        conn.execute(self._q["lock_migrations"])

    def _apply_script(self, conn: Any, sql: str) -> None:
        conn.execute(sql)

    # -- plumbing -------------------------------------------------------------------------

    def close(self) -> None:
        """Stop listening and close the pools, then let the pipeline's threads end (a batch
        they were retrying through an outage fails at once without a pool)."""
        if self._listener is not None:
            self._listener.close()
        self._writer.close()
        self._pool.close()
        self._pipeline.close()

    def clock_offset(self) -> float | None:
        """How far the server's clock is ahead of this machine's (no retries: ``None`` when
        the server does not answer within a second). The server's time is read a few times
        and the read with the shortest round trip is kept: half the round trip bounds the
        error, and one slow read (a busy machine, a worker starting) would otherwise set this
        machine's idea of the fleet's clock that far off until the next measurement."""
        import psycopg
        import psycopg_pool

        best: tuple[float, float] | None = None  # (round trip, offset)
        try:
            with self._pool.connection(timeout=1.0) as conn:
                for _ in range(CLOCK_SAMPLES):
                    began, before = time.monotonic(), time.time()
                    row = conn.execute(self._q["server_time"]).fetchone()
                    after, took = time.time(), time.monotonic() - began
                    if row and (best is None or took < best[0]):
                        best = (took, float(row[0]) - (before + after) / 2)
        except (psycopg.Error, psycopg_pool.PoolTimeout):
            pass  # the samples read before the failure still count
        return None if best is None else best[1]

    def reserve_connections(self, threads: int) -> None:
        """Let ``threads`` threads (a worker's runs, its claim loop and lease keeper) each hold
        a connection at once, so none waits for another's; they are opened now (in the
        pool's background), so the worker's first runs wait for no connect and its footprint
        is fixed from the start, as its threads are."""
        self._pool.resize(max(self._pool.min_size, threads), max(self._pool.max_size, threads))

    def _attempt(self, work: Callable[[Any], T], *, transaction: bool) -> T:
        import psycopg
        import psycopg_pool
        from psycopg import errors

        delay = 0.05
        began = time.monotonic()
        while True:
            try:
                with self._connection() as conn:
                    if transaction:
                        with conn.transaction():
                            result = work(conn)
                    else:
                        result = work(conn)
                if self._outage_since is not None:
                    self._outage_over()
                return result
            except (errors.SerializationFailure, errors.DeadlockDetected):
                pass  # another transaction won: do it again
            except psycopg_pool.PoolClosed:
                raise StoreError(f"the store {mask_url(self.url)} was closed") from None
            except psycopg.Error as exc:
                if not connection_lost(exc):
                    raise StoreError(f"{mask_url(self.url)}: {first_line(exc)}") from exc
                self._outage(exc, began)
            time.sleep(random.uniform(delay / 2, delay))
            delay = min(delay * 2, RECONNECT_MAX_DELAY_S)

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Any]:
        """A pooled connection; during an outage, a connection of its own when the pool has
        none yet: the pool reconnects on a backoff of its own that grows without a cap, and
        work should resume as soon as the server answers, not when the pool next tries."""
        import psycopg
        import psycopg_pool

        pool = self._writer if _WRITING.get() else self._pool
        if self._outage_since is None:
            with pool.connection() as conn:
                yield conn
            return
        try:
            pooled = pool.getconn(timeout=OUTAGE_POOL_WAIT_S)
        except psycopg_pool.PoolTimeout:
            pooled = None
        if pooled is not None:
            try:
                yield pooled
            finally:
                pool.putconn(pooled)
            return
        with psycopg.connect(self._conninfo, **self._pool_kwargs) as conn:
            yield conn

    def _write(self, work: Callable[[Any], T]) -> T:
        return self._attempt(work, transaction=True)

    _own_writer = True

    @contextlib.contextmanager
    def _as_writer(self) -> Iterator[None]:
        token = _WRITING.set(True)
        try:
            yield
        finally:
            _WRITING.reset(token)

    def _once_ahead(
        self,
        workflow_id: str,
        footprint: Entry,
        work: Callable[[Any], T],
        send: Callable[[Any], T],
        refused: T,
    ) -> T:
        # Outside ``_write``'s transaction (``send_ahead`` spells its own out), so ``_once``
        # checks on a retry whether the first try's COMMIT landed.
        try:
            return self._once(
                workflow_id, footprint, lambda conn: send_ahead(conn, send), transaction=False
            )
        except Refused:
            return refused
        except NotAhead:  # another statement failed: the plain way says how
            return self._once(workflow_id, footprint, work)

    def _run(self, work: Callable[[Any], T]) -> T:
        return self._attempt(work, transaction=False)

    def _list(self, values: list[str]) -> list[str]:
        return list(values)

    def _lock_run(self, conn: Any, workflow_id: str, *, skip_locked: bool = False) -> bool:
        query = self._q["lock_run_skip_locked" if skip_locked else "lock_run"]
        if conn.execute(query, {"workflow_id": workflow_id}).fetchone() is not None:
            return True
        # Not there, or locked by another claimant: tell the two apart for SKIP LOCKED.
        if not skip_locked:
            return True
        exists = conn.execute(self._q["run_exists"], {"workflow_id": workflow_id}).fetchone()
        return exists is None

    def _send_lock_run(self, conn: Any, workflow_id: str, *, skip_locked: bool = False) -> None:
        query = self._q["lock_run_skip_locked" if skip_locked else "lock_run"]
        conn.execute(query, {"workflow_id": workflow_id})

    def _insert_entry(self, conn: Any, name: str, params: dict[str, Any]) -> bool:
        if name != "append_entry_if_owner":
            return super()._insert_entry(conn, name, params)
        import psycopg

        # A step's result: the one statement of the hot path, prepared on each connection.
        with psycopg.Cursor(conn) as cur:
            cur.execute(self._q["append_step_prepared"], params, prepare=True)
            return bool(cur.rowcount == 1)

    def _send_entry(self, conn: Any, name: str, params: dict[str, Any]) -> Callable[[], bool]:
        if name != "append_entry_if_owner":
            return super()._send_entry(conn, name, params)
        return self._send_prepared(conn, "append_step_prepared", params)

    def _lock_queue(self, conn: Any, queue: str) -> None:
        conn.execute(self._q["lock_queue"], {"queue": queue})

    def _listen(self) -> None:
        with self._listen_lock:  # started by the first waiter on either change counter
            if self._listener is None:
                self._listener = _Listener(self)

    def data_version(self) -> int:
        """A number that changes when a run becomes claimable, or one ends or suspends,
        anywhere in the fleet (the first read starts listening)."""
        return self.changes.current()
