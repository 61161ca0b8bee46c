"""Durable pydantic-ai agents: ``Agent(..., capabilities=[StalwartDurability()])``, then
``await agent.run(...)`` inside an ``async def`` workflow.

Built on pydantic-ai's public ``durable_exec`` surface: :class:`StalwartDurability` is a
``BaseDurabilityCapability`` whose backend runs each durable operation pydantic-ai hands it (a
model request, streamed or not, a tool call of a function, MCP or dynamic toolset, a toolset's
discovery, an event-handler call) as one ``stalwart.run_step_async`` step, named by
:class:`StalwartOperationNamer`. Approvals of deferred tools become
``stalwart.request_approval_async`` waits; the agent graph's own delays become durable timers.
Outside a workflow (or inside a step) the capability is transparent and the run is an ordinary
pydantic-ai run.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Generic, Literal, TypeVar, cast

from pydantic import ValidationError
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied
from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.capabilities import WrapRunHandler
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    BoundDurableOperation,
    CallableOperationBackend,
    CallToolResult,
    CapabilityOperationId,
    DurabilityEngineSpec,
    DurableOperation,
    DurableOperationId,
    DynamicToolsetCallToolParams,
    EventStreamHandlerId,
    EventStreamHandlerParams,
    JournalOperationNamer,
    ModelCancelSuspendedResponseId,
    ModelCompactMessagesId,
    ModelRequestId,
    OperationConfigRole,
    ToolsetCallToolId,
    ToolsetCallToolParams,
    ToolsetGetInstructionsId,
    ToolsetGetToolsId,
    ToolsetKind,
    ToolsetValidateToolArgumentsId,
    conversation_id_from_run_id,
)
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import (
    AgentStreamEvent,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
)
from pydantic_ai.models import Model
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import AgentDepsT, RunContext
from pydantic_core import to_jsonable_python

import stalwart

__all__ = ["METADATA_KEY", "StalwartDurability", "StalwartOperationNamer"]

METADATA_KEY = "stalwart"
"""The tool-metadata key of a tool's step options: ``{"stalwart": {"irreversible": True,
"verify": fn, "retry": Retry(...), "timeout": s}}``, or ``{"stalwart": False}`` to run the tool
in workflow code, unjournaled."""

ParallelMode = Literal["parallel_ordered_events", "sequential"]
ParamsT = TypeVar("ParamsT")
WireT = TypeVar("WireT")
ResultT = TypeVar("ResultT")

_TOOL_OPTIONS = frozenset({"irreversible", "verify", "retry", "timeout"})


def _in_workflow_code() -> bool:
    """Whether this code runs in a stalwart workflow and not inside one of its steps (where a
    model or tool call is a plain call)."""
    try:
        stalwart.workflow_id()
    except RuntimeError:
        return False
    try:
        stalwart.idempotency_key()
    except RuntimeError:
        return True
    return False


def _not_retryable(exc: Exception) -> BaseException:
    return stalwart.NonRetryableError(
        f"the result cannot be journaled as JSON ({type(exc).__name__}: {exc}); return "
        "JSON-compatible values from tools"
    )


def _user_errors_fail_at_once(policy: stalwart.Retry) -> stalwart.Retry:
    """A default policy that does not retry pydantic-ai's ``UserError`` (a mistake in the
    agent's setup, which another attempt cannot fix)."""
    return dataclasses.replace(policy, non_retryable=(*policy.non_retryable, UserError))


def _tool_return_payload(value: Any) -> Any:
    """The journaled form of a tool call that returned ``value``, as the tool's own step would
    have recorded it (``verify`` answers with the tool's return value)."""
    recorded = JSON_CODEC.load(CallToolResult, {"kind": "tool_return", "result": value})
    return JSON_CODEC.dump(CallToolResult, recorded)


def _tool_payload(recorded: Any) -> Any:
    """A tool step's recorded result as pydantic-ai reads it: what the step recorded, or the
    plain value an operator recorded with ``app.resolve(..., result=...)`` for an in-doubt
    call, taken as what the tool returned."""
    if isinstance(recorded, dict) and "kind" in recorded:
        try:
            JSON_CODEC.load(CallToolResult, recorded)
        except ValidationError:
            pass
        else:
            return recorded
    return _tool_return_payload(recorded)


# -- step names -------------------------------------------------------------------------------


def _toolset_part(kind: ToolsetKind, toolset_id: str) -> str:
    prefix = "mcp_server" if kind == "mcp" else f"{kind}_toolset"
    return f"{prefix}__{toolset_id}"


