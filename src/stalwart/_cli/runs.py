"""``stalwart ls`` and ``stalwart show``: runs, and one run's header and timeline."""

from __future__ import annotations

import datetime as _dt
import difflib
import time
from pathlib import Path
from typing import Any

import click

from .._errors import WorkflowNotFound, mask_url
from .._format import Table, cut, duration, local_time, one_line, short, timeline, usage_line
from .._model import STATUSES
from .._store import DEFAULT_URL
from .._wire import detail_json, dumps, entry_json, info_json, usage_json
from ._output import WholeNumber, parse_when
from ._root import CliError, cli, explicit_url, open_app, url_option

__all__: list[str] = []

_ENDED = ("completed", "failed", "cancelled", "needs_attention")


def run_json(app: Any, r: Any, waiting_for: str | None) -> dict[str, Any]:
    """A run as ``ls --json`` prints it (one object per line; the keys are stable)."""
    usage = app.usage(r.workflow_id)
    return {**info_json(r), "waiting_for": waiting_for, "usage": usage_json(usage)}


@cli.command("ls")
@click.option("--status", default=None, type=click.Choice(STATUSES), help="Only this status.")
@click.option("--name", default=None, help="Only runs of this workflow.")
@click.option("--queue", default=None, help="Only runs of this queue.")
@click.option("--parent", default=None, help="Only the child runs of this run.")
@click.option("--limit", default=50, show_default=True, type=WholeNumber(1, example=20))
@click.option("--before", default=None, help="Created before T: ISO 8601 or 15m, 2h, 7d ago.")
@click.option("--since", default=None, help="Created at or after T (same forms).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON Lines.")
@url_option
@click.pass_context
def ls_command(
    ctx: click.Context,
    status: str | None,
    name: str | None,
    queue: str | None,
    parent: str | None,
    limit: int,
    before: str | None,
    since: str | None,
    as_json: bool,
) -> None:
    """List runs, newest first, and say how many more match."""
    until = None if before is None else parse_when(before, "--before")
    after = None if since is None else parse_when(since, "--since")
    with open_app(ctx) as app:
        page = app._list_waiting(
            status, name, limit, until, queue=queue, since=after, parent_id=parent
        )
        runs = [info for info, _ in page]
        more = 0
        if runs:
            matching = app.count_workflows(status, name, queue, after, parent_id=parent)
            newer = app.count_workflows(status, name, queue, runs[-1].created_at, parent_id=parent)
            more = max(0, matching - newer)
        if as_json:
            for r, waiting in page:
                click.echo(dumps(run_json(app, r, waiting)))
        else:
            table = Table(
                "WORKFLOW ID", "NAME", "STATUS", "QUEUE", "WAITING FOR", "CREATED", "ERROR"
            )
            for r, waiting in page:
                table.add(
                    r.workflow_id,
                    r.name,
                    r.status,
                    r.queue,
                    waiting or "",
                    local_time(r.created_at),
                    short_error(r.error),
                )
            if runs:
                table.echo()
            else:
                click.echo("no runs match")
    if more:
        last = runs[-1].created_at.astimezone().isoformat(timespec="microseconds")
        click.echo(f"{more} more: add --before {last} to see the next page", err=True)


def short_error(error: str | None, width: int | None = 100) -> str:
    """An error as one line of plain text, cut to ``width`` (``None``: whole)."""
    if not error:
        return ""
    return cut(" ".join(error.split()), width)


