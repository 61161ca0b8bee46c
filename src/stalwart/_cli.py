"""The ``stalwart`` command line: a thin consumer of the public API."""

from __future__ import annotations

import datetime as _dt
import json
import sys
from typing import Any

import click

from ._errors import StalwartError

__all__ = ["main"]


def _app(url: str | None) -> Any:
    from ._app import Stalwart

    return Stalwart(url)


def _time(value: _dt.datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _short(value: Any, width: int = 48) -> str:
    text = "" if value is None else json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


@click.group()
@click.option(
    "--url",
    envvar="STALWART_URL",
    default=None,
    help="Store URL (default: $STALWART_URL or sqlite:///.stalwart/stalwart.db).",
)
@click.pass_context
def cli(ctx: click.Context, url: str | None) -> None:
    """stalwart: durable execution for long-running AI agents."""
    ctx.obj = {"url": url}


@cli.command("ls")
@click.option("--status", default=None, help="Only runs in this status.")
@click.option("--name", default=None, help="Only runs of this workflow.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines.")
@click.pass_context
def ls_command(ctx: click.Context, status: str | None, name: str | None, as_json: bool) -> None:
    """List runs, newest first."""
    with _app(ctx.obj["url"]) as app:
        runs = app.list_workflows(status=status, name=name)
    if as_json:
        for r in runs:
            click.echo(
                json.dumps(
                    {
                        "workflow_id": r.workflow_id,
                        "name": r.name,
                        "status": r.status,
                        "queue": r.queue,
                        "created_at": r.created_at.isoformat(),
                        "updated_at": r.updated_at.isoformat(),
                        "error": r.error,
                    }
                )
            )
        return
    click.echo(f"{'WORKFLOW ID':34} {'NAME':24} {'STATUS':16} CREATED")
    for r in runs:
        click.echo(f"{r.workflow_id:34} {r.name:24} {r.status:16} {_time(r.created_at)}")


def format_timeline(entries: list[Any]) -> list[str]:
    """Readable lines for a run's journal."""
    lines = [
        f"{'SEQ':>4}  {'KIND':12} {'NAME':24} {'STATUS':10} {'TRY':>3}  {'FINISHED':19}  DETAIL"
    ]
    for e in entries:
        detail = e.error if e.error else _short(e.output)
        lines.append(
            f"{'' if e.seq is None else e.seq:>4}  {e.kind:12} {e.name:24} {e.status:10} "
            f"{'' if e.attempt is None else e.attempt:>3}  {_time(e.finished_at):19}  {detail}"
        )
    return lines


@cli.command("show")
@click.argument("workflow_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def show_command(ctx: click.Context, workflow_id: str, as_json: bool) -> None:
    """Show a run and its journal as a timeline."""
    with _app(ctx.obj["url"]) as app:
        status = app.handle(workflow_id).status()
        entries = app.journal(workflow_id)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "workflow_id": workflow_id,
                    "status": status,
                    "journal": [
                        {
                            "seq": e.seq,
                            "kind": e.kind,
                            "name": e.name,
                            "status": e.status,
                            "attempt": e.attempt,
                            "started_at": e.started_at and e.started_at.isoformat(),
                            "finished_at": e.finished_at and e.finished_at.isoformat(),
                            "input": e.input,
                            "output": e.output,
                            "error": e.error,
                            "by": e.by,
                        }
                        for e in entries
                    ],
                },
                default=str,
                indent=2,
            )
        )
        return
    click.echo(f"run {workflow_id}: {status}")
    for line in format_timeline(entries):
        click.echo(line)


@cli.command("demo")
def demo_command() -> None:
    """Crash a multi-step agent with SIGKILL mid-run, resume it, and print its journal."""
    from ._demo import run_demo

    run_demo()


def main() -> None:
    """Entry point of the ``stalwart`` console script."""
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.UsageError as exc:
        exc.show()
        sys.exit(2)
    except click.exceptions.Abort:
        sys.exit(1)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(1)
    except StalwartError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    sys.exit(0)
