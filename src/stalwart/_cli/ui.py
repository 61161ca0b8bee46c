"""``stalwart ui``: the operator console and its HTTP API (needs ``stalwart[ui]``)."""

from __future__ import annotations

import importlib.util
import sys

import click

from .._errors import UsageError
from ._root import CliError, cli, open_app, url_option

__all__: list[str] = []

EXTRA_MISSING = "the console needs the ui extra: pip install 'stalwart[ui]'"


@cli.command("ui")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    default=8377,
    show_default=True,
    type=click.IntRange(0, 65535),
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
    if any(importlib.util.find_spec(m) is None for m in ("fastapi", "uvicorn")):
        raise CliError(EXTRA_MISSING)
    from .._ui.server import check_bind, serve

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
