"""``StalwartSession``: an ``agents`` session kept in the app's store, and the journaling any
session gets inside a durable run.

Inside workflow code each call is a journaled step named ``session/SESSION_ID/METHOD``
(``get_items``, ``add_items``, ``pop_item``, ``clear_session``), so a replay reads the history
the first run read, even if the session changed since, and does not write twice. A
``StalwartSession``'s writes are also exactly once when a crash lands between a write's commit
and its journal record: the step's idempotency key is written with them."""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from agents import Session, TResponseInputItem
from agents.memory import SessionSettings

import stalwart
from stalwart import _extension
from stalwart._extension import ExtensionStore, Migration, Transaction

from ._codec import decode_item, encode_item

__all__ = ["JournaledSession", "StalwartSession", "in_workflow_code", "session_step_name"]

NAMESPACE = "openai_agents"
# A write made in a step is recorded in ext_openai_agents_writes under the step's idempotency
# key, in the write's transaction: an attempt re-run after a crash finds it and does nothing
# (a pop returns what it popped).
_TABLES = """
CREATE TABLE ext_openai_agents_items (
    id         {id},
    session_id TEXT NOT NULL,
    item       TEXT NOT NULL
);
CREATE INDEX ext_openai_agents_items_session ON ext_openai_agents_items (session_id, id);
CREATE TABLE ext_openai_agents_writes (
    op_key     TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    popped     TEXT
)"""
# Version 2 keeps items (and what a pop took) as binary, sealed under the app's keyring when it
# has one (docs/encryption.md); version 1 kept them as JSON text. A row from version 1 stays
# plaintext and readable (JSON never starts like a sealed value) until it is popped or cleared.
_BINARY_SQLITE = """
CREATE TABLE ext_openai_agents_items_v2 (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    item       BLOB NOT NULL
);
INSERT INTO ext_openai_agents_items_v2 (id, session_id, item)
    SELECT id, session_id, CAST(item AS BLOB) FROM ext_openai_agents_items;
DROP TABLE ext_openai_agents_items;
ALTER TABLE ext_openai_agents_items_v2 RENAME TO ext_openai_agents_items;
CREATE INDEX ext_openai_agents_items_session ON ext_openai_agents_items (session_id, id);
CREATE TABLE ext_openai_agents_writes_v2 (
    op_key     TEXT PRIMARY KEY,
    session_id TEXT NOT NULL,
    popped     BLOB
);
INSERT INTO ext_openai_agents_writes_v2 (op_key, session_id, popped)
    SELECT op_key, session_id, CAST(popped AS BLOB) FROM ext_openai_agents_writes;
DROP TABLE ext_openai_agents_writes;
ALTER TABLE ext_openai_agents_writes_v2 RENAME TO ext_openai_agents_writes"""
_BINARY_POSTGRES = """
ALTER TABLE ext_openai_agents_items ALTER COLUMN item TYPE BYTEA USING convert_to(item, 'UTF8');
ALTER TABLE ext_openai_agents_writes
    ALTER COLUMN popped TYPE BYTEA USING convert_to(popped, 'UTF8')"""
MIGRATIONS = [
    Migration(
        1,
        sqlite=_TABLES.format(id="INTEGER PRIMARY KEY AUTOINCREMENT"),
        postgres=_TABLES.format(id="BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"),
    ),
    Migration(2, sqlite=_BINARY_SQLITE, postgres=_BINARY_POSTGRES),
]

_ALL = "SELECT item FROM ext_openai_agents_items WHERE session_id = :session ORDER BY id"
_LATEST = """SELECT item FROM (
    SELECT id, item FROM ext_openai_agents_items WHERE session_id = :session
    ORDER BY id DESC LIMIT :limit
) AS latest ORDER BY id"""
_DONE = "SELECT popped FROM ext_openai_agents_writes WHERE op_key = :key"
_RECORD = """INSERT INTO ext_openai_agents_writes (op_key, session_id, popped)
VALUES (:key, :session, :popped)"""
_ADD = "INSERT INTO ext_openai_agents_items (session_id, item) VALUES (:session, :item)"
_LAST = """SELECT id, item FROM ext_openai_agents_items WHERE session_id = :session
ORDER BY id DESC LIMIT 1"""
_DELETE = "DELETE FROM ext_openai_agents_items WHERE id = :id"
_CLEAR = "DELETE FROM ext_openai_agents_items WHERE session_id = :session"
_CLEAR_WRITES = "DELETE FROM ext_openai_agents_writes WHERE session_id = :session"

_stores: weakref.WeakKeyDictionary[stalwart.Stalwart, ExtensionStore] = weakref.WeakKeyDictionary()


def session_step_name(session_id: str, method: str) -> str:
    """The step name of a session call inside a durable run."""
    return f"session/{session_id}/{method}"


def in_workflow_code() -> bool:
    """Whether this is workflow code (in a run, not in a step): where calls are journaled and
    waits are durable."""
    try:
        stalwart.workflow_id()
    except RuntimeError:
        return False
    try:
        stalwart.attempt()
    except RuntimeError:
        return True
    return False


def _store_for(app: stalwart.Stalwart) -> ExtensionStore:
    store = _stores.get(app)
    if store is None:
        store = _stores[app] = ExtensionStore(app, NAMESPACE, MIGRATIONS)
    return store


def _run_app() -> stalwart.Stalwart | None:
    """The app of the run executing here, if any."""
    return _extension.current_app()


def _limit_of(limit: int | None, settings: SessionSettings | None) -> int | None:
    if limit is None and settings is not None:
        limit = settings.limit
    return None if limit is None or limit < 0 else limit


