"""``stalwart mcp``: a Model Context Protocol server on stdio (``pip install 'stalwart[mcp]'``,
the official ``mcp`` SDK), so an assistant can operate the fleet (docs/mcp.md).

Its tools are the operator's: the reads answer what the HTTP API answers (``_api_answers``),
the writes call the app's operator verbs with ``by="mcp"`` (journaled with the action) and
answer the run as it stands after. A refused action or a value the Python API refuses is a
tool error whose text is the HTTP API's error shape, ``{"error": {"type": ..., "message":
...}}``, so the assistant reads why and what to do (an argument outside a tool's input schema
is the SDK's to refuse). ``read_only`` registers the reads alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from . import __version__
from ._api_answers import approvals_answer, journal_answer, run_answer, runs_page
from ._errors import StalwartError, UsageError

__all__ = ["BY", "READS", "WRITES", "build_server", "serve"]

BY = "mcp"
READS = ("list_runs", "show_run", "list_approvals")
WRITES = ("approve", "reject", "retry", "cancel", "resolve", "send_event")

Status = Literal[
    "pending", "running", "suspended", "completed", "failed", "cancelled", "needs_attention"
]
RunId = Annotated[str, Field(min_length=1, max_length=2000, description="The run's workflow_id.")]
Limit = Annotated[int, Field(ge=1, le=1000)]
Seq = Annotated[int, Field(ge=1, le=2**31 - 1, description="The journal entry's seq.")]
Reason = Annotated[str | None, Field(max_length=10_000)]

_INSTRUCTIONS = (
    "Operate a stalwart fleet (durable runs of AI agents). Start with list_runs "
    "(status='needs_attention' or 'failed' are what wait for an operator) and "
    "list_approvals; show_run gives a run and its journal, whose entries carry the seq that "
    "resolve takes. Every write is recorded in the run's journal with by='mcp'."
)


def _answer(compute: Callable[[], dict[str, Any]]) -> CallToolResult:
    """``compute``'s JSON as the tool's result, or a stalwart error as a tool error in the
    HTTP API's error shape."""
    try:
        value = compute()
    except StalwartError as exc:
        error = {"error": {"type": type(exc).__name__, "message": str(exc)}}
        text = json.dumps(error, ensure_ascii=False)
        return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
    text = json.dumps(value, ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=value)


_READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)


def _write(*, destructive: bool = False, idempotent: bool = False) -> ToolAnnotations:
    return ToolAnnotations(
        read_only_hint=False,
        destructive_hint=destructive,
        idempotent_hint=idempotent,
        open_world_hint=False,
    )


def _add_reads(server: MCPServer[Any], app: Any) -> None:
    @server.tool(annotations=_READ)
    def list_runs(
        status: Status | None = None, name: str | None = None, limit: Limit = 50
    ) -> CallToolResult:
        """Runs, newest first (at most ``limit``), only those in ``status`` and of the
        workflow ``name`` when given; ``counts`` has how many runs each status holds, and
        each run says what it waits for."""
        return _answer(lambda: runs_page(app, status, name, limit))

    @server.tool(annotations=_READ)
    def show_run(workflow_id: RunId) -> CallToolResult:
        """A run: status, error, what it waits for, the step it executes now, its usage, and
        ``journal``: every step, attempt, wait, event, approval and operator action, in
        order (each with the ``seq`` that resolve takes)."""

        def shown() -> dict[str, Any]:
            run = run_answer(app, workflow_id)
            return {**run, "journal": journal_answer(app, workflow_id)["entries"]}

        return _answer(shown)

    @server.tool(annotations=_READ)
    def list_approvals() -> CallToolResult:
        """The approval requests that wait for a decision, oldest first (approve or reject
        them by their run's workflow_id, and approval_id when a run has several)."""
        return _answer(lambda: approvals_answer(app, pending=True))


