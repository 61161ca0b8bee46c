"""Scripted models for the in-process pydantic-ai tests: a ``FunctionModel`` whose n-th request
(counted by the requests in the message history) gets the n-th scripted answer, and which
records each request it really answers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

__all__ = ["Script", "call", "requests", "returns", "text"]

Answer = ModelResponse | Callable[[list[ModelMessage]], ModelResponse]


def call(tool: str, **args: Any) -> ModelResponse:
    """An answer that calls ``tool`` with ``args``."""
    return ModelResponse(parts=[ToolCallPart(tool, args)])


def text(content: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(content)])


def requests(messages: list[ModelMessage]) -> int:
    return sum(isinstance(m, ModelRequest) for m in messages)


def returns(messages: list[ModelMessage]) -> list[str]:
    """What the tools returned (or the retry prompts they caused), oldest first."""
    found = []
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, ToolReturnPart | RetryPromptPart):
                    found.append(str(part.content))
    return found


@dataclass
class Script:
    """Answers request n with ``answers[n - 1]`` (the last one after that; a callable is
    given the messages); ``before(n)`` runs first, e.g. to fail or crash request n."""

    answers: Sequence[Answer]
    before: Callable[[int], None] | None = None
    answered: list[int] = field(default_factory=list)

    def answer(self, messages: list[ModelMessage]) -> ModelResponse:
        n = requests(messages)
        if self.before is not None:
            self.before(n)
        self.answered.append(n)
        chosen = self.answers[min(n, len(self.answers)) - 1]
        return chosen(messages) if callable(chosen) else chosen

    def model(self) -> FunctionModel:
        async def function(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            return self.answer(messages)

        async def stream(
            messages: list[ModelMessage], info: AgentInfo
        ) -> AsyncIterator[str | DeltaToolCalls]:
            response = self.answer(messages)
            for index, part in enumerate(response.parts):
                if isinstance(part, TextPart):
                    for word in part.content.split(" "):
                        yield word + " "
                elif isinstance(part, ToolCallPart):
                    delta = DeltaToolCall(name=part.tool_name, json_args=part.args_as_json_str())
                    yield {index: delta}

        return FunctionModel(function, stream_function=stream)
