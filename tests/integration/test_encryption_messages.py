"""What encryption's errors say (the cold read's findings): a result under a missing key names
its run; wrong key material under a known key id is refused when the store is opened, naming
the id; a keyring whose only key never opened the store says it can write nothing and which
key to add; a changed ciphertext under a key that is proven right says it was changed."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import stalwart
from stalwart import testing

K1, K2, WRONG = os.urandom(32), os.urandom(32), os.urandom(32)


def _declare(app: stalwart.Stalwart) -> Any:
    @app.workflow(name="echo")
    def echo(text: str) -> str:
        return text

    return echo


def _written(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'sealed.db'}"
    with stalwart.Stalwart(url, encryption=stalwart.Keyring({"k1": K1})) as app:
        assert app.run(_declare(app), "kept under k1", workflow_id="w1") == "kept under k1"
    return url


def test_a_result_under_a_missing_key_names_its_run(tmp_path: Path) -> None:
    url = _written(tmp_path)
    with stalwart.Stalwart(url) as app:
        with pytest.raises(
            stalwart.EncryptionKeyMissing, match=r"\(run 'w1'\).*key 'k1'"
        ) as caught:
            app.handle("w1").result()
        assert caught.value.workflow_id == "w1" and caught.value.key_id == "k1"


def test_wrong_key_material_under_a_known_id_is_refused_by_name(tmp_path: Path) -> None:
    url = _written(tmp_path)
    with pytest.raises(stalwart.CorruptRecord, match="key 'k1' of the keyring does not open"):
        stalwart.Stalwart(url, encryption=stalwart.Keyring({"k1": WRONG}))
    with pytest.raises(stalwart.CorruptRecord, match="wrong key material"):
        stalwart.Stalwart(url, encryption=stalwart.Keyring({"k2": K2, "k1": WRONG}))


def test_a_keyring_whose_only_key_never_opened_the_store_says_what_to_add(
    tmp_path: Path,
) -> None:
    url = _written(tmp_path)
    with stalwart.Stalwart(url, encryption=stalwart.Keyring({"k2": K2})) as app:
        echo = _declare(app)
        with pytest.raises(stalwart.EncryptionKeyMissing) as caught:
            app.run(echo, "new", workflow_id="w2")
        message = str(caught.value)
        assert "never opened this store" in message and "add key 'k1'" in message
        assert "can read" not in message
    ring = stalwart.Keyring({"k2": K2, "k1": K1})  # what the message says to do
    with stalwart.Stalwart(url, encryption=ring) as app:
        assert app.run(_declare(app), "new", workflow_id="w2") == "new"
    with stalwart.Stalwart(url, encryption=stalwart.Keyring({"k2": K2})) as app:
        assert app.run(_declare(app), "k2 alone", workflow_id="w3") == "k2 alone"


def test_a_changed_ciphertext_under_a_proven_key_says_it_was_changed(tmp_path: Path) -> None:
    url = _written(tmp_path)
    with stalwart.Stalwart(url, encryption=stalwart.Keyring({"k1": K1})) as app:
        store = testing.store_of(app)
        (output,) = testing.execute_sql(store, "SELECT output FROM runs WHERE workflow_id = 'w1'")[
            0
        ]
        changed = bytearray(bytes(output))
        changed[-1] ^= 1
        sql = "UPDATE runs SET output = :o WHERE workflow_id = 'w1'"
        testing.execute_sql(store, sql, {"o": bytes(changed)})
        with pytest.raises(stalwart.CorruptRecord, match="changed after it was written; restore"):
            app.handle("w1").result()
