"""The ``stalwart`` command line: a thin consumer of the public API.

``--url`` is accepted before or after the command; without it, ``$STALWART_URL``, else the
embedded default. Read commands never create a store. Every error is one ``error: ...`` line
on stderr (a hint where one is known), never a traceback for a user mistake.

``_root`` holds the group and what its commands share; each command module adds its commands
to it, and this package imports them all, so it is the whole command line.
"""

from __future__ import annotations

import sys

import click

from .._errors import StalwartError
from . import check, operate, runs, schedules, serve, ui  # noqa: F401  (each adds its commands)
from ._root import cli, open_app, url_option

__all__ = ["cli", "main", "open_app", "url_option"]


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