async def _journaled(
    session_id: str, method: str, fn: Callable[..., Awaitable[Any]], **kwargs: Any
) -> Any:
    """``fn(**kwargs)`` as the step ``session/ID/METHOD`` in workflow code, else a plain call."""
    return await stalwart.run_step_async(
        session_step_name(session_id, method), fn, kwargs=kwargs, retry=stalwart.Retry()
    )


def _opened(tx: Transaction, value: Any) -> Any:
    """The item a column holds: sealed (version 2), or JSON text (version 1, or bytes of it)."""
    data = value.encode() if isinstance(value, str) else tx.open(bytes(value))
    assert data is not None
    return decode_item(data.decode())


def _plain(items: list[Any]) -> list[Any]:
    """Items as the JSON the journal keeps of them."""
    return [decode_item(encode_item(item)) for item in items]


class StalwartSession:
    """An ``agents`` session (``get_items``, ``add_items``, ``pop_item``, ``clear_session``)
    kept in the app's store, in the ``ext_openai_agents_*`` tables: on SQLite and PostgreSQL,
    shared by every process of the app, and surviving any of them.

    ``app`` is the app whose store keeps it; inside a run it may be left out (the run's app is
    used), outside one it is required. Inside workflow code every call is a journaled step
    (see the module docstring)."""

    def __init__(
        self,
        session_id: str,
        *,
        app: stalwart.Stalwart | None = None,
        session_settings: SessionSettings | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise stalwart.UsageError(f"StalwartSession({session_id!r}): pass a non-empty str")
        self.session_id = session_id
        self.session_settings = session_settings
        self._app = app

    def _store(self) -> ExtensionStore:
        app = self._app or _run_app()
        if app is None:
            raise stalwart.UsageError(
                f"StalwartSession({self.session_id!r}) has no app: pass app=... "
                "(the app whose store keeps the session)"
            )
        return _store_for(app)

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with ``limit``, the latest ``limit`` of them
        (``session_settings.limit`` when not given)."""
        count = _limit_of(limit, self.session_settings)
        store = self._store()

        async def read(limit: int | None) -> list[Any]:
            if limit == 0:
                return []
            sql, params = (_ALL, {}) if limit is None else (_LATEST, {"limit": limit})

            def fetch(tx: Transaction) -> list[Any]:
                rows = tx.fetchall(sql, {"session": self.session_id, **params})
                return [_opened(tx, row[0]) for row in rows]

            return await store.arun(fetch)

        items: list[TResponseInputItem] = await _journaled(
            self.session_id, "get_items", read, limit=count
        )
        return items

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` to the session."""
        if not items:
            return
        store = self._store()
        journaled = in_workflow_code()

        async def write(items: list[Any]) -> None:
            key = stalwart.idempotency_key() if journaled else None
            encoded = [encode_item(item) for item in items]

            def insert(tx: Transaction) -> None:
                if key is not None:
                    if tx.fetchone(_DONE, {"key": key}) is not None:
                        return  # an attempt whose outcome a crash kept from the journal did it
                    tx.execute(_RECORD, {"key": key, "session": self.session_id, "popped": None})
                for text in encoded:
                    tx.execute(_ADD, {"session": self.session_id, "item": tx.seal(text.encode())})

            await store.arun(insert)

        await _journaled(self.session_id, "add_items", write, items=_plain(items))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the session's latest item and return it (``None`` if it has none)."""
        store = self._store()
        journaled = in_workflow_code()

        async def pop() -> Any:
            key = stalwart.idempotency_key() if journaled else None

            def take(tx: Transaction) -> Any:
                if key is not None:
                    done = tx.fetchone(_DONE, {"key": key})
                    if done is not None:
                        return None if done[0] is None else _opened(tx, done[0])
                last = tx.fetchone(_LAST, {"session": self.session_id})
                kept = None if last is None else bytes(last[1])  # sealed as it was stored
                if last is not None:
                    tx.execute(_DELETE, {"id": last[0]})
                if key is not None:
                    tx.execute(_RECORD, {"key": key, "session": self.session_id, "popped": kept})
                return None if kept is None else _opened(tx, kept)

            return await store.arun(take)

        item: TResponseInputItem | None = await _journaled(self.session_id, "pop_item", pop)
        return item

    async def clear_session(self) -> None:
        """Remove every item of the session."""
        store = self._store()

        async def clear() -> None:
            def delete(tx: Transaction) -> None:
                tx.execute(_CLEAR, {"session": self.session_id})
                tx.execute(_CLEAR_WRITES, {"session": self.session_id})

            await store.arun(delete)

        await _journaled(self.session_id, "clear_session", clear)


class JournaledSession:
    """Any other session inside a durable run: each call a journaled step (so a replay
    neither reads a changed history nor writes twice), the session's own store unchanged."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self.session_id = session.session_id
        self.session_settings = getattr(session, "session_settings", None)

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The wrapped session's items, journaled."""

        async def read(limit: int | None) -> list[Any]:
            return _plain(await self._session.get_items(limit))

        items: list[TResponseInputItem] = await _journaled(
            self.session_id, "get_items", read, limit=limit
        )
        return items

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append to the wrapped session, journaled."""

        async def write(items: list[Any]) -> None:
            await self._session.add_items(items)

        await _journaled(self.session_id, "add_items", write, items=_plain(items))

    async def pop_item(self) -> TResponseInputItem | None:
        """Pop from the wrapped session, journaled."""

        async def pop() -> Any:
            item = await self._session.pop_item()
            return None if item is None else decode_item(encode_item(item))

        popped: TResponseInputItem | None = await _journaled(self.session_id, "pop_item", pop)
        return popped

    async def clear_session(self) -> None:
        """Clear the wrapped session, journaled."""
        await _journaled(self.session_id, "clear_session", self._session.clear_session)