class StalwartOperationNamer(JournalOperationNamer):
    """The step names of an agent's operations; they are what the journal records and what
    replay compares, so they are compatibility data: renaming one strands runs in flight.

    ``AGENT__model.request``, ``AGENT__model.request_stream`` (plus ``.MODEL_ID`` for a model
    other than the agent's default), ``AGENT__function_toolset__ID.call_tool:TOOL``,
    ``AGENT__mcp_server__ID.call_tool:TOOL``, ``AGENT__dynamic_toolset__ID.call_tool:TOOL``,
    ``...validate_args:TOOL``, ``AGENT__mcp_server__ID.get_tools`` / ``.get_instructions``,
    ``AGENT__dynamic_toolset__ID.get_tools``, ``AGENT__event_stream_handler``,
    ``AGENT__capability__ID.OPERATION``."""

    def __init__(self, agent_name: str, *, default_model_id: str | None = None) -> None:
        super().__init__(agent_name, default_model_id=default_model_id or "default")
        self.agent_name = agent_name
        self.default_model_id = default_model_id or "default"

    def _model(self, operation: str, model_id: str | None) -> str:
        same = model_id is None or model_id == self.default_model_id
        return f"{self.agent_name}__model.{operation}{'' if same else f'.{model_id}'}"

    def operation_name(self, operation_id: DurableOperationId) -> str:
        """The step name of every call of ``operation_id`` (before a tool's name is added)."""
        agent = self.agent_name
        match operation_id:
            case ModelRequestId(model_id=model_id, streaming=streaming):
                return self._model("request_stream" if streaming else "request", model_id)
            case ModelCompactMessagesId(model_id=model_id):
                return self._model("compact_messages", model_id)
            case ModelCancelSuspendedResponseId(model_id=model_id):
                return self._model("cancel_suspended_response", model_id)
            case EventStreamHandlerId():
                return f"{agent}__event_stream_handler"
            case CapabilityOperationId(capability_id=capability_id, operation=operation):
                return f"{agent}__capability__{capability_id}.{operation}"
            case ToolsetGetToolsId(toolset_kind=kind, toolset_id=toolset_id):
                return f"{agent}__{_toolset_part(kind, toolset_id)}.get_tools"
            case ToolsetGetInstructionsId(toolset_id=toolset_id):
                return f"{agent}__{_toolset_part('mcp', toolset_id)}.get_instructions"
            case ToolsetValidateToolArgumentsId(toolset_kind=kind, toolset_id=toolset_id):
                return f"{agent}__{_toolset_part(kind, toolset_id)}.validate_args"
            case ToolsetCallToolId(toolset_kind=kind, toolset_id=toolset_id):
                return f"{agent}__{_toolset_part(kind, toolset_id)}.call_tool"
            case _:  # an operation newer than this integration: named by its class
                return f"{agent}__{type(operation_id).__name__}"

    def invocation_name(self, operation_id: DurableOperationId, *, label: str | None) -> Any:
        """The step name of one call: a tool call's ends with ``:TOOL`` (MCP tools too)."""
        name = self.operation_name(operation_id)
        if label is not None and isinstance(
            operation_id, ToolsetCallToolId | ToolsetValidateToolArgumentsId
        ):
            name = f"{name}:{label}"
        base = super().invocation_name(operation_id, label=label if label is not None else "")
        return dataclasses.replace(base, operation_name=name)


# -- the model's text, to the run's stream ------------------------------------------------------


def _emit(text: str) -> None:
    """``text`` to the run's stream "default" (nothing outside a run: an ordinary agent run)."""
    if text:
        with contextlib.suppress(stalwart.InvalidOperation):
            stalwart.emit(text)


def _emit_event(event: object) -> None:
    """A streamed model response's text: what a text part starts with, then each delta."""
    if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
        _emit(event.part.content)
    elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
        _emit(event.delta.content_delta)


def _emit_response(response: object) -> None:
    """A whole (not streamed) model response's text parts, one chunk each (the response as
    the operation hands it to its step: its JSON form)."""
    parts = response.get("parts") if isinstance(response, dict) else None
    for part in parts if isinstance(parts, list) else ():
        if isinstance(part, dict) and part.get("part_kind") == "text":
            content = part.get("content")
            if isinstance(content, str):
                _emit(content)


