"""The ``stalwart`` command line: a thin consumer of the public API.

``--url`` is accepted before or after the command; without it, ``$STALWART_URL``, else the
embedded default. Read commands never create a store. Every error is one ``error: ...`` line
on stderr (a hint where one is known), never a traceback for a user mistake.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from .._errors import StalwartError, mask_url

__all__ = ["cli", "main", "open_app", "url_option"]


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


def main() -> None:
    """Entry point of the ``stalwart`` console script."""
    try:
        code = cli.main(standalone_mode=False)  # a command's ctx.exit(n) comes back as n
        if isinstance(code, int) and code:
            sys.exit(code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("error: aborted", err=True)
        sys.exit(1)
    except click.exceptions.NoSuchOption as exc:
        _fail(exc.format_message(), exc.ctx, 2)
    except click.UsageError as exc:
        _fail(exc.format_message(), exc.ctx, 2)
    except click.ClickException as exc:
        _fail(exc.format_message(), None, exc.exit_code)
    except StalwartError as exc:
        _fail(str(exc), None, 1)
    sys.exit(0)


def _fail(message: str, ctx: click.Context | None, code: int) -> None:
    line = " ".join(message.split())
    if ctx is not None and code == 2:
        line += f" (see: {ctx.command_path} --help)"
    click.echo(f"error: {line}", err=True)
    sys.exit(code)


# The commands, each module adding its own to ``cli`` (they import what is above).
from . import (  # noqa: E402, F401
    check,
    operate,
    runs,
    schedules,
    serve,
    ui,
)
