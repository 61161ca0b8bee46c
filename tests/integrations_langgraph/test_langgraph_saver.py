"""StalwartSaver under real LangGraph graphs, on every backend: a chat's state read back by a
saver that never saw it, each message stored once, edits and forks, interrupts, async graphs,
two processes taking turns on one thread, and pruning (also with a DeltaChannel)."""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Iterator
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, RemoveMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

import stalwart
from stalwart.integrations.langgraph import StalwartSaver
from stalwart.integrations.langgraph._values import unframe, unpack


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def reply(state: Chat) -> dict[str, list[AnyMessage]]:
    return {"messages": [AIMessage(content=f"re: {state['messages'][-1].content}")]}


def chat_graph(saver: StalwartSaver) -> Any:
    builder = StateGraph(Chat)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


def thread(name: str) -> Any:
    return {"configurable": {"thread_id": name}}


def contents(state: Any) -> list[str]:
    return [m.content for m in state.values["messages"]]


@pytest.fixture
def app(store_url: str) -> Iterator[stalwart.Stalwart]:
    with stalwart.Stalwart(store_url) as instance:
        yield instance


def test_a_chat_reads_back_in_a_saver_that_never_saw_it(app: stalwart.Stalwart) -> None:
    graph = chat_graph(StalwartSaver(app))
    for turn in range(12):
        graph.invoke({"messages": [HumanMessage(content=f"q{turn}")]}, thread("chat"))
    expected = [text for turn in range(12) for text in (f"q{turn}", f"re: q{turn}")]
    fresh = chat_graph(StalwartSaver(app))
    assert contents(fresh.get_state(thread("chat"))) == expected
    history = list(fresh.get_state_history(thread("chat")))
    assert len(history) == 36  # input, start, reply: three checkpoints a turn
    assert contents(history[-1]) == []  # the first input checkpoint
    assert contents(history[3]) == expected[:-2]  # the end of the turn before last


def test_each_message_of_a_growing_chat_is_stored_once(app: stalwart.Stalwart) -> None:
    graph = chat_graph(StalwartSaver(app))
    for turn in range(30):
        graph.invoke({"messages": [HumanMessage(content=f"q{turn}")]}, thread("chat"))
    ext = StalwartSaver(app)._ext
    links = ext.fetchall(
        "SELECT keep, data FROM ext_langgraph_blobs WHERE channel = 'messages' ORDER BY version"
    )
    assert len(links) == 60  # one version per step that added a message
    assert sum(len(unframe(unpack(bytes(data)))) for _keep, data in links) == 60
    assert [keep for keep, _data in links] == list(range(60))


def test_edits_and_forks_read_back(app: stalwart.Stalwart) -> None:
    graph = chat_graph(StalwartSaver(app))
    for turn in range(4):
        graph.invoke({"messages": [HumanMessage(content=f"q{turn}")]}, thread("t"))
    state = graph.get_state(thread("t"))
    first, second = state.values["messages"][:2]
    graph.update_state(
        thread("t"),
        {"messages": [RemoveMessage(id=first.id), AIMessage(content="edited", id=second.id)]},
    )
    fresh = chat_graph(StalwartSaver(app))
    assert contents(fresh.get_state(thread("t")))[:2] == ["edited", "q1"]
    assert len(contents(fresh.get_state(thread("t")))) == 7
    # time travel: continue from the end of the first turn, on a new branch
    end_of_first = next(
        s for s in fresh.get_state_history(thread("t")) if len(s.values.get("messages", [])) == 2
    )
    fresh.invoke({"messages": [HumanMessage(content="branch")]}, end_of_first.config)
    assert contents(fresh.get_state(thread("t"))) == ["q0", "re: q0", "branch", "re: branch"]
    assert contents(chat_graph(StalwartSaver(app)).get_state(thread("t"))) == [
        "q0",
        "re: q0",
        "branch",
        "re: branch",
    ]


def test_an_interrupted_graph_resumes_from_another_saver(app: stalwart.Stalwart) -> None:
    class Approval(TypedDict):
        asked: str
        answer: str

    def ask(state: Approval) -> dict[str, str]:
        return {"answer": interrupt({"question": state["asked"]})}

    builder = StateGraph(Approval)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    first = builder.compile(checkpointer=StalwartSaver(app))
    paused = first.invoke({"asked": "refund?"}, thread("hitl"))
    assert paused["__interrupt__"][0].value == {"question": "refund?"}
    second = builder.compile(checkpointer=StalwartSaver(app))
    assert second.invoke(Command(resume="yes"), thread("hitl")) == {
        "asked": "refund?",
        "answer": "yes",
    }


def test_an_async_graph_uses_the_async_methods(app: stalwart.Stalwart) -> None:
    graph = chat_graph(StalwartSaver(app))

    async def talk() -> list[str]:
        for turn in range(3):
            await graph.ainvoke({"messages": [HumanMessage(content=f"a{turn}")]}, thread("async"))
        state = await graph.aget_state(thread("async"))
        return contents(state)

    assert asyncio.run(talk()) == ["a0", "re: a0", "a1", "re: a1", "a2", "re: a2"]


