"""An agent's model whose every call is one journaled step."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from agents import Model, ModelResponse, ModelSettings, ModelTracing, Tool
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import TResponseInputItem, TResponseStreamEvent
from openai.types.responses.response_prompt_param import ResponsePromptParam

import stalwart

from ._codec import decode_response, encode_response

__all__ = ["DurableModel", "StreamingRefused"]

STREAMING_REFUSED = (
    "DurableRunner.run_streamed is not supported: a model stream cannot be replayed after a "
    "crash; use 'await DurableRunner.run(...)', whose every model call is one journaled step"
)


class StreamingRefused(stalwart.UsageError):
    """Raised for a streamed model call of a durable agent (see ``STREAMING_REFUSED``)."""


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

    def stream_response(  # noqa: PLR0917  (the SDK's Model interface)
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
        """Refused: see :data:`STREAMING_REFUSED`."""
        raise StreamingRefused(STREAMING_REFUSED)

    async def close(self) -> None:
        """Close the resolved model, if a call resolved it."""
        if self._inner is not None:
            await self._inner.close()

    async def _cleanup_on_run_end(self, owner: object) -> None:
        if self._inner is not None:
            await self._inner._cleanup_on_run_end(owner)
