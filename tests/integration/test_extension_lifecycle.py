"""The extension port's tables (``ext_*``) in the data lifecycle: ``rekey`` re-seals what an
integration sealed with ``tx.seal`` under an older key (resumable, a batch at a time, leaving
plaintext and digests alone), and a prune of a run deletes nothing there (an integration's rows
belong to its threads and sessions, which outlive runs; it deletes them itself)."""

from __future__ import annotations

import datetime as _dt
import os

import stalwart
from stalwart import testing
from stalwart._extension import ExtensionStore, Migration

K1, K2 = os.urandom(32), os.urandom(32)
NOTES = [
    Migration(
        1,
        sqlite="CREATE TABLE ext_notes_items (key TEXT PRIMARY KEY, body BLOB, plain BLOB, "
        "tag TEXT)",
        postgres="CREATE TABLE ext_notes_items (key TEXT PRIMARY KEY, body BYTEA, plain BYTEA, "
        "tag TEXT)",
    )
]
PUT = "INSERT INTO ext_notes_items (key, body, plain, tag) VALUES (:key, :body, :plain, :tag)"


def _ring(*ids: str) -> stalwart.Keyring:
    keys = {"k1": K1, "k2": K2}
    return stalwart.Keyring({i: keys[i] for i in ids})


def _raw(store: object) -> dict[str, tuple[bytes, bytes]]:
    rows = testing.execute_sql(store, "SELECT key, body, plain FROM ext_notes_items")
    return {str(k): (bytes(b), bytes(p)) for k, b, p in rows}


def test_rekey_reseals_what_an_integration_sealed(shared_url: str) -> None:
    with stalwart.Stalwart(shared_url, encryption=_ring("k1")) as app:
        notes = ExtensionStore(app, "notes", NOTES)
        with notes.transaction() as tx:
            for i in range(7):
                body = tx.seal(f"what a user said {i}".encode())
                # plain: a value the integration keeps as it is, which happens to look sealed
                tx.execute(PUT, {"key": f"n{i}", "body": body, "plain": b"E\x02k1xyz", "tag": "t"})
    with stalwart.Stalwart(shared_url, encryption=_ring("k2", "k1")) as app:
        assert [app.rekey(batch=3) for _ in range(4)] == [3, 3, 1, 0]
        raw = _raw(testing.store_of(app))
        assert all(body.startswith(b"E\x02k2") for body, _plain in raw.values())
        assert all(plain == b"E\x02k1xyz" for _body, plain in raw.values())
    with stalwart.Stalwart(shared_url, encryption=_ring("k2")) as app:  # k1 dropped
        notes = ExtensionStore(app, "notes", NOTES)
        with notes.transaction() as tx:
            row = tx.fetchone("SELECT body FROM ext_notes_items WHERE key = 'n6'")
            assert row is not None and tx.open(row[0]) == b"what a user said 6"


def test_a_prune_leaves_the_integrations_rows(shared_url: str) -> None:
    with stalwart.Stalwart(shared_url) as app:
        notes = ExtensionStore(app, "notes", NOTES)

        @app.workflow(name="noting")
        def noting(key: str) -> str:
            notes.execute(PUT, {"key": key, "body": b"kept", "plain": None, "tag": key})
            return key

        app.run(noting, "thread-1", workflow_id="w1")
        soon = _dt.datetime.now(_dt.UTC) + _dt.timedelta(hours=1)
        assert app.prune(soon) == 1
        assert notes.fetchall("SELECT key, body FROM ext_notes_items") == [("thread-1", b"kept")]
