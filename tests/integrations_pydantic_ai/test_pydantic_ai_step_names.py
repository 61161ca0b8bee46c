"""The persisted names of a pydantic-ai agent's steps are compatibility data: the journal
records them and replay compares them, so renaming one would strand every run in flight at
that point (``NonDeterminismError``). These pins change only with a migration of such runs,
never as part of a refactoring."""

from __future__ import annotations

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.durable_exec import (
    CapabilityOperationId,
    DurableOperationId,
    EventStreamHandlerId,
    ModelCancelSuspendedResponseId,
    ModelCompactMessagesId,
    ModelRequestId,
    ToolsetCallToolId,
    ToolsetGetInstructionsId,
    ToolsetGetToolsId,
    ToolsetValidateToolArgumentsId,
)
from pydantic_ai.toolsets import DynamicToolset, FunctionToolset
from pydantic_ai_scripts import Script, call, text

import stalwart
from stalwart.integrations.pydantic_ai import (
    METADATA_KEY,
    StalwartDurability,
    StalwartOperationNamer,
)

NAMER = StalwartOperationNamer("support", default_model_id="openai:gpt-5")

OPERATION_NAMES: list[tuple[DurableOperationId, str | None, str]] = [
    (ModelRequestId(None, model_name="gpt-5"), None, "support__model.request"),
    (ModelRequestId("openai:gpt-5", model_name="gpt-5"), None, "support__model.request"),
    (ModelRequestId("fast", model_name="mini"), None, "support__model.request.fast"),
    (
        ModelRequestId(None, streaming=True, model_name="gpt-5"),
        None,
        "support__model.request_stream",
    ),
    (
        ModelRequestId("fast", streaming=True, model_name="mini"),
        None,
        "support__model.request_stream.fast",
    ),
    (ModelCompactMessagesId(None, model_name="gpt-5"), None, "support__model.compact_messages"),
    (
        ModelCancelSuspendedResponseId(None, model_name="gpt-5"),
        None,
        "support__model.cancel_suspended_response",
    ),
    (EventStreamHandlerId(), None, "support__event_stream_handler"),
    (
        CapabilityOperationId("memory", operation="recall"),
        None,
        "support__capability__memory.recall",
    ),
    (
        ToolsetCallToolId("function", toolset_id="<agent>"),
        "refund",
        "support__function_toolset__<agent>.call_tool:refund",
    ),
    (
        ToolsetValidateToolArgumentsId("function", toolset_id="<agent>"),
        "refund",
        "support__function_toolset__<agent>.validate_args:refund",
    ),
    (
        ToolsetCallToolId("mcp", toolset_id="crm"),
        "lookup",
        "support__mcp_server__crm.call_tool:lookup",
    ),
    (ToolsetGetToolsId("mcp", toolset_id="crm"), None, "support__mcp_server__crm.get_tools"),
    (ToolsetGetInstructionsId("crm"), None, "support__mcp_server__crm.get_instructions"),
    (
        ToolsetGetToolsId("dynamic", toolset_id="per-user"),
        None,
        "support__dynamic_toolset__per-user.get_tools",
    ),
    (
        ToolsetCallToolId("dynamic", toolset_id="per-user"),
        "search",
        "support__dynamic_toolset__per-user.call_tool:search",
    ),
    (
        ToolsetValidateToolArgumentsId("dynamic", toolset_id="per-user"),
        "search",
        "support__dynamic_toolset__per-user.validate_args:search",
    ),
]


@pytest.mark.parametrize(("operation_id", "label", "name"), OPERATION_NAMES)
def test_every_operation_has_its_pinned_step_name(
    operation_id: DurableOperationId, label: str | None, name: str
) -> None:
    assert NAMER.invocation_name(operation_id, label=label).operation_name == name


def test_the_tool_metadata_key_is_pinned() -> None:
    assert METADATA_KEY == "stalwart"


def test_a_runs_journal_has_the_pinned_names(app: stalwart.Stalwart) -> None:
    """One run through every kind of step an agent journals here (MCP's are pinned above:
    the MCP test needs pydantic-ai-slim[mcp])."""

    async def handler(ctx: RunContext[None], events: object) -> None:
        async for _ in events:  # type: ignore[attr-defined]
            pass

    inner = FunctionToolset[None](id="inner")

    @inner.tool_plain
    def search(q: str) -> str:
        return f"found {q}"

    own = FunctionToolset[None](id="own")

    @own.tool_plain
    def refund(order: str) -> str:
        return f"refunded {order}"

    script = Script([call("refund", order="o-1"), call("search", q="x"), text("done")])
    agent = Agent(
        script.model(),
        name="support",
        toolsets=[own, DynamicToolset(lambda ctx: inner, id="per-user")],
        capabilities=[StalwartDurability(event_stream_handler=handler)],
    )

    @app.workflow
    async def run() -> str:
        return (await agent.run("help")).output

    app.run(run, workflow_id="names")
    recorded = [(e.kind, e.name) for e in app.journal("names") if e.kind != "run"]
    discovery = ("step", "support__dynamic_toolset__per-user.get_tools")
    stream = ("step", "support__model.request_stream")
    event = ("step", "support__event_stream_handler")
    assert recorded == [
        ("uuid", "uuid"),  # the agent run's id, recorded so a replay gets the same one
        discovery,
        stream,
        event,
        ("step", "support__function_toolset__own.call_tool:refund"),
        event,
        discovery,
        stream,
        event,
        ("step", "support__dynamic_toolset__per-user.call_tool:search"),
        event,
        discovery,
        stream,
    ]


def test_an_approvals_subject_is_pinned() -> None:
    """Approvals are found by their run, not their subject, but operators and scripts read
    it: ``AGENT: TOOL``."""
    assert StalwartDurability[None](name="support").approval_subject("refund") == "support: refund"
