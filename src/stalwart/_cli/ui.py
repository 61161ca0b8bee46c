"""``stalwart ui``: the operator console and its HTTP API (needs ``stalwart[ui]``)."""

from __future__ import annotations

import importlib.util
import sys

import click

from .._errors import UsageError, install_hint
from ._output import WholeNumber
from ._root import CliError, cli, open_app, url_option

__all__: list[str] = []


def extra_missing() -> str:
    """The error when FastAPI or uvicorn cannot be imported."""
    return f"the console needs the ui extra (FastAPI and uvicorn): {install_hint('ui')}"


@cli.command("ui")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    default=8377,
    show_default=True,
    type=WholeNumber(0, 65535, example=8377),
    help="Port to listen on (0: any free port).",
)
@click.option(
    "--token",
    default=None,
    envvar="STALWART_UI_TOKEN",
    help="Bearer token for writes (default: $STALWART_UI_TOKEN, else generated on loopback).",
)
@url_option
@click.pass_context
def ui_command(ctx: click.Context, host: str, port: int, token: str | None) -> None:
    """Serve the operator console and its HTTP API (docs/http-api.md) until Ctrl-C."""
    try:
        if any(importlib.util.find_spec(m) is None for m in ("fastapi", "uvicorn")):
            raise ImportError("fastapi or uvicorn")
        from .._ui.server import check_bind, serve
    except (ImportError, ValueError):  # ValueError: find_spec of a module set to None
        raise CliError(extra_missing()) from None

    try:
        bind = check_bind(host, port, token)
    except UsageError as exc:
        raise CliError(str(exc)) from None

    def echo(line: str) -> None:
        click.echo(line)
        sys.stdout.flush()

    with open_app(ctx) as app:
        try:
            serve(app, bind, echo)
        except UsageError as exc:
            raise CliError(str(exc)) from None
