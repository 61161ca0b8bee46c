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

import inspect
import json
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

try:
    from pydantic import MISSING  # "no result given", told from a JSON null
except ImportError:  # pydantic < 2.14 (the mcp SDK needs 2.12 or newer)
    from pydantic.experimental.missing_sentinel import MISSING

from . import __version__
from ._api_answers import (
    approvals_answer,
    decode_cursor,
    iso_time,
    journal_answer,
    run_answer,
    runs_page,
)
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
Before = Annotated[
    str | None,
    Field(max_length=2000, description="next_before of the previous page, or an ISO time."),
]

_INSTRUCTIONS = (
    "Operate a stalwart fleet (durable runs of AI agents). Start with list_runs "
    "(status='needs_attention' or 'failed' are what wait for an operator) and "
    "list_approvals; show_run gives a run and its journal, whose entries carry the seq that "
    "resolve takes. Every write is recorded in the run's journal with by='mcp'. Before "
    "resolving an in-doubt step with a result, check the provider's records (a charge, an "
    "email) by the step's idempotency_key, shown in its journal entry, to learn whether its "
    "effect took place; if it did not, resolve with rerun=true instead. A write answers the "
    "run as stored right after it; a worker then resumes it."
)

# an operator error names the CLI's command; the assistant has the resolve tool instead
_CLI_RESOLVE = re.compile(
    r"stalwart resolve (?P<id>.+?) (?P<seq>\d+) --result JSON(?: with what happened)?,? "
    r"or --rerun(?: to run it again)?"
)


def _for_assistant(message: str) -> str:
    """``message`` with the CLI's ``stalwart resolve`` command told as the resolve tool."""
    return _CLI_RESOLVE.sub(
        lambda m: (
            f"call resolve(workflow_id={m['id']!r}, seq={m['seq']}, result=...) with "
            f"what happened, or resolve(workflow_id={m['id']!r}, seq={m['seq']}, rerun=true)"
        ),
        message,
    )


def _plain(doc: str | None) -> str:
    """A tool's docstring as its description: dedented, without reST's double backticks."""
    return " ".join(inspect.cleandoc(doc or "").replace("``", "").split())


def _told(value: dict[str, Any]) -> dict[str, Any]:
    """An answer whose runs' errors (the run's own, each listed run's) name the tools."""
    runs = [value, *value.get("runs", [])]
    for run in runs:
        if isinstance(run.get("error"), str):
            run["error"] = _for_assistant(run["error"])
    return value


def _answer(compute: Callable[[], dict[str, Any]]) -> CallToolResult:
    """``compute``'s JSON as the tool's result, or a stalwart error as a tool error in the
    HTTP API's error shape."""
    try:
        value = _told(compute())
    except StalwartError as exc:
        error = {"error": {"type": type(exc).__name__, "message": _for_assistant(str(exc))}}
        text = json.dumps(error, ensure_ascii=False)
        return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
    text = json.dumps(value, ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=value)


_READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)


def _write(*, destructive: bool = False) -> ToolAnnotations:
    return ToolAnnotations(
        read_only_hint=False,
        destructive_hint=destructive,
        idempotent_hint=False,  # a second call is refused (cancel) or acts again (retry)
        open_world_hint=False,
    )


def _tool(
    server: MCPServer[Any], annotations: ToolAnnotations
) -> Callable[[Callable[..., CallToolResult]], Callable[..., CallToolResult]]:
    """Register a tool described by its docstring as plain text."""

    def register(fn: Callable[..., CallToolResult]) -> Callable[..., CallToolResult]:
        return server.tool(annotations=annotations, description=_plain(fn.__doc__))(fn)

    return register


