"""``StalwartSession`` on SQLite and PostgreSQL: what it keeps survives a new app on the same
store; inside a run its reads and writes are journaled (a replay does not re-read a changed
session, nor write twice); any other session gets the same journaling from DurableRunner."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, SQLiteSession
from agents.memory import SessionSettings
from oa_scripted import CountingModel, Recorder

import stalwart
from stalwart.integrations.openai_agents import (
    DurableRunner,
    StalwartSession,
    session_step_name,
)
from stalwart.testing import execute_sql, store_of

WAIT_S = 30.0


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def wake_when_waiting(app: stalwart.Stalwart, wid: str, before: Callable[[], None]) -> None:
    """Once run ``wid`` waits for the event ``go``: call ``before``, then send ``go``."""

    def run() -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                if app.handle(wid).status() == "suspended":
                    before()
                    app.send_event(wid, "go")
                    return
            except stalwart.WorkflowNotFound:
                pass
            time.sleep(0.01)

    threading.Thread(target=run, daemon=True).start()


def test_items_survive_a_new_app_on_the_same_store(shared_url: str) -> None:
    with stalwart.Stalwart(shared_url) as app:
        session = StalwartSession("chat-1", app=app)
        asyncio.run(session.add_items([user("hi"), user("how are you?"), user("bye")]))
        asyncio.run(StalwartSession("other", app=app).add_items([user("elsewhere")]))

    with stalwart.Stalwart(shared_url) as app:
        session = StalwartSession("chat-1", app=app)
        assert asyncio.run(session.get_items()) == [
            user("hi"),
            user("how are you?"),
            user("bye"),
        ]
        assert asyncio.run(session.get_items(limit=2)) == [user("how are you?"), user("bye")]
        assert asyncio.run(session.get_items(limit=0)) == []
        limited = StalwartSession("chat-1", app=app, session_settings=SessionSettings(limit=1))
        assert asyncio.run(limited.get_items()) == [user("bye")]
        assert asyncio.run(session.pop_item()) == user("bye")
        assert asyncio.run(session.get_items()) == [user("hi"), user("how are you?")]
        asyncio.run(session.clear_session())
        assert asyncio.run(session.get_items()) == []
        assert asyncio.run(session.pop_item()) is None
        assert asyncio.run(StalwartSession("other", app=app).get_items()) == [user("elsewhere")]


def test_a_session_without_an_app_outside_a_run_says_what_to_pass() -> None:
    with pytest.raises(stalwart.UsageError, match="pass app="):
        asyncio.run(StalwartSession("chat-1").get_items())


def test_a_replay_reads_what_the_first_run_read_and_writes_nothing_twice(
    shared_url: str,
) -> None:
    with stalwart.Stalwart(shared_url) as app:
        session = StalwartSession("chat-2", app=app)
        asyncio.run(session.add_items([user("first")]))
        reads: list[list[Any]] = []

        @app.workflow
        async def chat() -> list[Any]:
            seen = await session.get_items()
            reads.append(seen)
            await session.add_items([user("from the run")])
            await stalwart.wait_for_event_async("go")  # the replay follows
            return seen

        # Someone else writes to the session while the run waits.
        wake_when_waiting(app, "c2", lambda: asyncio.run(session.add_items([user("later")])))
        assert app.run(chat, workflow_id="c2") == [user("first")]

        assert reads == [[user("first")], [user("first")]]
        assert asyncio.run(session.get_items()) == [
            user("first"),
            user("from the run"),
            user("later"),
        ]
        names = [e.name for e in app.journal("c2") if e.kind == "step"]
        assert names == [
            session_step_name("chat-2", "get_items"),
            session_step_name("chat-2", "add_items"),
        ]
        assert names == ["session/chat-2/get_items", "session/chat-2/add_items"]  # pinned


def test_a_write_whose_journal_record_was_lost_is_not_written_again(shared_url: str) -> None:
    with stalwart.Stalwart(shared_url) as app:
        session = StalwartSession("chat-3", app=app)

        @app.workflow
        async def chat() -> list[Any]:
            await session.add_items([user("once")])
            popped = await session.pop_item()
            await session.add_items([user("twice?")])
            await stalwart.wait_for_event_async("go")
            return [popped]

        def lose_the_records() -> None:
            # As if the worker died after the session's commits, before the journal's.
            execute_sql(
                store_of(app),
                "DELETE FROM journal WHERE workflow_id = 'c3' AND name LIKE 'session/%'",
            )

        wake_when_waiting(app, "c3", lose_the_records)
        assert app.run(chat, workflow_id="c3") == [user("once")]

        assert asyncio.run(session.get_items()) == [user("twice?")]


def test_any_other_session_is_journaled_by_the_durable_runner(
    shared_url: str, tmp_path: Path
) -> None:
    recorder = Recorder(tmp_path)
    with stalwart.Stalwart(shared_url) as app:

        @app.workflow
        async def chat(question: str) -> str:
            session = SQLiteSession("chat-4", str(tmp_path / "sdk-sessions.db"))
            agent = Agent(name="Assistant", model=CountingModel(recorder, []))
            result = await DurableRunner.run(agent, question, session=session)
            await stalwart.wait_for_event_async("go")  # the replay follows
            return str(result.final_output)

        wake_when_waiting(app, "c4", lambda: None)
        assert app.run(chat, "hello", workflow_id="c4") == "done: "

        items = asyncio.run(SQLiteSession("chat-4", str(tmp_path / "sdk-sessions.db")).get_items())
        assert [item.get("role") for item in items] == ["user", "assistant"]  # not twice
        names = [e.name for e in app.journal("c4") if e.kind == "step"]
        assert names == [
            "session/chat-4/get_items",
            "session/chat-4/add_items",
            "Assistant/model",
            "session/chat-4/add_items",
        ]


def test_inside_a_run_the_session_uses_the_runs_app(shared_url: str) -> None:
    with stalwart.Stalwart(shared_url) as app:

        @app.workflow
        async def chat() -> list[Any]:
            session = StalwartSession("chat-5")
            await session.add_items([user("hi")])
            return await session.get_items()

        assert app.run(chat, workflow_id="c5") == [user("hi")]
