"""An agent whose every LLM step receives the whole conversation: the store grows linearly.

Stored bytes are every value the store keeps for the run (the payloads table, pieces and tree
nodes included, and the payload columns of the journal and the run), against
``len(json.dumps(conversation))``; ``bench/journal_growth.py`` prints the same figures."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import stalwart
from stalwart.testing import execute_sql, store_of
from store_urls import postgres_schema_url

STORED_BYTES = """
SELECT (SELECT coalesce(sum(length(data)), 0) FROM payloads)
     + (SELECT coalesce(sum(length(input)), 0) + coalesce(sum(length(output)), 0) FROM journal)
     + (SELECT coalesce(sum(length(input)), 0) + coalesce(sum(length(output)), 0) FROM runs)
"""


@pytest.fixture(params=["sqlite", "postgres"])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], str]]:
    """A new, empty store's URL on each call, on the backend of the parameter."""
    schemas: list[Iterator[str]] = []
    files = itertools.count()

    def new() -> str:
        if request.param == "sqlite":
            return f"sqlite:///{tmp_path / f'growth-{next(files)}.db'}"
        schemas.append(postgres_schema_url())
        return next(schemas[-1])

    if request.param == "postgres":
        new()  # skips here, before anything runs, when no server is configured
    yield new
    for schema in schemas:
        next(schema, None)  # drops the schema


def _agent_stores(url: str, turns: int) -> tuple[int, int]:
    """Run the agent for ``turns`` turns on a fresh store: (conversation bytes, stored bytes)."""
    with stalwart.Stalwart(url) as app:

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

        final = app.run(agent, turns, workflow_id="chat")
        steps = [e for e in app.journal("chat") if e.kind == "step"]
        assert len(steps) == turns
        assert steps[-1].input == {"args": [final[:-1]], "kwargs": {}}  # the audit trail is whole
        ((stored,),) = execute_sql(store_of(app), STORED_BYTES)
    return len(json.dumps(final).encode()), int(stored)


@pytest.mark.timeout(120)
def test_the_store_holds_at_most_1_5x_the_conversation_and_grows_linearly(
    fresh_url: Callable[[], str],
) -> None:
    conversation_100, stored_100 = _agent_stores(fresh_url(), 100)
    _conversation_200, stored_200 = _agent_stores(fresh_url(), 200)
    ratio = stored_100 / conversation_100
    growth = stored_200 / stored_100
    # A flat manifest per step was 4.37x and 2.51x; each input stored whole would be about 50x.
    print(f"100 turns: the store holds {ratio:.2f}x the conversation; 200 turns cost {growth:.2f}x")
    assert ratio <= 1.5, f"the store holds {ratio:.2f}x the conversation at 100 turns"
    assert growth <= 2.2, f"200 turns cost {growth:.2f}x what 100 do"