def _add_reads(server: MCPServer[Any], app: Any) -> None:
    @_tool(server, _READ)
    def list_runs(
        status: Status | None = None,
        name: str | None = None,
        limit: Limit = 50,
        before: Before = None,
    ) -> CallToolResult:
        """Runs, newest first (at most ``limit``), only those in ``status`` and of the
        workflow ``name`` when given; ``counts`` has how many runs each status holds, and
        each run says what it waits for. When ``more`` is true, pass ``next_before`` as
        ``before`` for the next page."""

        def page() -> dict[str, Any]:
            cursor = None if before is None else (iso_time(before) or decode_cursor(before))
            if before is not None and cursor is None:
                raise UsageError(
                    f"before={before[:80]!r}: pass next_before of a page or an ISO time"
                )
            return runs_page(app, status, name, limit, before=cursor)

        return _answer(page)

    @_tool(server, _READ)
    def show_run(workflow_id: RunId) -> CallToolResult:
        """A run: status, error, what it waits for, the step it executes now, its usage, and
        ``journal``: every step, attempt, wait, event, approval and operator action, in
        order (each with the ``seq`` that resolve takes)."""

        def shown() -> dict[str, Any]:
            run = run_answer(app, workflow_id)
            return {**run, "journal": journal_answer(app, workflow_id)["entries"]}

        return _answer(shown)

    @_tool(server, _READ)
    def list_approvals() -> CallToolResult:
        """The approval requests that wait for a decision, oldest first (approve or reject
        them by their run's workflow_id, and approval_id when a run has several)."""
        return _answer(lambda: approvals_answer(app, pending=True))


def _add_decisions(server: MCPServer[Any], app: Any) -> None:
    @_tool(server, _write())
    def approve(
        workflow_id: RunId, reason: Reason = None, approval_id: str | None = None
    ) -> CallToolResult:
        """Approve the run's pending approval request (or the one named ``approval_id``),
        with ``reason`` recorded; answers the run as stored right after the decision (a
        worker then resumes it)."""

        def approved() -> dict[str, Any]:
            app.approve(workflow_id, by=BY, reason=reason, approval_id=approval_id)
            return run_answer(app, workflow_id)

        return _answer(approved)

    @_tool(server, _write())
    def reject(
        workflow_id: RunId, reason: Reason = None, approval_id: str | None = None
    ) -> CallToolResult:
        """Reject the run's pending approval request (or the one named ``approval_id``),
        with ``reason`` recorded; answers the run as stored right after the decision (a
        worker then resumes it)."""

        def rejected() -> dict[str, Any]:
            app.reject(workflow_id, by=BY, reason=reason, approval_id=approval_id)
            return run_answer(app, workflow_id)

        return _answer(rejected)


def _add_actions(server: MCPServer[Any], app: Any) -> None:
    @_tool(server, _write())
    def retry(workflow_id: RunId) -> CallToolResult:
        """Dead-letter redrive: a failed run resumes from its failed step; a needs_attention
        run that does not wait on resolve tries again. Answers the run."""

        def retried() -> dict[str, Any]:
            app.retry(workflow_id, by=BY)
            return run_answer(app, workflow_id)

        return _answer(retried)

    @_tool(server, _write(destructive=True))
    def cancel(workflow_id: RunId) -> CallToolResult:
        """Cancel the run: at once if it waits, else at its next step boundary; its
        compensations run. Answers the run. Cancelling a run that has ended is refused."""

        def cancelled() -> dict[str, Any]:
            app.cancel(workflow_id, by=BY)
            return run_answer(app, workflow_id)

        return _answer(cancelled)

    @_tool(server, _write(destructive=True))
    def resolve(
        workflow_id: RunId, seq: Seq, result: Any | MISSING = MISSING, rerun: bool = False
    ) -> CallToolResult:
        """Settle the in-doubt irreversible step ``seq`` of a needs_attention run: give
        exactly one of ``result`` (any JSON, null included) to record as what the step did,
        or ``rerun=true`` to run it again. Check first, in the provider's records, by the
        step's idempotency_key, whether the effect took place. Answers the run."""

        def resolved() -> dict[str, Any]:
            if rerun == (result is not MISSING):
                raise UsageError(
                    "give exactly one of result (the JSON the step returned, null included) "
                    "or rerun=true: resolve(workflow_id, seq, result=...) or "
                    "resolve(workflow_id, seq, rerun=true)"
                )
            if rerun:
                app.resolve(workflow_id, seq, rerun=True, by=BY)
            else:
                app.resolve(workflow_id, seq, result=result, by=BY)
            return run_answer(app, workflow_id)

        return _answer(resolved)

    @_tool(server, _write())
    def send_event(
        workflow_id: RunId,
        name: Annotated[str, Field(min_length=1, max_length=512)],
        payload: Any = None,
    ) -> CallToolResult:
        """Send the event ``name`` with ``payload`` (any JSON) to the run's inbox, where
        ``wait_for_event(name)`` takes it. Answers the run as stored right after the event
        (a run that waited still shows its wait: a worker then resumes it), with
        ``delivered``: true when the event was stored for the run, which need not wait for
        that name now (it takes it when it does). A completed or cancelled run refuses it."""

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
