"""The root ``stalwart`` group and what every command shares: ``--url`` (before or after the
command), ``--version``, the store a command uses, and the one-line user error."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from .._errors import mask_url

__all__ = ["CliError", "cli", "explicit_url", "open_app", "store_url", "url_option"]


class CliError(click.ClickException):
    """A user mistake: printed as one ``error:`` line, exit code 1."""


def _remember_url(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is not None:
        ctx.ensure_object(dict)
        ctx.find_root().ensure_object(dict)["url"] = value


def url_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--url`` after the command too (``stalwart ls --url U`` as ``stalwart --url U ls``)."""
    return click.option(
        "--url",
        default=None,
        expose_value=False,
        is_eager=True,
        callback=_remember_url,
        help="Store URL (default: $STALWART_URL, else sqlite:///.stalwart/stalwart.db).",
    )(func)


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        from .. import __version__

        click.echo(f"stalwart {__version__}")
        ctx.exit(0)


@click.group()
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_version,
    help="Print the version and exit.",
)
@url_option
@click.pass_context
def cli(ctx: click.Context) -> None:
    """stalwart: durable execution for long-running AI agents."""
    ctx.ensure_object(dict)


def explicit_url(ctx: click.Context) -> str | None:
    """The ``--url`` given on the command line, if any (never ``$STALWART_URL``)."""
    url: str | None = ctx.find_root().ensure_object(dict).get("url")
    return url


def store_url(ctx: click.Context) -> str:
    """The store a command uses: ``--url``, else ``$STALWART_URL``, else the default."""
    from .._store import resolve_url

    return resolve_url(explicit_url(ctx))


def open_app(ctx: click.Context, *, write: bool = False) -> Any:
    """An app on the command's store, named on stderr. Only ``write`` commands may create
    one: a read command on a SQLite path that does not exist is refused, naming the path."""
    from .._app import Stalwart

    url = store_url(ctx)
    if url.startswith("memory:"):
        raise CliError(f"{url}: a memory store lives in one process; give --url of a real store")
    if url.startswith("sqlite:///") and not write:
        path = Path(url[len("sqlite:///") :])
        if not path.exists():
            where = "--url" if explicit_url(ctx) else "STALWART_URL / the default store"
            demo = Path(".stalwart") / "demo.db"
            hint = (
                f" (the demo's runs are in sqlite:///{demo}: add --url sqlite:///{demo})"
                if demo.exists() and path != demo
                else ""
            )
            raise CliError(
                f"no store at {path} (from {where}); give --url sqlite:///PATH of an existing "
                f"store, or set STALWART_URL{hint}"
            )
    app = Stalwart(url)
    click.echo(f"store: {mask_url(app.url)}", err=True)  # stderr: piped output stays clean
    return app
