"""LangGraph's own conformance suite (``langgraph-checkpoint-conformance``) against
``StalwartSaver``, on SQLite and PostgreSQL: every base capability, plus ``delete_for_runs``,
``copy_thread`` and ``prune``, which the saver implements."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import CapabilityReport

import stalwart
from stalwart.integrations.langgraph import StalwartSaver

EXTENDED = {"delete_for_runs", "copy_thread", "prune"}


def _validate(url: str) -> CapabilityReport:
    with stalwart.Stalwart(url) as app:

        @checkpointer_test(name=f"StalwartSaver on {url.split(':', maxsplit=1)[0]}")
        async def saver() -> AsyncIterator[StalwartSaver]:
            yield StalwartSaver(app)

        return asyncio.run(validate(saver))


def test_the_saver_passes_langgraph_conformance_suite(shared_url: str) -> None:
    report = _validate(shared_url)
    failures = {name: result.failures for name, result in report.results.items() if result.failures}
    assert failures == {}
    assert report.passed_all_base()
    for capability in EXTENDED:
        result = report.results[capability]
        assert result.detected and result.passed, (capability, result)
    assert all(result.tests_passed > 0 for result in report.results.values())
