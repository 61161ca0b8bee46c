"""Rekey for the extension port's tables (``ext_*``, docs/extension-port.md): the values an
integration sealed with ``tx.seal`` re-sealed under the keyring's current key.

The core does not know an integration's columns, so it looks for what ``tx.seal`` writes: a
binary column value tagged as sealed (``_keyring``) under a key of the ring other than the
current one. A value under a key the ring lacks is left as it is (it cannot be opened; keep
that key until it is re-sealed), and so is one that only looks sealed and does not open. A
value an integration kept in plaintext is not touched: only the integration knows which of its
columns hold what users said. Rows are found by their primary key (a table without one is
left) and each page is one transaction whose ``UPDATE`` requires the value it read, so rekey
stays online, resumable and idempotent.
"""

from __future__ import annotations

from typing import Any

from ..._errors import CorruptRecord
from ..._keyring import SEALED_TAG, Keyring, key_id_of
from ..base import Store
from .access import Bulk, quoted

__all__ = ["rekey_extensions"]


def _binary_columns(bulk: Bulk, table: str) -> list[str]:
    if bulk.dialect == "postgres":
        sql = (
            "SELECT column_name FROM information_schema.columns WHERE table_schema = "
            "current_schema() AND table_name = %(t)s AND data_type = 'bytea' "
            "ORDER BY ordinal_position"
        )
        return [r[0] for r in bulk.read(lambda c: c.execute(sql, {"t": table}).fetchall())]
    pragma = f"PRAGMA table_info({quoted(table)})"
    rows = bulk.read(lambda c: c.execute(pragma).fetchall())
    return [r[1] for r in rows if str(r[2]).upper() == "BLOB"]


def _resealed(keyring: Keyring, value: bytes) -> bytes | None:
    key_id = key_id_of(value)
    if key_id is None or key_id == keyring.current or key_id not in keyring.keys:
        return None
    try:
        return keyring._seal(keyring._open(value))
    except (CorruptRecord, ValueError):  # not sealed after all (a digest that starts like one)
        return None


def _column(
    bulk: Bulk, keyring: Keyring, table: str, key: tuple[str, ...], column: str, *, limit: int
) -> int:
    current = keyring._head  # the tag, the id's length and the current id
    size = len(current)
    col = quoted(column)
    if bulk.dialect == "postgres":
        head, part = f"substring({col} from 1 for 1)", f"substring({col} from 1 for {size})"
    else:
        head, part = f"substr({col}, 1, 1)", f"substr({col}, 1, {size})"
    where = f"{head} = {bulk.param('tag')} AND {part} <> {bulk.param('current')}"
    params = {"tag": SEALED_TAG, "current": current}
    match = " AND ".join(f"{quoted(k)} = {bulk.param(f'k{i}')}" for i, k in enumerate(key))
    update = (
        f"UPDATE {quoted(table)} SET {col} = {bulk.param('new')} "
        f"WHERE {match} AND {col} = {bulk.param('old')}"
    )
    done = 0
    for page in bulk.pages(table, (*key, column), key, where, params):
        changes: list[dict[str, Any]] = []
        for row in page:
            old = bytes(row[-1])
            new = _resealed(keyring, old)
            if new is not None:
                keys = {f"k{i}": value for i, value in enumerate(row[:-1])}
                changes.append({**keys, "new": new, "old": old})
            if len(changes) >= limit - done:
                break

        def write(conn: Any, changes: list[dict[str, Any]] = changes) -> int:
            return sum(conn.execute(update, change).rowcount for change in changes)

        done += bulk.write(write) if changes else 0
        if done >= limit:
            break
    return done


def rekey_extensions(store: Store, keyring: Keyring, batch: int) -> int:
    """Re-seal at most ``batch`` values of the ``ext_*`` tables held under an older key of
    ``keyring``; how many it did."""
    bulk = Bulk(store)
    done = 0
    for table in bulk.tables():
        if not table.startswith("ext_"):
            continue
        key = bulk.primary_key(table)
        if not key:
            continue
        for column in _binary_columns(bulk, table):
            if done >= batch:
                return done
            if column not in key:
                done += _column(bulk, keyring, table, key, column, limit=batch - done)
    return done
