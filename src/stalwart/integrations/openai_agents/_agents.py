"""Durable copies of an agent graph: each agent's model and function tools run as journaled
steps, and the agents its handoffs reach are copied the same way.

Step names are compatibility data (a run in flight replays against them): ``AGENT/model`` for
a model call and ``AGENT/tool/TOOL`` for a function tool, ``AGENT`` being the agent's
``name`` and ``TOOL`` the tool's qualified name."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from agents import Agent, FunctionTool, Handoff, Model, ModelSettings, RunConfig, Tool
from agents.models import get_default_model, get_default_model_settings
from agents.tool_context import ToolContext

import stalwart

from ._codec import encode_tool_output
from ._model import DurableModel

__all__ = ["AgentCopier", "ToolOptions", "model_step_name", "tool_options", "tool_step_name"]

_OPTIONS = "_stalwart_tool_options"
_DURABLE = "_stalwart_durable"
T = TypeVar("T")


def model_step_name(agent_name: str) -> str:
    """The step name of ``agent_name``'s model calls."""
    return f"{agent_name}/model"


def tool_step_name(agent_name: str, tool_name: str) -> str:
    """The step name of ``agent_name``'s calls of the function tool ``tool_name`` (also the
    subject of the approval such a call waits for)."""
    return f"{agent_name}/tool/{tool_name}"


@dataclass(frozen=True)
class ToolOptions:
    """How a function tool's step runs: as ``stalwart.run_step``'s options of these names."""

    retry: stalwart.Retry | None = None
    timeout: float | None = None
    irreversible: bool = False
    verify: Callable[..., Any] | None = None


@overload
def tool_options(
    tool: FunctionTool,
    *,
    retry: stalwart.Retry | None = ...,
    timeout: float | None = ...,
    irreversible: bool = ...,
    verify: Callable[..., Any] | None = ...,
) -> FunctionTool: ...


@overload
def tool_options(
    tool: None = None,
    *,
    retry: stalwart.Retry | None = ...,
    timeout: float | None = ...,
    irreversible: bool = ...,
    verify: Callable[..., Any] | None = ...,
) -> Callable[[FunctionTool], FunctionTool]: ...


def tool_options(
    tool: FunctionTool | None = None,
    *,
    retry: stalwart.Retry | None = None,
    timeout: float | None = None,
    irreversible: bool = False,
    verify: Callable[..., Any] | None = None,
) -> FunctionTool | Callable[[FunctionTool], FunctionTool]:
    """Give a function tool's step the options of ``@app.step``: ``irreversible=True`` for an
    effect that must not be repeated blindly, with ``verify`` (a plain function taking the
    tool's arguments by name, returning what the tool returned if the effect happened, else
    ``None``), ``retry`` and ``timeout``. Use it above ``@function_tool``, or call it on a
    tool; it returns the tool."""
    if verify is not None and not irreversible:
        raise stalwart.UsageError(
            "tool_options(verify=...) checks an irreversible tool: add irreversible=True"
        )
    if retry is not None and not isinstance(retry, stalwart.Retry):
        raise TypeError(f"tool_options(retry={retry!r}): pass a stalwart.Retry(...)")
    options = ToolOptions(retry, timeout, irreversible, verify)

    def attach(target: FunctionTool) -> FunctionTool:
        if not isinstance(target, FunctionTool):
            raise TypeError(
                f"tool_options(...) applies to a FunctionTool, not {type(target).__name__}: "
                "put it above @function_tool"
            )
        setattr(target, _OPTIONS, options)
        return target

    return attach if tool is None else attach(tool)


