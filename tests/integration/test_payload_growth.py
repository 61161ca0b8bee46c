"""An agent whose every LLM step receives the whole conversation: the store grows linearly."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import stalwart


def _stored_bytes(path: Path) -> int:
    conn = sqlite3.connect(path)
    payloads = conn.execute("SELECT coalesce(sum(length(data)), 0) FROM payloads").fetchone()[0]
    rows = conn.execute(
        "SELECT coalesce(sum(length(input)), 0) + coalesce(sum(length(output)), 0) FROM journal"
    ).fetchone()[0]
    conn.close()
    return int(payloads) + int(rows)


def test_a_100_turn_agent_stores_a_small_multiple_of_its_conversation(tmp_path: Path) -> None:
    path = tmp_path / "growth.db"
    with stalwart.Stalwart(f"sqlite:///{path}") as app:

        @app.step
        def llm(conversation: list[dict[str, str]]) -> str:
            turn = len(conversation)
            return f"reply {turn}: " + "the assistant considers the question carefully. " * 6

        @app.workflow
        def agent(turns: int) -> list[dict[str, str]]:
            conversation: list[dict[str, str]] = []
            for i in range(turns):
                conversation.append({"role": "user", "content": f"question {i}: " + "why? " * 60})
                conversation.append({"role": "assistant", "content": llm(conversation)})
            return conversation

        final = app.run(agent, 100, workflow_id="chat")
        steps = [e for e in app.journal("chat") if e.kind == "step"]
        assert len(steps) == 100
        assert steps[-1].input == {"args": [final[:-1]], "kwargs": {}}  # the audit trail is whole
    conversation_bytes = len(json.dumps(final).encode())
    ratio = _stored_bytes(path) / conversation_bytes
    # Storing each step's input whole would be about 50x here (peers measured 51x to 127x).
    print(f"store holds {ratio:.1f}x the conversation")
    assert ratio < 6, f"the store holds {ratio:.1f}x the conversation"
