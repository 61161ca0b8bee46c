"""``stalwart prune``: delete ended runs older than a time, with everything kept for them."""

from __future__ import annotations

import sys

import click

from .._store.prunes import TERMINAL
from ._output import parse_when
from ._root import cli, open_app, url_option

__all__: list[str] = []


@cli.command("prune")
@click.option(
    "--older-than",
    "older_than",
    required=True,
    metavar="WHEN",
    help="Runs that ended before this: a duration back from now (30d, 12h) or ISO 8601.",
)
@click.option("--status", default=None, help="Only runs in this ended status.")
@click.option("--name", default=None, help="Only runs of this workflow.")
@click.option("--dry-run", is_flag=True, help="Say how many runs would go; delete nothing.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@url_option
@click.pass_context
def prune_command(
    ctx: click.Context,
    older_than: str,
    status: str | None,
    name: str | None,
    dry_run: bool,
    yes: bool,
) -> None:
    """Delete the ended runs (completed, failed, cancelled) last changed before --older-than,
    with their journals, events, approvals, stream chunks, snapshots and usage, then the stored
    values no run uses any more. A run with a child still under way is kept."""
    if status is not None and status not in TERMINAL:
        raise click.BadParameter(
            f"{status!r}: a prune deletes ended runs only; pass {', '.join(TERMINAL)}",
            param_hint="--status",
        )
    when = parse_when(older_than, "--older-than")
    what = " ".join(filter(None, [status, "run(s)", f"of {name}" if name else None]))
    shown = f"{what} that ended before {when.isoformat(timespec='seconds')}"
    with open_app(ctx) as app:  # a store that is not there has nothing to prune: never create one
        count = app.prune(when, status=status, name=name, dry_run=True)
        if dry_run or not count:
            click.echo(f"{'would delete' if dry_run else 'nothing to delete:'} {count} {shown}")
            return
        if not yes:
            if not sys.stdin.isatty():
                click.echo(
                    f"error: delete {count} {shown}? stdin is not a terminal: add --yes",
                    err=True,
                )
                raise click.exceptions.Exit(2)
            if not click.confirm(f"delete {count} {shown}?", default=False):
                raise click.exceptions.Exit(1)
        deleted = app.prune(when, status=status, name=name, by="cli")
    click.echo(f"deleted {deleted} {shown}")