def test_two_processes_taking_turns_on_one_thread(shared_url: str) -> None:
    with stalwart.Stalwart(shared_url) as one, stalwart.Stalwart(shared_url) as other:
        graphs = [chat_graph(StalwartSaver(one)), chat_graph(StalwartSaver(other))]
        for turn in range(8):
            graphs[turn % 2].invoke({"messages": [HumanMessage(content=f"q{turn}")]}, thread("x"))
            if turn == 4:
                StalwartSaver(other).prune(["x"])  # under the other's remembered versions
        expected = [text for turn in range(8) for text in (f"q{turn}", f"re: q{turn}")]
        for graph in graphs:
            assert contents(graph.get_state(thread("x"))) == expected


def test_prune_keeps_the_latest_state_and_the_thread_goes_on(app: stalwart.Stalwart) -> None:
    saver = StalwartSaver(app)
    graph = chat_graph(saver)
    for turn in range(5):
        graph.invoke({"messages": [HumanMessage(content=f"q{turn}")]}, thread("p"))
        graph.invoke({"messages": [HumanMessage(content=f"other{turn}")]}, thread("kept"))
    before = contents(graph.get_state(thread("p")))
    saver.prune(["p"])
    fresh = chat_graph(StalwartSaver(app))
    assert contents(fresh.get_state(thread("p"))) == before
    assert len(list(fresh.get_state_history(thread("p")))) == 1
    assert len(list(fresh.get_state_history(thread("kept")))) == 15
    counts = saver._ext.fetchall(
        "SELECT thread_id, count(*) FROM ext_langgraph_blobs GROUP BY thread_id ORDER BY thread_id"
    )
    assert dict(counts)["p"] <= 12  # the latest values and the links under them, not 5 turns'
    fresh.invoke({"messages": [HumanMessage(content="again")]}, thread("p"))
    assert contents(chat_graph(StalwartSaver(app)).get_state(thread("p"))) == [
        *before,
        "again",
        "re: again",
    ]
    saver.delete_thread("p")
    for table in ("checkpoints", "blobs", "writes"):
        rows = saver._ext.fetchall(
            f"SELECT count(*) FROM ext_langgraph_{table} WHERE thread_id = 'p'"
        )
        assert rows == [(0,)], table


def _concat(state: list[str] | None, writes: list[list[str]]) -> list[str]:
    return [*(state or []), *(item for write in writes for item in write)]


class Log(TypedDict):
    log: Annotated[list[str], DeltaChannel(_concat, snapshot_frequency=4)]
    turns: Annotated[int, operator.add]


def test_prune_keeps_what_a_delta_channel_is_rebuilt_from(app: stalwart.Stalwart) -> None:
    def note(state: Log) -> dict[str, Any]:
        return {"log": [f"note {state['turns']}"], "turns": 1}

    builder = StateGraph(Log)
    builder.add_node("note", note)
    builder.add_edge(START, "note")
    builder.add_edge("note", END)
    saver = StalwartSaver(app)
    graph = builder.compile(checkpointer=saver)
    for turn in range(7):
        graph.invoke({"log": [f"input {turn}"], "turns": 0}, thread("delta"))
    before = graph.get_state(thread("delta")).values
    assert len(before["log"]) == 14
    saver.prune(["delta"])
    fresh = builder.compile(checkpointer=StalwartSaver(app))
    assert fresh.get_state(thread("delta")).values == before
    assert len(list(fresh.get_state_history(thread("delta")))) < 21


def test_a_value_whose_base_is_missing_is_an_error_not_a_short_list(
    app: stalwart.Stalwart,
) -> None:
    saver = StalwartSaver(app)
    graph = chat_graph(saver)
    for turn in range(3):
        graph.invoke({"messages": [HumanMessage(content=f"q{turn}")]}, thread("c"))
    saver._ext.execute("DELETE FROM ext_langgraph_blobs WHERE channel = 'messages' AND depth = 1")
    with pytest.raises(stalwart.StoreError, match="cannot be rebuilt"):
        chat_graph(StalwartSaver(app)).get_state(thread("c"))


def test_an_encrypted_store_keeps_no_message_in_plaintext(shared_url: str) -> None:
    """With a keyring, checkpoints, channel values and pending writes are sealed: no column of
    the integration's tables holds a message's text (their metadata stays readable)."""
    import os

    from stalwart import testing

    ring = stalwart.Keyring({"k1": os.urandom(32)})
    with stalwart.Stalwart(shared_url, encryption=ring) as app:
        graph = chat_graph(StalwartSaver(app))
        for turn in range(6):
            graph.invoke({"messages": [HumanMessage(content=f"ZQXSECRET{turn}")]}, thread("t"))
        fresh = chat_graph(StalwartSaver(app))
        assert contents(fresh.get_state(thread("t")))[-1] == "re: ZQXSECRET5"
        store = testing.store_of(app)
        for table in ("ext_langgraph_checkpoints", "ext_langgraph_blobs", "ext_langgraph_writes"):
            for row in testing.execute_sql(store, f"SELECT * FROM {table}"):
                for value in row:
                    data = bytes(value) if isinstance(value, bytes | memoryview) else str(value)
                    text = data if isinstance(data, str) else data.decode("latin-1")
                    assert "ZQXSECRET" not in text, (table, text[:80])
        sealed = [
            ("ext_langgraph_checkpoints", "checkpoint"),
            ("ext_langgraph_blobs", "data"),
            ("ext_langgraph_writes", "value"),
        ]
        for table, column in sealed:
            values = testing.execute_sql(store, f"SELECT {column} FROM {table}")
            assert values and all(v is None or bytes(v)[:2] == b"E\x02" for (v,) in values)