def _emitting(handler: EventStreamHandler[AgentDepsT] | None) -> EventStreamHandler[AgentDepsT]:
    """An event handler that emits the model's text as it streams, then hands the events on to
    ``handler`` (if any): it consumes the live stream inside the model request's step."""

    async def handle(ctx: RunContext[AgentDepsT], events: AsyncIterable[AgentStreamEvent]) -> None:
        async def emitted() -> AsyncIterator[AgentStreamEvent]:
            async for event in events:
                _emit_event(event)
                yield event

        if handler is None:
            async for _event in emitted():
                pass
        else:
            await handler(ctx, emitted())

    return handle


# -- step options -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _StepPolicy:
    """How one operation runs as a step. ``arguments`` are journaled as the step's input: a
    tool call's arguments (what ``verify`` is called with), an event's kind."""

    retry: stalwart.Retry
    timeout: float | None = None
    irreversible: bool = False
    verify: Callable[..., Any] | None = None
    arguments: Mapping[str, Any] | None = None

    def with_options(self, options: Mapping[str, Any], tool_name: str) -> _StepPolicy:
        unknown = set(options) - _TOOL_OPTIONS
        if unknown:
            raise UserError(
                f"tool {tool_name!r}: unknown {METADATA_KEY!r} metadata {sorted(unknown)}; the "
                f"options are {sorted(_TOOL_OPTIONS)}"
            )
        return dataclasses.replace(self, **dict(options))

    async def run(self, name: str, body: Callable[[], Awaitable[object]]) -> object:
        async def unit(**_arguments: Any) -> object:  # the arguments are journaled, not used
            return await body()

        verify = self.verify
        raw = dict(self.arguments or {})
        if verify is not None:
            found_by = verify

            def verify_unit(**_arguments: Any) -> Any:
                found = found_by(**raw)
                return None if found is None else _tool_return_payload(found)

            verify = verify_unit
        return await stalwart.run_step_async(
            name,
            unit,
            kwargs=to_jsonable_python(raw, fallback=repr),
            retry=self.retry,
            timeout=self.timeout,
            irreversible=self.irreversible,
            verify=verify,
        )


class _Policies:
    """The backend's configuration: a policy per role, a tool's own from its metadata."""

    def __init__(
        self, *, model: _StepPolicy, tool: _StepPolicy, event: _StepPolicy, capability: _StepPolicy
    ) -> None:
        self.by_role: dict[str, _StepPolicy] = {
            "model": model,
            "tool": tool,
            "event": event,
            "capability": capability,
        }

    def base(self, role: OperationConfigRole, *, operation_id: DurableOperationId) -> _StepPolicy:
        return self.by_role.get(role, self.by_role["tool"])

    def for_tool(
        self,
        role: OperationConfigRole,
        *,
        operation_id: DurableOperationId,
        tool: object | None,
        tool_name: str,
    ) -> _StepPolicy | Literal[False]:
        policy = self.base(role, operation_id=operation_id)
        tool_def = getattr(tool, "tool_def", None)
        options = (getattr(tool_def, "metadata", None) or {}).get(METADATA_KEY)
        if options is False:
            return False
        if options is None:
            return policy
        if not isinstance(options, Mapping):
            raise UserError(
                f"tool {tool_name!r}: {METADATA_KEY!r} metadata must be a dict of step options "
                f"({sorted(_TOOL_OPTIONS)}) or False, not {type(options).__name__}"
            )
        if isinstance(operation_id, ToolsetValidateToolArgumentsId):
            # validating the arguments takes no effect; the call that follows is irreversible
            options = {k: v for k, v in options.items() if k in ("retry", "timeout")}
        return policy.with_options(options, tool_name)


# -- the backend ------------------------------------------------------------------------------


class _ArgumentsBound(
    BoundDurableOperation[ParamsT, WireT, ResultT], Generic[ParamsT, WireT, ResultT]
):
    """A bound operation that hands a tool call's arguments to its step (journaled as the
    step's input, and what ``verify`` is called with)."""

    def __init__(
        self, bound: BoundDurableOperation[ParamsT, WireT, ResultT], policies: _Policies
    ) -> None:
        self._bound = bound
        self._policies = policies

    @property
    def operation(self) -> DurableOperation[ParamsT, WireT, ResultT]:
        return self._bound.operation

    async def __call__(self, params: ParamsT, *, config: object | None = None) -> ResultT:
        operation = self._bound.operation
        policy = (
            config
            if config is not None
            else self._policies.base(operation.config_role, operation_id=operation.operation_id)
        )
        if isinstance(policy, _StepPolicy):
            if isinstance(params, ToolsetCallToolParams | DynamicToolsetCallToolParams):
                policy = dataclasses.replace(policy, arguments=params.tool_args)
            elif isinstance(params, EventStreamHandlerParams):
                kind = getattr(params.event, "event_kind", type(params.event).__name__)
                policy = dataclasses.replace(policy, arguments={"event": kind})
        return await self._bound(params, config=policy)


