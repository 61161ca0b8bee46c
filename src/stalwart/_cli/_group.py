"""The ``stalwart`` group: however it is invoked, every error is one ``error: ...`` line on
stderr (click's own ``Usage: ... Error: ...`` block never prints), with the exit codes of
docs/cli.md."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click

from .._errors import StalwartError

__all__ = ["CliError", "StalwartGroup"]


class CliError(click.ClickException):
    """A user mistake: printed as one ``error:`` line, exit code 1."""


class StalwartGroup(click.Group):
    """A click group whose ``main`` prints errors as ``error:`` lines, never a traceback for
    a user mistake."""

    def main(self, *args: Any, **kwargs: Any) -> NoReturn:
        kwargs["standalone_mode"] = False  # errors come back here instead of click's printer
        try:
            code = super().main(*args, **kwargs)  # a command's ctx.exit(n) comes back as n
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            _fail("aborted", None, 1)
        except click.exceptions.NoArgsIsHelpError as exc:  # a group with no command: its help
            click.echo(exc.format_message(), err=True)
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            _fail(exc.format_message(), exc.ctx, 2)
        except click.ClickException as exc:
            _fail(exc.format_message(), None, exc.exit_code)
        except StalwartError as exc:
            _fail(str(exc), None, 1)
        sys.exit(code if isinstance(code, int) else 0)


def _fail(message: str, ctx: click.Context | None, code: int) -> NoReturn:
    line = " ".join(message.split())
    if ctx is not None and code == 2:
        line += f" (see: {ctx.command_path} --help)"
    click.echo(f"error: {line}", err=True)
    sys.exit(code)
