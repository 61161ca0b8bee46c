"""The worker program of the pydantic-ai crash tests: real pydantic-ai agents (a
``FunctionModel`` standing in for the LLM) made durable by ``StalwartDurability``.

    python pydantic_ai_worker.py URL WORKDIR [--concurrency N] [--lease-seconds S] ...

It serves through ``worker_main.serve`` (see tests/faults). Every model call and tool body
appends one line to ``WORKDIR/executions.log`` when it really runs (``crash_agent.Recorder``);
the steps named in ``$PYDANTIC_AI_HANG`` (comma-separated: ``model-2``, ``lookup``, ``charge``)
then create ``WORKDIR/running-<WORKFLOW_ID>-<STEP>`` and sleep until the test kills the worker.
The ``charge`` tool's effect lands in ``WORKDIR/ledger.log`` (one line per charge, keyed by the
step's idempotency key), which its ``verify`` reads. The test process declares the same
workflows on its own app to start runs and read their results.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from crash_agent import Recorder
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from worker_main import serve

import stalwart
from stalwart.integrations.pydantic_ai import StalwartDurability

__all__ = ["APPROVAL_WORKFLOW", "RESEARCH_WORKFLOW", "Ledger", "declare", "main"]

RESEARCH_WORKFLOW = "pydantic_ai_research"
APPROVAL_WORKFLOW = "pydantic_ai_refund"
HANG_ENV = "PYDANTIC_AI_HANG"


class Ledger:
    """A fake payment service in a side file: a charge is one fsynced line per key."""

    def __init__(self, workdir: Path) -> None:
        self.path = workdir / "ledger.log"

    def charges(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line]

    def find(self, key: str) -> str | None:
        return next((c["charge_id"] for c in self.charges() if c["key"] == key), None)

    def charge(self, key: str, order: str, amount: int) -> str:
        charge_id = f"ch-{order}-{len(self.charges()) + 1}"
        line = json.dumps({"key": key, "charge_id": charge_id, "order": order, "amount": amount})
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return charge_id


def _requests(messages: list[ModelMessage]) -> int:
    return sum(isinstance(m, ModelRequest) for m in messages)


def _returns(messages: list[ModelMessage]) -> list[str]:
    return [
        str(part.content)
        for m in messages
        if isinstance(m, ModelRequest)
        for part in m.parts
        if isinstance(part, ToolReturnPart)
    ]


def research_agent(rec: Recorder) -> Agent[None, str]:
    """Looks a topic up, pays for the report (an irreversible charge with verify), answers."""
    ledger = Ledger(rec.workdir)

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = _requests(messages)
        rec.executed(f"model-{n}")
        await rec.hang_async(f"model-{n}")
        if n == 1:
            return ModelResponse(parts=[ToolCallPart("lookup", {"topic": "durable agents"})])
        if n == 2:
            return ModelResponse(parts=[ToolCallPart("charge", {"order": "o-1", "amount": 42})])
        return ModelResponse(parts=[TextPart(" | ".join(_returns(messages)))])

    def charged(order: str, amount: int) -> str | None:
        return ledger.find(stalwart.idempotency_key())

    agent = Agent(FunctionModel(model), name="researcher", capabilities=[StalwartDurability()])

    @agent.tool_plain
    async def lookup(topic: str) -> str:
        rec.executed("lookup", topic=topic)
        await rec.hang_async("lookup")
        return f"notes on {topic}"

    @agent.tool_plain(metadata={"stalwart": {"irreversible": True, "verify": charged}})
    async def charge(order: str, amount: int) -> str:
        rec.executed("charge", order=order)
        charge_id = ledger.charge(stalwart.idempotency_key(), order, amount)
        await rec.hang_async("charge")  # killed here: the effect happened, unrecorded
        return charge_id

    return agent


def refund_agent(rec: Recorder) -> Agent[None, str | DeferredToolRequests]:
    """Refunds an order with a tool that needs a person's approval."""

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = _requests(messages)
        rec.executed(f"model-{n}")
        if n == 1:
            return ModelResponse(parts=[ToolCallPart("refund", {"order": "o-7"})])
        return ModelResponse(parts=[TextPart(" | ".join(_returns(messages)))])

    agent = Agent(
        FunctionModel(model),
        name="refunds",
        capabilities=[StalwartDurability()],
        output_type=[str, DeferredToolRequests],
    )

    @agent.tool_plain(requires_approval=True)
    async def refund(order: str) -> str:
        rec.executed("refund", order=order)
        return f"refunded {order}"

    return agent


def declare(app: stalwart.Stalwart, rec: Recorder) -> dict[str, Any]:
    """The agents' workflows on ``app``."""
    research, refunds = research_agent(rec), refund_agent(rec)

    @app.workflow(name=RESEARCH_WORKFLOW)
    async def research_run(topic: str) -> str:
        result = await research.run(f"Research {topic}, then pay for the report.")
        return result.output

    @app.workflow(name=APPROVAL_WORKFLOW)
    async def refund_run(order: str) -> str:
        result = await refunds.run(f"Refund order {order}.")
        return str(result.output)

    return {RESEARCH_WORKFLOW: research_run, APPROVAL_WORKFLOW: refund_run}


def main(argv: list[str]) -> int:
    """Serve the agents' workflows (see ``worker_main``)."""
    hang = [step for step in os.environ.get(HANG_ENV, "").split(",") if step]
    rec = Recorder(Path(argv[1]), hang)
    return serve(argv, lambda app: declare(app, rec), __doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
