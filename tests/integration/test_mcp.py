"""``stalwart mcp`` driven by the MCP SDK's own stdio client: the real command in a subprocess
on a real store (SQLite and PostgreSQL), whose runs a worker in this process works, while the
assistant's side lists, shows, approves, rejects, resolves, retries, cancels and sends events."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import stalwart
from operator_agent import declare
from stalwart import testing

pytest.importorskip("mcp")

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

READS = ["list_approvals", "list_runs", "show_run"]
WRITES = ["approve", "cancel", "reject", "resolve", "retry", "send_event"]


def wait_for(what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return found


@contextmanager
def worked(url: str, workdir: Path) -> Iterator[tuple[stalwart.Stalwart, dict[str, Any]]]:
    """An app on ``url`` with a run in doubt, and a worker in a thread working the rest."""
    with stalwart.Stalwart(url, lease_seconds=2.0) as app:
        workflows = declare(app, workdir)
        (workdir / "crash").touch()
        with pytest.raises(KeyboardInterrupt):
            app.run(workflows["pay"], "o1", workflow_id="doubt")
        with pytest.raises(stalwart.NeedsAttention):
            app.run(workflows["pay"], "o1", workflow_id="doubt")
        (workdir / "crash").unlink()
        worker = testing.worker(app, concurrency=4)
        thread = threading.Thread(target=worker.serve, daemon=True)
        thread.start()
        try:
            yield app, workflows
        finally:
            worker.stop()
            thread.join(15)


class Assistant:
    """The client side of one ``stalwart mcp`` session."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

    async def tools(self) -> list[str]:
        return sorted(tool.name for tool in (await self.session.list_tools()).tools)

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """The tool's JSON answer (its text and its structured content agree)."""
        result = await self.session.call_tool(tool, arguments)
        text = result.content[0].text  # type: ignore[union-attr]
        assert not result.is_error, text
        answer: dict[str, Any] = json.loads(text)
        assert result.structured_content == answer
        return answer

    async def refused(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """The error a tool answers (the HTTP API's error shape)."""
        result = await self.session.call_tool(tool, arguments)
        assert result.is_error
        error: dict[str, Any] = json.loads(result.content[0].text)["error"]  # type: ignore[union-attr]
        return error


def operate(url: str, *flags: str, act: Callable[[Assistant], Any], cwd: Path) -> None:
    """Run ``stalwart mcp --url URL FLAGS`` and ``act`` as its client."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "stalwart", "mcp", "--url", url, *flags],
        cwd=cwd,
    )

    async def session() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            await act(Assistant(client))

    asyncio.run(asyncio.wait_for(session(), 120))


def test_an_assistant_operates_the_fleet(shared_url: str, tmp_path: Path) -> None:
    with worked(shared_url, tmp_path) as (app, wf):
        app.start(wf["ask"], "refund", workflow_id="ask-yes")
        app.start(wf["ask"], "wire", workflow_id="ask-no")
        app.start(wf["dead"], 1, workflow_id="dead")
        app.start(wf["inbox"], workflow_id="inbox")
        app.start(wf["inbox"], workflow_id="stuck")
        wait_for("two approvals", lambda: len(app.approvals()) == 2)
        wait_for("dead failed", lambda: app.handle("dead").status() == "failed")
        wait_for("inbox waits", lambda: app.describe("inbox").waiting_for)
        wait_for("stuck waits", lambda: app.describe("stuck").waiting_for)

        async def act(assistant: Assistant) -> None:
            assert await assistant.tools() == sorted(READS + WRITES)
            page = await assistant.call("list_runs", status="needs_attention")
            assert [r["workflow_id"] for r in page["runs"]] == ["doubt"]
            assert page["counts"]["needs_attention"] == 1 and page["counts"]["failed"] == 1
            shown = await assistant.call("show_run", workflow_id="doubt")
            assert shown["status"] == "needs_attention"
            doubt = [e for e in shown["journal"] if e["name"] == "charge"][-1]
            pending = await assistant.call("list_approvals")
            assert sorted(a["workflow_id"] for a in pending["approvals"]) == ["ask-no", "ask-yes"]

            settled = await assistant.call(
                "resolve", workflow_id="doubt", seq=doubt["seq"], result="ch_o1"
            )
            assert settled["status"] != "needs_attention"
            await assistant.call("approve", workflow_id="ask-yes", reason="fine")
            await assistant.call("reject", workflow_id="ask-no")
            sent = await assistant.call("send_event", workflow_id="inbox", name="ping", payload=7)
            assert sent["delivered"] is True
            (tmp_path / "fixed").touch()
            retried = await assistant.call("retry", workflow_id="dead")
            assert retried["status"] != "failed"
            cancelled = await assistant.call("cancel", workflow_id="stuck")
            assert cancelled["status"] == "cancelled"

            again = await assistant.refused("approve", workflow_id="ask-yes")
            assert again["type"] == "InvalidOperation"
            missing = await assistant.refused("cancel", workflow_id="nope")
            assert missing["type"] == "WorkflowNotFound"
            both = await assistant.refused(
                "resolve", workflow_id="doubt", seq=1, result=1, rerun=True
            )
            assert both["type"] == "UsageError"

        operate(shared_url, act=act, cwd=tmp_path)

        outcomes = {
            "doubt": "ch_o1",
            "ask-yes": "approved",
            "ask-no": "rejected",
            "inbox": 7,
            "dead": 2,
        }
        for workflow_id, value in outcomes.items():
            assert app.handle(workflow_id).result(timeout=60) == value
        assert app.handle("stuck").status() == "cancelled"
        decisions = {a.workflow_id: a.decision for a in app.approvals(pending=False)}
        assert {d.by for d in decisions.values() if d is not None} == {"mcp"}
        assert decisions["ask-yes"] is not None and decisions["ask-yes"].reason == "fine"
        for workflow_id in ("doubt", "dead", "stuck", "inbox"):
            acted = [e for e in app.journal(workflow_id) if e.by is not None]
            assert acted and {e.by for e in acted} == {"mcp"}, workflow_id


def test_read_only_offers_only_the_reads(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ro.db'}"
    with worked(url, tmp_path) as (app, _wf):

        async def act(assistant: Assistant) -> None:
            assert await assistant.tools() == READS
            shown = await assistant.call("show_run", workflow_id="doubt")
            assert shown["status"] == "needs_attention"
            result = await assistant.session.call_tool("cancel", {"workflow_id": "doubt"})
            assert result.is_error

        operate(url, "--read-only", act=act, cwd=tmp_path)
        assert app.handle("doubt").status() == "needs_attention"


def test_without_the_extra_the_error_names_the_install(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "sys.modules['mcp'] = None\n"
        f"sys.argv = ['stalwart', 'mcp', '--url', {f'sqlite:///{tmp_path}/x.db'!r}]\n"
        "from stalwart._cli import main\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith("error: stalwart mcp needs the mcp extra (the official MCP SDK): pip ")
    assert "[mcp]" in line


def in_doubt(url: str, workdir: Path) -> tuple[stalwart.Stalwart, dict[str, Any], int]:
    """An app on ``url`` whose run ``doubt`` waits on resolve, and the in-doubt step's seq."""
    app = stalwart.Stalwart(url)
    workflows = declare(app, workdir)
    (workdir / "crash").touch()
    with pytest.raises(KeyboardInterrupt):
        app.run(workflows["pay"], "o1", workflow_id="doubt")
    with pytest.raises(stalwart.NeedsAttention):
        app.run(workflows["pay"], "o1", workflow_id="doubt")
    (workdir / "crash").unlink()
    [seq] = [e.seq for e in app.journal("doubt") if e.name == "charge"][-1:]
    return app, workflows, seq


async def called(server: Any, tool: str, **arguments: Any) -> tuple[bool, Any]:
    """Whether the in-process server's ``tool`` refused, and its JSON answer."""
    result = await server.call_tool(tool, arguments)
    return bool(result.is_error), json.loads(result.content[0].text)


def test_the_tools_say_what_they_take_and_refuse(tmp_path: Path) -> None:
    from stalwart._mcp import build_server

    app, workflows, seq = in_doubt(f"sqlite:///{tmp_path / 'tools.db'}", tmp_path)
    with app:
        for n in range(3):
            app.start(workflows["inbox"], workflow_id=f"page-{n}")
        server = build_server(app)

        async def act() -> None:
            assert "idempotency_key" in (server.instructions or "")
            for tool in await server.list_tools():
                assert "``" not in tool.description, tool.name
                assert "\n " not in tool.description, tool.name
                assert tool.annotations.idempotent_hint is not True, tool.name

            refused, error = await called(server, "resolve", workflow_id="doubt", seq=seq)
            assert refused and error["error"]["type"] == "UsageError"
            assert "resolve(workflow_id, seq, result=...)" in error["error"]["message"]
            assert app.handle("doubt").status() == "needs_attention"

            shown = (await called(server, "show_run", workflow_id="doubt"))[1]
            assert "stalwart resolve" not in shown["error"]
            assert f"call resolve(workflow_id='doubt', seq={seq}, result=...)" in shown["error"]
            refused, error = await called(server, "retry", workflow_id="doubt")
            assert refused
            message = error["error"]["message"]
            assert f"resolve(workflow_id='doubt', seq={seq}, result=...)" in message
            assert "stalwart resolve" not in message and "--result" not in message

            refused, run = await called(
                server, "resolve", workflow_id="doubt", seq=seq, result=None
            )
            assert not refused and run["status"] != "needs_attention"

            first = (await called(server, "list_runs", name="inbox", limit=2))[1]
            assert first["more"] is True
            rest = (await called(server, "list_runs", name="inbox", before=first["next_before"]))[1]
            pages = [r["workflow_id"] for r in first["runs"] + rest["runs"]]
            assert sorted(pages) == ["page-0", "page-1", "page-2"] and not rest["more"]
            refused, error = await called(server, "list_runs", before="nonsense")
            assert refused and "next_before" in error["error"]["message"]

            assert not (await called(server, "cancel", workflow_id="page-0"))[0]
            assert (await called(server, "cancel", workflow_id="page-0"))[0]

        asyncio.run(act())
        assert app.run(workflows["pay"], "o1", workflow_id="doubt") is None  # the null recorded


def test_docs_table_names_each_tools_arguments() -> None:
    import re

    from stalwart._mcp import build_server

    doc = (Path(__file__).resolve().parents[2] / "docs" / "mcp.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(\w+)\(([^)]*)\)` \|", doc, flags=re.MULTILINE))
    with stalwart.Stalwart("memory://") as app:
        tools = asyncio.run(build_server(app).list_tools())
    for tool in tools:
        documented = [arg.split("=")[0].strip() for arg in rows[tool.name].split(",") if arg]
        assert documented == list(tool.input_schema["properties"]), tool.name
