"""The agent the OpenAI Agents tests run: a model of the SDK's ``Model`` interface that answers
from the conversation it is sent (so a fresh process answers as the killed one would have) and
counts its calls in a side file, and tools that count theirs.

The trip agent's conversation, by the tool results it has seen so far:

0. two parallel ``weather`` calls (Paris, Rome);
2. ``charge`` (irreversible, with ``verify`` reading the charges file);
3. ``book`` (``needs_approval``);
4. the final answer, naming every tool result it saw.

``OA_HANG`` (comma-separated points: ``model:N``, ``weather:CITY``, ``charge``, ``book``) makes
the first process that reaches a point create ``running-WID-POINT`` in the work folder and hang
there, so a test can SIGKILL it; a later process passes through.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from agents import Agent, FunctionTool, Model, ModelResponse, Usage, function_tool
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

import stalwart
from stalwart.integrations.openai_agents import tool_options

__all__ = ["CountingModel", "Recorder", "call", "message", "trip_agent"]

HANG = "OA_HANG"


class Recorder:
    """The side files of one work folder: executions, charges, hang markers."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.log = workdir / "executions.log"
        self.charges = workdir / "charges.log"

    def executed(self, step: str) -> None:
        try:
            wid = stalwart.workflow_id()
        except RuntimeError:  # called outside any run
            wid = "-"
        line = json.dumps({"wid": wid, "step": step, "pid": os.getpid()})
        with self.log.open("a") as f:
            f.write(line + "\n")

    def counts(self, workflow_id: str) -> dict[str, int]:
        counted: dict[str, int] = {}
        if self.log.exists():
            for line in self.log.read_text().splitlines():
                entry = json.loads(line)
                if entry["wid"] == workflow_id:
                    counted[entry["step"]] = counted.get(entry["step"], 0) + 1
        return counted

    def charged(self) -> list[dict[str, Any]]:
        if not self.charges.exists():
            return []
        return [json.loads(line) for line in self.charges.read_text().splitlines()]

    async def checkpoint(self, point: str) -> None:
        """Hang here if ``OA_HANG`` names ``point`` and no process hung here before."""
        if point not in os.environ.get(HANG, "").split(","):
            return
        marker = self.workdir / f"running-{stalwart.workflow_id()}-{point}"
        if marker.exists():
            return
        marker.touch()
        await asyncio.sleep(3600)  # until the test's SIGKILL


def call(name: str, arguments: dict[str, Any], call_id: str) -> ResponseFunctionToolCall:
    """A function call the model makes."""
    return ResponseFunctionToolCall(
        arguments=json.dumps(arguments),
        call_id=call_id,
        name=name,
        type="function_call",
        id=f"fc_{call_id}",
    )


def message(text: str) -> ResponseOutputMessage:
    """An assistant message with ``text``."""
    return ResponseOutputMessage(
        id="msg_1",
        content=[ResponseOutputText(text=text, type="output_text", annotations=[])],
        role="assistant",
        status="completed",
        type="message",
    )


def _outputs(items: str | list[Any]) -> list[str]:
    if isinstance(items, str):
        return []
    return [
        str(item["output"])
        for item in items
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]


TRIP = [
    [call("weather", {"city": "Paris"}, "c1"), call("weather", {"city": "Rome"}, "c2")],
    None,
    [call("charge", {"order": "o-1", "amount": 42}, "c3")],
    [call("book", {"city": "Rome"}, "c4")],
]


class CountingModel(Model):
    """Answers the trip conversation (``script`` by tool results seen: a list of outputs, or
    ``None`` where no answer is due) and counts each call as ``model:N``."""

    def __init__(self, recorder: Recorder, script: list[Any] | None = None) -> None:
        self.recorder = recorder
        self.script = TRIP if script is None else script
        self.seen: list[Any] = []  # what each call of this process was sent

    async def get_response(  # noqa: PLR0917  (the SDK's Model interface)
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: Any,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        outputs = _outputs(input)
        turn = len(outputs)
        self.seen.append({"input": input, "settings": model_settings, "tools": tools})
        self.recorder.executed(f"model:{turn}")
        await self.recorder.checkpoint(f"model:{turn}")
        scripted = self.script[turn] if turn < len(self.script) else None
        output = scripted or [message("done: " + "; ".join(outputs))]
        usage = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15)
        return ModelResponse(output=list(output), usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def trip_tools(recorder: Recorder) -> list[FunctionTool]:
    """``weather``, ``charge`` (irreversible, verified) and ``book`` (needs approval)."""

    @function_tool
    async def weather(city: str) -> str:
        """Today's weather in ``city``."""
        recorder.executed(f"weather:{city}")
        await recorder.checkpoint(f"weather:{city}")
        return f"sunny in {city}"

    def charged(order: str, amount: int) -> str | None:
        key = stalwart.idempotency_key()
        for line in recorder.charged():
            if line["key"] == key:
                return f"charged {line['amount']} for {line['order']}"
        return None

    @tool_options(irreversible=True, verify=charged)
    @function_tool
    async def charge(order: str, amount: int) -> str:
        """Charge the customer ``amount`` for ``order``."""
        recorder.executed("charge")
        line = {"key": stalwart.idempotency_key(), "order": order, "amount": amount}
        with recorder.charges.open("a") as f:
            f.write(json.dumps(line) + "\n")
        await recorder.checkpoint("charge")  # the effect happened; its record did not
        return f"charged {amount} for {order}"

    @function_tool(needs_approval=True)
    async def book(city: str) -> str:
        """Book the trip to ``city``."""
        recorder.executed("book")
        await recorder.checkpoint("book")
        return f"booked {city}"

    return [weather, charge, book]


def trip_agent(model: Model, recorder: Recorder) -> Agent[Any]:
    """The trip agent on ``model``."""
    return Agent(
        name="Assistant",
        instructions="Plan the trip.",
        model=model,
        tools=list(trip_tools(recorder)),
    )
