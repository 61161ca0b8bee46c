"""``StalwartSession`` on an encrypted store: the items (and what a pop took) are sealed under
the app's keyring like every payload, rekey reseals them, and a store whose session tables are
from before (version 1, JSON text) is migrated with its items readable."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

import stalwart
from stalwart import _extension
from stalwart._keyring import key_id_of
from stalwart.integrations.openai_agents import StalwartSession
from stalwart.integrations.openai_agents._session import MIGRATIONS, NAMESPACE
from stalwart.testing import execute_sql, store_of

MARK = "ZQXSESSIONMARK"
K1, K2 = os.urandom(32), os.urandom(32)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def raw(app: stalwart.Stalwart) -> list[bytes]:
    """Every item and popped value as the session's tables hold them."""
    store = store_of(app)
    items = execute_sql(store, "SELECT item FROM ext_openai_agents_items")
    popped = execute_sql(store, "SELECT popped FROM ext_openai_agents_writes")
    return [bytes(v) for (v,) in [*items, *popped] if v is not None]


def test_items_and_pops_are_sealed(shared_url: str) -> None:
    ring = stalwart.Keyring({"k1": K1})
    with stalwart.Stalwart(shared_url, encryption=ring) as app:

        @app.workflow
        async def chat() -> Any:
            session = StalwartSession("chat", app=app)
            await session.add_items([user(f"{MARK} in a run")])
            return await session.pop_item()

        session = StalwartSession("chat", app=app)
        asyncio.run(session.add_items([user(f"{MARK} one"), user(f"{MARK} two")]))
        assert app.run(chat) == user(f"{MARK} in a run")
        assert asyncio.run(session.get_items()) == [user(f"{MARK} one"), user(f"{MARK} two")]
        stored = raw(app)
        assert len(stored) == 3  # two items, one popped value
        assert all(MARK.encode() not in v and key_id_of(v) == "k1" for v in stored)

    with (
        stalwart.Stalwart(shared_url) as keyless,
        pytest.raises(stalwart.EncryptionKeyMissing, match="k1"),
    ):
        asyncio.run(StalwartSession("chat", app=keyless).get_items())


def test_rekey_reseals_the_items(shared_url: str) -> None:
    with stalwart.Stalwart(shared_url, encryption=stalwart.Keyring({"k1": K1})) as app:
        asyncio.run(StalwartSession("chat", app=app).add_items([user(f"{MARK} kept")]))
    ring = stalwart.Keyring({"k1": K1, "k2": K2}, current="k2")
    with stalwart.Stalwart(shared_url, encryption=ring) as app:
        while app.rekey():
            pass
        assert [key_id_of(v) for v in raw(app)] == ["k2"]
    with stalwart.Stalwart(shared_url, encryption=stalwart.Keyring({"k2": K2})) as app:
        items = asyncio.run(StalwartSession("chat", app=app).get_items())
        assert items == [user(f"{MARK} kept")]


def test_version_1_tables_migrate_with_their_items(shared_url: str) -> None:
    with stalwart.Stalwart(shared_url) as app:
        old = _extension.ExtensionStore(app, NAMESPACE, MIGRATIONS[:1])
        old.execute(
            "INSERT INTO ext_openai_agents_items (session_id, item) VALUES (:s, :i)",
            {"s": "chat", "i": '{"role": "user", "content": "from 0.2"}'},
        )
        old.execute(
            "INSERT INTO ext_openai_agents_writes (op_key, session_id, popped) VALUES (:k, :s, :p)",
            {"k": "op-1", "s": "chat", "p": '{"role": "user", "content": "popped"}'},
        )
    with stalwart.Stalwart(shared_url, encryption=stalwart.Keyring({"k1": K1})) as app:
        session = StalwartSession("chat", app=app)
        asyncio.run(session.add_items([user("after")]))
        assert asyncio.run(session.get_items()) == [user("from 0.2"), user("after")]
        assert asyncio.run(session.pop_item()) == user("after")
        assert asyncio.run(session.pop_item()) == user("from 0.2")
        assert asyncio.run(session.pop_item()) is None
        # a new item after the rebuilt table takes an id past the old ones
        asyncio.run(session.add_items([user("again")]))
        assert asyncio.run(session.get_items()) == [user("again")]