@cli.command("show")
@click.argument("workflow_id")
@click.option("--full", is_flag=True, help="Cut nothing: every value whole, drawn or piped.")
@click.option(
    "--seq",
    type=WholeNumber(1, example=3),
    default=None,
    help="Print the entries of this seq whole: a JSON array (with --json, the run with only them).",
)
@click.option("--follow", is_flag=True, help="Print entries as they land, until the run ends.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@url_option
@click.pass_context
def show_command(
    ctx: click.Context,
    workflow_id: str,
    full: bool,
    seq: int | None,
    follow: bool,
    as_json: bool,
) -> None:
    """Show a run: its header (status, queue, times, usage, the step it executes now) and its
    timeline."""
    with open_app(ctx) as app:
        try:
            detail = app.describe(workflow_id)
        except WorkflowNotFound as exc:
            hint = _demo_hint(app.url, workflow_id) or _near_ids(app, workflow_id)
            raise CliError(f"{exc}{hint}") from None
        entries = app.journal(workflow_id)
        if seq is not None:
            entries = [e for e in entries if e.seq == seq]
            if not entries:
                seqs = sorted({e.seq for e in app.journal(workflow_id) if e.seq is not None})
                raise CliError(
                    f"run {workflow_id!r} has no entry {seq}; its seqs are "
                    + (f"{seqs[0]} to {seqs[-1]}" if seqs else "none yet")
                )
        if as_json:  # one object; with --seq, its journal holds that seq's entries only
            click.echo(dumps(_run_detail_json(detail, entries), indent=2))
            return
        if seq is not None:
            click.echo(dumps([entry_json(e) for e in entries], indent=2))
            return
        url = explicit_url(ctx)
        show = "stalwart show" if url is None else f"stalwart --url {mask_url(url)} show"
        for line in header(detail, show=show, full=full):
            click.echo(line)
        for line in children_lines(app, workflow_id):
            click.echo(line)
        click.echo("")
        timeline(entries, full=full, detached=detached_children(app, workflow_id)).echo()
        if not follow:
            return
        seen = len(entries)
        while detail.info.status not in _ENDED:
            time.sleep(0.5)
            detail = app.describe(workflow_id)
            entries = app.journal(workflow_id)
            if len(entries) > seen:
                detached = detached_children(app, workflow_id)
                table = timeline(entries[seen:], full=full, detached=detached)
                for row in table.rows:
                    click.echo("  ".join(cell for cell in table.plain(row) if cell))
                seen = len(entries)
        click.echo(f"run {workflow_id}: {detail.info.status}")


def _near_ids(app: Any, workflow_id: str) -> str:
    """A hint naming recent runs whose ids look like a mistyped one."""
    recent = [r.workflow_id for r in app.list_workflows(limit=500)]
    close = difflib.get_close_matches(workflow_id, recent, n=3, cutoff=0.6)
    if close:
        return "; did you mean " + " or ".join(close) + "?"
    return "; stalwart ls lists the runs"


def _demo_hint(url: str, workflow_id: str) -> str:
    """Where to look when a run is not in the default store but the demo's store is here."""
    demo = Path(".stalwart") / "demo.db"
    if url != DEFAULT_URL or not demo.exists():
        return ""
    return (
        f"; the demo keeps its runs in sqlite:///{demo}: "
        f"stalwart --url sqlite:///{demo} show {workflow_id}"
    )


def header(detail: Any, *, show: str = "stalwart show", full: bool = False) -> list[str]:
    """The lines above a run's timeline; ``show``: the command that shows another run;
    ``full``: the error and the heartbeat whole."""
    info, usage = detail.info, detail.usage
    ended = info.status in _ENDED
    span = (info.updated_at if ended else _dt.datetime.now(_dt.UTC)) - info.created_at
    lines = [
        f"run {info.workflow_id}",
        f"  workflow   {info.name}",
        f"  status     {info.status}"
        + (f" (waiting for {one_line(detail.waiting_for)})" if detail.waiting_for else ""),
        f"  queue      {info.queue}",
        f"  created    {local_time(info.created_at)}",
        f"  updated    {local_time(info.updated_at)}",
        f"  duration   {duration(span.total_seconds())}" + ("" if ended else " so far"),
        f"  usage      {usage_line(usage, under_way=detail.current is not None)}",
    ]
    if info.error:
        lines.append(f"  error      {short_error(info.error, None if full else 200)}")
    if info.parent_id is not None:
        lines.append(f"  parent     {info.parent_id} ({show} {info.parent_id})")
    current = detail.current
    if current is not None:
        elapsed = (_dt.datetime.now(_dt.UTC) - current.started_at).total_seconds()
        lines.append(
            f"  now        step {current.name} (seq {current.seq}), attempt {current.attempt}, "
            f"running for {duration(elapsed)}"
        )
        if current.heartbeat is not None:
            lines.append(f"  heartbeat  {short(current.heartbeat, None if full else 200)}")
        lines.append(f"  held by    {current.holder}")
    return lines


def detached_children(app: Any, workflow_id: str) -> frozenset[str]:
    """The ids of run ``workflow_id``'s detached children."""
    store = app._runtime.store
    attached = {r.workflow_id for r in store.child_runs(workflow_id, attached=True)}
    return frozenset(r.workflow_id for r in store.child_runs(workflow_id)) - attached


def children_lines(app: Any, workflow_id: str, limit: int = 20) -> list[str]:
    """The header lines naming a run's child runs (the newest ``limit``) and their status
    (``, detached`` for a detached one)."""
    children = app.list_workflows(parent_id=workflow_id, limit=limit + 1)
    if not children:
        return []
    detached = detached_children(app, workflow_id)
    shown = ", ".join(
        f"{c.workflow_id} ({c.status}{', detached' if c.workflow_id in detached else ''})"
        for c in reversed(children[:limit])
    )
    more = (
        f", and more (app.list_workflows(parent_id={workflow_id!r}))"
        if len(children) > limit
        else ""
    )
    return [f"  children   {shown}{more}"]


def _run_detail_json(detail: Any, entries: list[Any]) -> dict[str, Any]:
    return {**detail_json(detail), "journal": [entry_json(e) for e in entries]}
