"""``DurableRunner``: the ``agents.Runner`` interface, durable inside a stalwart workflow."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

from agents import (
    Agent,
    RunConfig,
    RunErrorHandlers,
    RunHooks,
    Runner,
    RunResult,
    RunResultStreaming,
    RunState,
    Session,
    ToolApprovalItem,
    TResponseInputItem,
)
from agents.run import DEFAULT_MAX_TURNS

import stalwart

from ._agents import AgentCopier, tool_step_name
from ._session import JournaledSession, StalwartSession, in_workflow_code

__all__ = ["DurableRunner"]

_SYNC_IN_WORKFLOW = (
    "DurableRunner.run_sync cannot run inside a workflow: make the workflow 'async def' and "
    "'await DurableRunner.run(...)'"
)


def _config_of(run_config: RunConfig | dict[str, Any] | None) -> tuple[RunConfig, bool]:
    """The caller's run config, and whether the runner made its model provider (and so closes
    it when the run ends, as the SDK's runner does)."""
    if run_config is None:
        return RunConfig(), True
    if isinstance(run_config, dict):
        return RunConfig(**run_config), "model_provider" not in run_config
    return run_config, False


def _approval_details(item: ToolApprovalItem) -> dict[str, Any]:
    raw = item.arguments
    try:
        arguments: Any = json.loads(raw) if raw else None
    except ValueError:
        arguments = raw
    return {
        "agent": item.agent.name,
        "tool": item.qualified_name or item.tool_name,
        "arguments": arguments,
        "call_id": item.call_id,
    }


