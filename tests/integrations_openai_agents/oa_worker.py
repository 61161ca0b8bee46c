"""A worker serving the trip agent (``oa_scripted.py``) with ``DurableRunner``:

    python oa_worker.py URL WORKDIR [--concurrency N] [--lease-seconds S] ...

The workflow ``oa_trip(question)`` runs the agent with a ``StalwartSession`` named after the
run and returns its final output. ``OA_HANG`` picks where the first process hangs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import agents
from oa_scripted import CountingModel, Recorder, trip_agent
from worker_main import serve

import stalwart
from stalwart.integrations.openai_agents import DurableRunner, StalwartSession

__all__ = ["WORKFLOW", "declare"]

WORKFLOW = "oa_trip"


def declare(app: stalwart.Stalwart, workdir: Path) -> Any:
    """The trip workflow on ``app``, counting in ``workdir``'s side files."""
    agents.set_tracing_disabled(True)
    recorder = Recorder(workdir)

    @app.workflow(name=WORKFLOW)
    async def trip(question: str) -> str:
        agent = trip_agent(CountingModel(recorder), recorder)
        session = StalwartSession(f"chat-{stalwart.workflow_id()}", app=app)
        result = await DurableRunner.run(agent, question, session=session)
        return str(result.final_output)

    return trip


def main(argv: list[str]) -> int:
    """Serve the trip workflow (see ``worker_main``; ``argv[1]`` is the work folder)."""
    workdir = Path(argv[1])
    return serve(argv, lambda app: declare(app, workdir), __doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