def _add_decisions(server: MCPServer[Any], app: Any) -> None:
    @server.tool(annotations=_write())
    def approve(
        workflow_id: RunId, reason: Reason = None, approval_id: str | None = None
    ) -> CallToolResult:
        """Approve the run's pending approval request (or the one named ``approval_id``),
        with ``reason`` recorded; answers the run."""

        def approved() -> dict[str, Any]:
            app.approve(workflow_id, by=BY, reason=reason, approval_id=approval_id)
            return run_answer(app, workflow_id)

        return _answer(approved)

    @server.tool(annotations=_write())
    def reject(
        workflow_id: RunId, reason: Reason = None, approval_id: str | None = None
    ) -> CallToolResult:
        """Reject the run's pending approval request (or the one named ``approval_id``),
        with ``reason`` recorded; answers the run."""

        def rejected() -> dict[str, Any]:
            app.reject(workflow_id, by=BY, reason=reason, approval_id=approval_id)
            return run_answer(app, workflow_id)

        return _answer(rejected)


def _add_actions(server: MCPServer[Any], app: Any) -> None:
    @server.tool(annotations=_write())
    def retry(workflow_id: RunId) -> CallToolResult:
        """Dead-letter redrive: a failed run resumes from its failed step; a needs_attention
        run that does not wait on resolve tries again. Answers the run."""

        def retried() -> dict[str, Any]:
            app.retry(workflow_id, by=BY)
            return run_answer(app, workflow_id)

        return _answer(retried)

    @server.tool(annotations=_write(destructive=True, idempotent=True))
    def cancel(workflow_id: RunId) -> CallToolResult:
        """Cancel the run: at once if it waits, else at its next step boundary; its
        compensations run. Answers the run."""

        def cancelled() -> dict[str, Any]:
            app.cancel(workflow_id, by=BY)
            return run_answer(app, workflow_id)

        return _answer(cancelled)

    @server.tool(annotations=_write(destructive=True))
    def resolve(
        workflow_id: RunId, seq: Seq, result: Any = None, rerun: bool = False
    ) -> CallToolResult:
        """Settle the in-doubt irreversible step ``seq`` of a needs_attention run: record
        ``result`` (any JSON, null by default) as what the step did, or ``rerun=true`` to run
        it again. Check first (in the provider's records) whether the effect took place.
        Answers the run."""

        def resolved() -> dict[str, Any]:
            if rerun and result is not None:
                raise UsageError("give result or rerun=true, not both")
            if rerun:
                app.resolve(workflow_id, seq, rerun=True, by=BY)
            else:
                app.resolve(workflow_id, seq, result=result, by=BY)
            return run_answer(app, workflow_id)

        return _answer(resolved)

    @server.tool(annotations=_write())
    def send_event(
        workflow_id: RunId,
        name: Annotated[str, Field(min_length=1, max_length=512)],
        payload: Any = None,
    ) -> CallToolResult:
        """Send the event ``name`` with ``payload`` (any JSON) to the run's inbox, where
        ``wait_for_event(name)`` takes it. Answers the run, with ``delivered``."""

        def sent() -> dict[str, Any]:
            delivered = app.send_event(workflow_id, name, payload, by=BY)
            return run_answer(app, workflow_id, delivered=delivered)

        return _answer(sent)


def build_server(app: Any, *, read_only: bool = False) -> MCPServer[Any]:
    """The MCP server operating ``app`` (a :class:`~stalwart.Stalwart`): the tools of
    :data:`READS`, and unless ``read_only`` those of :data:`WRITES`."""
    server: MCPServer[Any] = MCPServer(
        "stalwart", version=__version__, instructions=_INSTRUCTIONS, log_level="WARNING"
    )
    _add_reads(server, app)
    if not read_only:
        _add_decisions(server, app)
        _add_actions(server, app)
    return server


def serve(app: Any, *, read_only: bool = False) -> None:
    """Serve ``app``'s tools over stdin and stdout until the client closes them."""
    build_server(app, read_only=read_only).run("stdio")