class _StalwartBackend(CallableOperationBackend[_StepPolicy]):
    """Runs each durable operation as one ``stalwart.run_step_async`` step."""

    def __init__(self, namer: StalwartOperationNamer, policies: _Policies) -> None:
        super().__init__(namer=namer, config=policies)
        self._policies = policies

    def bind(
        self, operation: DurableOperation[ParamsT, WireT, ResultT]
    ) -> BoundDurableOperation[ParamsT, WireT, ResultT]:
        return _ArgumentsBound(super().bind(operation), self._policies)

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: _StepPolicy,
    ) -> object:
        if isinstance(operation_id, ModelRequestId) and not operation_id.streaming:
            request = body

            async def body() -> object:  # its text goes to the run's stream, inside the step
                response = await request()
                _emit_response(response)
                return response

        recorded = await config.run(name, body)
        return _tool_payload(recorded) if isinstance(operation_id, ToolsetCallToolId) else recorded


# -- the capability ---------------------------------------------------------------------------


@dataclass(init=False)
class StalwartDurability(BaseDurabilityCapability[AgentDepsT]):
    """Makes an agent durable on stalwart: ``Agent(..., name="...", capabilities=
    [StalwartDurability()])``, then ``await agent.run(...)`` inside an ``async def``
    ``@app.workflow``.

    Every model request (streamed ones too: the stream is consumed inside the step, where
    ``event_stream_handler`` sees its events live, and the model's text deltas are emitted to
    the run's stream ``"default"`` as they come; a request not streamed emits its text whole),
    every tool call of a function, MCP or dynamic toolset, each toolset's discovery and each
    event-handler call is a journaled step, so a crash resumes the agent loop without repeating
    what completed. Model steps retry with ``model_retry`` (default ``Retry.llm()``, which
    honours ``Retry-After``; turn the provider client's own retries off), tool steps with
    ``tool_retry`` (default ``Retry()``); a tool's metadata ``{"stalwart": {...}}`` sets its own
    ``retry``, ``timeout``, ``irreversible`` and ``verify`` (called with the tool's arguments;
    it returns the tool's result if the effect already happened, else ``None``). A tool that
    needs approval waits on ``stalwart.request_approval_async`` (denied when
    ``approval_timeout`` passes). The agent's ``name`` (or ``name=`` here) and each toolset's
    ``id`` are part of every step name: keep them stable once runs are in flight.
    """

    engine_spec: ClassVar[DurabilityEngineSpec] = DurabilityEngineSpec(
        engine_name="stalwart",
        durable_unit_noun="step",
        durable_container_noun="workflow",
        codec=JSON_CODEC,
        serialization_failure=_not_retryable,
        wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        # Steps run in the workflow's own process, so a run holds one MCP session, entered by
        # the first step that needs it (and retried as that step).
        toolset_lifecycles={
            "function": "enter-always",
            "mcp": "enter-in-durable-unit",
            "dynamic": "enter-never",
        },
        journal_discovery=True,
        # Journal positions follow each task's creation order, not completion order.
        sequential_tools_in_durable_context=False,
        # A toolset given to run() was not wrapped when the agent was built: its calls would
        # not be journaled.
        unsupported_runtime_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        tool_config_key=METADATA_KEY,
    )

    def __init__(
        self,
        *,
        name: str | None = None,
        models: Mapping[str, Model] | None = None,
        event_stream_handler: EventStreamHandler[AgentDepsT] | None = None,
        model_retry: stalwart.Retry | None = None,
        model_timeout: float | None = None,
        tool_retry: stalwart.Retry | None = None,
        tool_timeout: float | None = None,
        parallel_execution_mode: ParallelMode = "parallel_ordered_events",
        approval_timeout: float | None = None,
    ) -> None:
        """Configure the steps; the agent's model, name and toolsets are found when the
        capability is bound to the agent. ``models``: other models a run may select by key
        (``agent.run(model="key")``), as in pydantic-ai's other durable capabilities."""
        super().__init__(models=models, event_stream_handler=event_stream_handler, name=name)
        if parallel_execution_mode not in ("parallel_ordered_events", "sequential"):
            raise UserError(
                f"parallel_execution_mode={parallel_execution_mode!r}: tool-result events must "
                "come in call order to replay; use 'parallel_ordered_events' or 'sequential'"
            )
        model = model_retry or _user_errors_fail_at_once(stalwart.Retry.llm())
        tool = _StepPolicy(tool_retry or _user_errors_fail_at_once(stalwart.Retry()), tool_timeout)
        self._policies = _Policies(
            model=_StepPolicy(model, model_timeout),
            tool=tool,
            event=tool,
            capability=tool,
        )
        self._parallel_mode: ParallelMode = parallel_execution_mode
        self._approval_timeout = approval_timeout
        self._backend: tuple[tuple[str, str | None], _StalwartBackend] | None = None

    @property
    def in_durable_context(self) -> bool:
        """Inside a stalwart workflow, and not inside one of its steps."""
        return _in_workflow_code()

    def _model_stream_event_handler(self) -> EventStreamHandler[AgentDepsT] | None:
        # pydantic-ai's hook for what consumes a live model stream inside its step (Temporal's
        # capability overrides it too): the text deltas go to the run's stream as they come
        return _emitting(super()._model_stream_event_handler())

    def get_durable_operation_backend(self) -> _StalwartBackend:
        """The backend that runs this agent's operations as steps."""
        key = (self.name, self.default_model_id)
        if self._backend is None or self._backend[0] != key:
            namer = StalwartOperationNamer(self.name, default_model_id=self.default_model_id)
            self._backend = (key, _StalwartBackend(namer, self._policies))
        return self._backend[1]

    def get_default_run_id(self) -> str | None:
        """In a workflow, a run id recorded in the journal, so a replay gets the same one."""
        return str(stalwart.uuid4()) if self.in_durable_context else None

    def get_default_conversation_id(self, run_id: str) -> str | None:
        """In a workflow, derived from the (replayed) run id."""
        return conversation_id_from_run_id(run_id) if self.in_durable_context else None

    async def get_run_start_time(self, run_id: str) -> datetime | None:
        """In a workflow, recorded once: a run's ``timeout=`` counts from its first start."""
        return stalwart.now() if self.in_durable_context else None

    async def wrap_run(
        self, ctx: RunContext[AgentDepsT], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        """In a workflow: tool-result events in call order, and durable agent-graph delays."""
        if not self.in_durable_context:
            return await super().wrap_run(ctx, handler=handler)
        with (
            Agent.parallel_tool_call_execution_mode(self._parallel_mode),
            Agent.using_sleep(stalwart.sleep_async),
        ):
            return await super().wrap_run(ctx, handler=handler)

    async def handle_deferred_tool_calls(
        self, ctx: RunContext[AgentDepsT], *, requests: DeferredToolRequests
    ) -> DeferredToolResults | None:
        """In a workflow, each tool call that needs approval waits durably for a person's
        decision (``app.approve`` / ``app.reject``, the CLI or the console); calls to be
        executed elsewhere (``CallDeferred``) are left to the caller, as without stalwart."""
        if not self.in_durable_context or not requests.approvals:
            return None
        decisions: dict[str, bool | ToolApproved | ToolDenied] = {}
        for call in requests.approvals:
            decision = await stalwart.request_approval_async(
                self.approval_subject(call.tool_name),
                self._approval_details(call, requests.metadata.get(call.tool_call_id)),
                timeout=self._approval_timeout,
            )
            if decision is None:
                decisions[call.tool_call_id] = ToolDenied(
                    f"No one approved the call of {call.tool_name!r} in time."
                )
            elif decision.approved:
                decisions[call.tool_call_id] = ToolApproved()
            else:
                why = f": {decision.reason}" if decision.reason else "."
                decisions[call.tool_call_id] = ToolDenied(
                    f"The call of {call.tool_name!r} was denied by {decision.by}{why}"
                )
        return DeferredToolResults(approvals=decisions)

    def approval_subject(self, tool_name: str) -> str:
        """The subject of the approval a call of ``tool_name`` waits on (what ``stalwart
        approvals`` lists): ``"AGENT: TOOL"``."""
        return f"{self.name}: {tool_name}"

    def _approval_details(self, call: ToolCallPart, metadata: Any) -> dict[str, Any]:
        try:
            arguments: Any = call.args_as_dict()
        except Exception:  # the model's arguments are not JSON: show them as they came
            arguments = call.args
        details = {
            "agent": self.name,
            "tool": call.tool_name,
            "tool_call_id": call.tool_call_id,
            "args": arguments,
        }
        if metadata is not None:
            details["metadata"] = metadata
        return cast(dict[str, Any], to_jsonable_python(details, fallback=repr))
