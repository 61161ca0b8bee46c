"""The store's part in encryption at rest, on every backend: the digest key kept wrapped per
key id (never replaced), and rekey re-sealing what it finds, once, each value under its
precondition."""

from __future__ import annotations

import os

import pytest
from test_store_contract import _create

from stalwart._keyring import Keyring, key_id_of
from stalwart._store import Store
from stalwart._store.keys import attach_keyring
from stalwart.testing import execute_sql


def test_the_digest_key_is_kept_once_per_key_id(store: Store) -> None:
    assert store.digest_keys() == {}
    store.add_digest_keys({"k1": b"first"})
    store.add_digest_keys({"k1": b"second", "k2": b"other"})  # k1 is kept as it was
    assert store.digest_keys() == {"k1": b"first", "k2": b"other"}
    store.add_digest_keys({})


def test_rekey_seals_plaintext_and_older_keys_once(store: Store) -> None:
    _create(store)  # a run whose input was written in plaintext
    with pytest.raises(ValueError, match="rekey needs a keyring"):
        store.rekey(10)
    k1, k2 = os.urandom(32), os.urandom(32)
    attach_keyring(store, Keyring({"k1": k1}))
    done = store.rekey(1)
    assert done == 1
    while store.rekey(1):
        pass
    (stored,) = execute_sql(store, "SELECT input FROM runs WHERE workflow_id = 'r1'")[0]
    assert key_id_of(bytes(stored)) == "k1"
    attach_keyring(store, Keyring({"k2": k2, "k1": k1}))
    assert store.rekey(500) >= 1 and store.rekey(500) == 0
    (stored,) = execute_sql(store, "SELECT input FROM runs WHERE workflow_id = 'r1'")[0]
    assert key_id_of(bytes(stored)) == "k2"
    assert set(store.digest_keys()) == {"k1", "k2"}
