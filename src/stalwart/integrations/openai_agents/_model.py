"""An agent's model whose every call is one journaled step."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from agents import (
    Model,
    ModelBehaviorError,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    Tool,
    Usage,
)
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import TResponseInputItem, TResponseStreamEvent
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseTextDeltaEvent,
    ResponseUsage,
)
from openai.types.responses.response_prompt_param import ResponsePromptParam

import stalwart

from ._codec import decode_response, encode_response

__all__ = ["DurableModel", "StreamingRefused"]

STREAMING_REFUSED = (
    "a model stream cannot be replayed after a crash; use 'await DurableRunner.run(...)' or "
    "DurableRunner.run_streamed(...), whose every model call is one journaled step"
)


class StreamingRefused(stalwart.UsageError):
    """Raised for a streamed model call of a durable agent that cannot be made durable (kept
    for callers that catch it: ``DurableRunner.run_streamed`` streams durably since 0.3)."""


def _emit(text: str) -> None:
    """``text`` to the run's stream "default" (nothing outside a run)."""
    if text:
        with contextlib.suppress(stalwart.InvalidOperation):
            stalwart.emit(text)


def _usage_of(usage: ResponseUsage | None) -> Usage:
    if usage is None:
        return Usage(requests=1)
    return Usage(
        requests=1,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        total_tokens=usage.total_tokens,
        input_tokens_details=usage.input_tokens_details,
        output_tokens_details=usage.output_tokens_details,
    )


def _completed(response: ModelResponse) -> ResponseCompletedEvent:
    """The one event a recorded response is streamed back to the SDK as: its completion."""
    usage = response.usage
    terminal = Response.model_construct(
        id=response.response_id or "",
        object="response",
        created_at=0.0,
        model="",
        status="completed",
        output=list(response.output),
        parallel_tool_calls=False,
        tool_choice="auto",
        tools=[],
        usage=ResponseUsage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            total_tokens=usage.total_tokens,
            input_tokens_details=usage.input_tokens_details,
            output_tokens_details=usage.output_tokens_details,
        ),
    )
    return ResponseCompletedEvent(type="response.completed", response=terminal, sequence_number=0)


class DurableModel(Model):
    """Runs ``resolve()``'s model inside the step ``step_name``: a replay returns the recorded
    response without calling the provider (nor resolving the model, so a replay needs no API
    key)."""

    def __init__(
        self,
        step_name: str,
        resolve: Callable[[], Model],
        *,
        model_name: str | None,
        retry: stalwart.Retry,
        timeout: float | None,
    ) -> None:
        self.step_name = step_name
        self._resolve = resolve
        self._model_name = model_name
        self._retry = retry
        self._timeout = timeout
        self._inner: Model | None = None

    def _model(self) -> Model:
        if self._inner is None:
            self._inner = self._resolve()
        return self._inner

    async def get_response(  # noqa: PLR0917  (the SDK's Model interface)
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        """The response of one model call: the provider's on the first run, the journal's on
        a replay."""

        async def call(**_summary: Any) -> dict[str, Any]:
            model = self._model()
            response = await model.get_response(
                system_instructions,
                input,
                model_settings,
                tools,
                output_schema,
                handoffs,
                tracing,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                prompt=prompt,
            )
            recorded = encode_response(response)
            name = self._model_name or getattr(model, "model", None)
            if isinstance(name, str) and name:
                recorded["model"] = name  # stalwart prices the step's usage by it
            return recorded

        summary = {"input_items": 1 if isinstance(input, str) else len(input)}
        recorded = await stalwart.run_step_async(
            self.step_name, call, kwargs=summary, retry=self._retry, timeout=self._timeout
        )
        return decode_response(recorded)

    async def stream_response(  # noqa: PLR0917  (the SDK's Model interface)
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        """One streamed model call as one step: the provider's stream is consumed inside it,
        each text delta emitted to the run's stream ``"default"`` as it comes, and the response
        it completes with recorded; the SDK then gets that response as one completed event (on
        a replay too, without calling the provider)."""

        async def call(**_summary: Any) -> dict[str, Any]:
            model = self._model()
            final: Response | None = None
            async for event in model.stream_response(
                system_instructions,
                input,
                model_settings,
                tools,
                output_schema,
                handoffs,
                tracing,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                prompt=prompt,
            ):
                if isinstance(event, ResponseTextDeltaEvent):
                    _emit(event.delta)
                elif isinstance(event, ResponseCompletedEvent):
                    final = event.response
            if final is None:
                raise ModelBehaviorError("the model's stream ended without a completed response")
            response = ModelResponse(
                output=list(final.output), usage=_usage_of(final.usage), response_id=final.id
            )
            recorded = encode_response(response)
            name = self._model_name or getattr(model, "model", None)
            if isinstance(name, str) and name:
                recorded["model"] = name
            return recorded

        summary = {"input_items": 1 if isinstance(input, str) else len(input)}
        recorded = await stalwart.run_step_async(
            self.step_name, call, kwargs=summary, retry=self._retry, timeout=self._timeout
        )
        yield _completed(decode_response(recorded))

    async def close(self) -> None:
        """Close the resolved model, if a call resolved it."""
        if self._inner is not None:
            await self._inner.close()

    async def _cleanup_on_run_end(self, owner: object) -> None:
        if self._inner is not None:
            await self._inner._cleanup_on_run_end(owner)