def _arguments(raw: str) -> dict[str, Any]:
    """The tool call's arguments by name, as the step's journaled input and what ``verify``
    receives; empty when the model sent no JSON object (the SDK answers it with an error)."""
    try:
        parsed = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _durable_tool(agent_name: str, tool: Tool) -> Tool:
    if not isinstance(tool, FunctionTool) or getattr(tool, _DURABLE, False):
        return tool  # hosted tools run inside the model call; others are not journaled
    options: ToolOptions = getattr(tool, _OPTIONS, None) or ToolOptions()
    name = tool_step_name(agent_name, tool.qualified_name)
    invoke = tool.on_invoke_tool

    async def on_invoke_tool(ctx: ToolContext[Any], raw: str) -> Any:
        async def call(**_arguments: Any) -> Any:
            return encode_tool_output(await invoke(ctx, raw))

        return await stalwart.run_step_async(
            name,
            call,
            kwargs=_arguments(raw),
            retry=options.retry,
            timeout=options.timeout,
            irreversible=options.irreversible,
            verify=options.verify,
        )

    durable = dataclasses.replace(tool, on_invoke_tool=on_invoke_tool)
    setattr(durable, _DURABLE, True)
    return durable


def _journal_mcp_tools(agent: Agent[Any]) -> None:
    """Make the tools ``agent``'s MCP servers list (each turn) steps like its own tools."""
    list_tools = agent.get_mcp_tools

    async def get_mcp_tools(run_context: Any) -> list[Tool]:
        return [_durable_tool(agent.name, tool) for tool in await list_tools(run_context)]

    agent.get_mcp_tools = get_mcp_tools  # type: ignore[method-assign]


def _implicit_settings(agent: Agent[Any]) -> ModelSettings:
    if agent.model is None:
        return get_default_model_settings()
    if isinstance(agent.model, str):
        return get_default_model_settings(agent.model)
    return ModelSettings()


def _effective_settings(agent: Agent[Any], config: RunConfig) -> ModelSettings:
    """The settings the SDK would give ``agent``'s calls under ``config`` (without the run's
    own overrides, which still apply): an agent that kept the defaults of its model name gets
    the defaults of the model the run actually uses."""
    settings = agent.model_settings
    if settings != _implicit_settings(agent):
        return settings
    if isinstance(config.model, str):
        return get_default_model_settings(config.model)
    if isinstance(config.model, Model):
        return ModelSettings()
    return settings


class AgentCopier:
    """Copies agents for one run under ``config`` (the caller's run config, before the runner
    clears its ``model``): the same agent is copied once, so handoff cycles stay cycles."""

    def __init__(self, config: RunConfig, retry: stalwart.Retry, timeout: float | None) -> None:
        self._config = config
        self._retry = retry
        self._timeout = timeout
        self._copies: dict[int, Agent[Any]] = {}
        self._originals: list[Agent[Any]] = []  # keeps the ids of _copies' keys unique

    def agent(self, agent: Agent[T]) -> Agent[T]:
        """The durable copy of ``agent``."""
        if getattr(agent, _DURABLE, False):
            return agent
        known = self._copies.get(id(agent))
        if known is not None:
            return known
        copy = agent.clone(
            model=self._model(agent),
            model_settings=_effective_settings(agent, self._config),
            tools=[_durable_tool(agent.name, tool) for tool in agent.tools],
        )
        setattr(copy, _DURABLE, True)
        self._copies[id(agent)] = copy
        self._originals.append(agent)
        copy.handoffs = [self._handoff(item) for item in agent.handoffs]
        if agent.mcp_servers:
            _journal_mcp_tools(copy)
        return copy

    def _model(self, agent: Agent[Any]) -> DurableModel:
        config = self._config
        chosen: str | Model | None = config.model if config.model is not None else agent.model
        provider = config.model_provider
        if isinstance(chosen, Model):
            model: Model = chosen
            resolve: Callable[[], Model] = lambda: model  # noqa: E731
            name = getattr(model, "model", None)
        else:
            resolve = lambda: provider.get_model(chosen)  # noqa: E731
            name = chosen if chosen is not None else get_default_model()
        return DurableModel(
            model_step_name(agent.name),
            resolve,
            model_name=name if isinstance(name, str) else None,
            retry=self._retry,
            timeout=self._timeout,
        )

    def _handoff(self, item: Any) -> Any:
        if isinstance(item, Agent):
            return self.agent(item)
        if not isinstance(item, Handoff):
            return item
        invoke = item.on_invoke_handoff

        async def on_invoke_handoff(ctx: Any, raw: str) -> Any:
            return self.agent(await invoke(ctx, raw))

        return dataclasses.replace(item, on_invoke_handoff=on_invoke_handoff)
