"""``stalwart mcp``: the operator's tools for an assistant, over MCP on stdio (needs
``stalwart[mcp]``; docs/mcp.md)."""

from __future__ import annotations

import contextlib
import importlib.util
import sys

import click

from .._errors import install_hint
from ._root import CliError, cli, open_app, url_option

__all__: list[str] = []


def extra_missing() -> str:
    """The error when the ``mcp`` SDK cannot be imported."""
    return f"stalwart mcp needs the mcp extra (the official MCP SDK): {install_hint('mcp')}"


@cli.command("mcp")
@click.option("--read-only", is_flag=True, help="Offer only the reads (no approve, cancel, ...).")
@url_option
@click.pass_context
def mcp_command(ctx: click.Context, read_only: bool) -> None:
    """Serve the store's runs to an assistant as MCP tools on stdin and stdout (docs/mcp.md):
    list_runs, show_run, list_approvals, and unless --read-only approve, reject, retry,
    cancel, resolve and send_event, each journaled with by "mcp"."""
    try:
        if importlib.util.find_spec("mcp") is None:
            raise ImportError("mcp")
        from .._mcp import serve
    except (ImportError, ValueError):  # ValueError: find_spec of a module set to None
        raise CliError(extra_missing()) from None
    # stdout carries the protocol: what an app's module prints while it loads goes to stderr
    with contextlib.redirect_stdout(sys.stderr):
        app = open_app(ctx)
    with app:
        serve(app, read_only=read_only)