class DurableRunner:
    """The ``agents.Runner`` interface for a stalwart workflow: ``await DurableRunner.run(agent,
    input, ...)`` inside an ``async def`` ``@app.workflow``.

    Every model call is a journaled step named ``AGENT/model`` (retried with
    ``stalwart.Retry.llm()``), every function tool call a step named ``AGENT/tool/TOOL``
    (``tool_options`` gives one the options of ``@app.step``), parallel tool calls included
    (their journal positions do not depend on which finishes first), and the agents a handoff
    reaches are durable the same way. A tool whose ``needs_approval`` holds waits with
    ``stalwart.request_approval_async`` (subject ``AGENT/tool/TOOL``), durably: the run holds
    nothing meanwhile, and a decision taken while no worker runs is not lost. A session is
    read and written in steps (``StalwartSession`` keeps it in the app's store).

    Outside a workflow it runs the agent as ``Runner.run`` does, steps being plain calls, and
    returns a result with ``interruptions`` rather than wait for approvals. ``run_streamed``
    streams each model call inside its step, its text deltas emitted to the run's stream."""

    @classmethod
    async def run(
        cls,
        starting_agent: Agent[Any],
        input: str | list[TResponseInputItem],
        *,
        context: Any = None,
        max_turns: int | None = DEFAULT_MAX_TURNS,
        hooks: RunHooks[Any] | None = None,
        run_config: RunConfig | dict[str, Any] | None = None,
        error_handlers: RunErrorHandlers[Any] | None = None,
        previous_response_id: str | None = None,
        auto_previous_response_id: bool = False,
        conversation_id: str | None = None,
        session: Session | None = None,
        model_retry: stalwart.Retry | None = None,
        model_timeout: float | None = None,
        approval_timeout: float | None = None,
    ) -> RunResult:
        """Run ``starting_agent`` on ``input`` to its final output, as ``Runner.run`` does,
        with the keywords it takes; and ``model_retry`` (default ``Retry.llm()``) and
        ``model_timeout`` for the model steps, ``approval_timeout`` (seconds; default none)
        after which an unanswered approval counts as rejected."""
        if isinstance(input, RunState):
            raise stalwart.UsageError(
                "DurableRunner.run takes the run's input (a str or a list of input items), "
                "not a RunState: it resumes interrupted runs itself, from the journal"
            )
        config, owns_provider = _config_of(run_config)
        copier = AgentCopier(config, model_retry or stalwart.Retry.llm(), model_timeout)
        agent = copier.agent(starting_agent)
        runner_config = dataclasses.replace(config, model=None)
        if session is not None and not isinstance(session, StalwartSession):
            session = JournaledSession(session)
        try:
            result = await Runner.run(
                agent,
                input,
                context=context,
                max_turns=max_turns,
                hooks=hooks,
                run_config=runner_config,
                error_handlers=error_handlers,
                previous_response_id=previous_response_id,
                auto_previous_response_id=auto_previous_response_id,
                conversation_id=conversation_id,
                session=session,
            )
            while result.interruptions and in_workflow_code():
                state = result.to_state()
                for item in result.interruptions:
                    await _decide(state, item, approval_timeout)
                result = await Runner.run(
                    agent,
                    state,
                    hooks=hooks,
                    run_config=runner_config,
                    error_handlers=error_handlers,
                    session=session,
                )
        finally:
            if owns_provider:
                await config.model_provider.aclose()
        return result

    @classmethod
    def run_sync(
        cls,
        starting_agent: Agent[Any],
        input: str | list[TResponseInputItem],
        **kwargs: Any,
    ) -> RunResult:
        """:meth:`run` on a new event loop, outside any workflow (where nothing is durable);
        refused inside one, whose agents run in an ``async def`` workflow."""
        try:
            stalwart.workflow_id()
        except RuntimeError:
            return asyncio.run(cls.run(starting_agent, input, **kwargs))
        raise TypeError(_SYNC_IN_WORKFLOW)

    @classmethod
    def run_streamed(
        cls,
        starting_agent: Agent[Any],
        input: str | list[TResponseInputItem],
        *,
        context: Any = None,
        max_turns: int | None = DEFAULT_MAX_TURNS,
        hooks: RunHooks[Any] | None = None,
        run_config: RunConfig | dict[str, Any] | None = None,
        previous_response_id: str | None = None,
        auto_previous_response_id: bool = False,
        conversation_id: str | None = None,
        session: Session | None = None,
        model_retry: stalwart.Retry | None = None,
        model_timeout: float | None = None,
    ) -> RunResultStreaming:
        """Run ``starting_agent`` as ``Runner.run_streamed`` does, durably: each model call
        streams inside its step, emitting the model's text deltas to the run's stream
        ``"default"`` as ``str`` chunks as they come (read them with ``app.stream``), and
        ``stream_events()`` gives each call's response once it completed (a replay gives the
        recorded one). Tool calls are steps as in :meth:`run`; a tool needing approval ends
        the run with ``interruptions``, as the SDK's streamed run does."""
        if isinstance(input, RunState):
            raise stalwart.UsageError(
                "DurableRunner.run_streamed takes the run's input (a str or a list of input "
                "items), not a RunState"
            )
        config, _owns_provider = _config_of(run_config)
        copier = AgentCopier(config, model_retry or stalwart.Retry.llm(), model_timeout)
        agent = copier.agent(starting_agent)
        if session is not None and not isinstance(session, StalwartSession):
            session = JournaledSession(session)
        return Runner.run_streamed(
            agent,
            input,
            context=context,
            max_turns=max_turns,
            hooks=hooks,
            run_config=dataclasses.replace(config, model=None),
            previous_response_id=previous_response_id,
            auto_previous_response_id=auto_previous_response_id,
            conversation_id=conversation_id,
            session=session,
        )


async def _decide(state: RunState[Any], item: ToolApprovalItem, timeout: float | None) -> None:
    """Wait durably for a person's decision on ``item`` and apply it to ``state``."""
    subject = tool_step_name(item.agent.name, item.qualified_name or item.tool_name or "tool")
    decision = await stalwart.request_approval_async(
        subject, details=_approval_details(item), timeout=timeout
    )
    if decision is not None and decision.approved:
        state.approve(item)
        return
    if decision is None:
        message = "Tool execution was not approved: no one answered in time."
    elif decision.reason:
        message = f"Tool execution was not approved: {decision.reason}"
    else:
        message = None  # the SDK's own message
    state.reject(item, rejection_message=message)
