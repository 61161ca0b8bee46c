"""``stalwart export``, ``import`` and ``migrate``: runs as JSON Lines between any two stores,
and the whole store copied into an empty one (docs/lifecycle.md)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import IO, Any

import click

from .._errors import mask_url
from .._model import STATUSES
from .._store import store_name
from .._store.portable.access import Bulk
from .._store.portable.exporting import Selection, export_runs
from .._store.portable.extensions import extension_versions
from .._store.portable.importing import import_lines
from .._store.portable.migrate import Report, check_empty, copy_store, live_workers
from ._output import parse_when
from ._root import CliError, cli, open_app, url_option

__all__: list[str] = []

_TERMINAL = ("completed", "failed", "cancelled")
# The integrations whose tables migrate creates in the target (their migrations, by module).
_EXTENSIONS = {
    "langgraph": "stalwart.integrations.langgraph._schema",
    "openai_agents": "stalwart.integrations.openai_agents._session",
}


@cli.command("export")
@click.argument("ids", nargs=-1)
@click.option("--status", type=click.Choice(STATUSES), default=None, help="Runs in status S.")
@click.option("--name", default=None, help="Runs of workflow N.")
@click.option("--since", default=None, help="Runs created at or after T (ISO 8601, or 7d).")
@click.option("--with-snapshots", is_flag=True, help="Include the runs' workspace snapshots.")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write to FILE, not stdout.",
)
@url_option
@click.pass_context
def export_command(
    ctx: click.Context,
    ids: tuple[str, ...],
    status: str | None,
    name: str | None,
    since: str | None,
    with_snapshots: bool,
    output: str | None,
) -> None:
    """Write runs as JSON Lines (all runs, the IDs given, or those matching the filters), one
    line per run with everything needed to recreate it; `stalwart import` reads them."""
    if ids and (status or name or since):
        raise click.UsageError("give run IDs or filters (--status, --name, --since), not both")
    after = None if since is None else parse_when(since, "--since").timestamp()
    selection = Selection(ids, status, name, after, with_snapshots)
    missing: list[str] = []
    count = 0
    with open_app(ctx) as app:
        out: IO[str] = sys.stdout if output is None else open(output, "w", encoding="utf-8")  # noqa: SIM115  (closed below; stdout is not)
        try:
            for workflow_id, line, run_status in export_runs(app._runtime.store, selection):
                if line is None:
                    missing.append(workflow_id)
                    continue
                out.write(line + "\n")
                count += 1
                if run_status not in _TERMINAL:
                    click.echo(
                        f"warning: run {workflow_id} is {run_status}: once imported, a worker "
                        "of the target store resumes it; it must not also go on in the source "
                        "(stop the source's workers, or prune it there)",
                        err=True,
                    )
        finally:
            if out is not sys.stdout:
                out.close()
    click.echo(f"exported {count} run{'s' * (count != 1)}", err=True)
    if missing:
        raise CliError(f"no run {', '.join(missing)} in the store; check the ids with stalwart ls")


@cli.command("import")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@url_option
@click.pass_context
def import_command(ctx: click.Context, file: str) -> None:
    """Recreate the runs of an export FILE (`-` for stdin) in the store; a run whose id the
    store holds is skipped, never overwritten. Exit 1 if a line cannot be read."""
    if file != "-" and not Path(file).is_file():
        raise CliError(f"no file {file}; give the file `stalwart export -o FILE` wrote")
    counts = {"imported": 0, "skipped": 0, "unreadable": 0, "failed": 0}
    with open_app(ctx, write=True) as app:
        stream = sys.stdin if file == "-" else open(file, encoding="utf-8")  # noqa: SIM115  (closed below)
        try:
            for outcome in import_lines(app._runtime.store, stream):
                counts[outcome.outcome] += 1
                if outcome.outcome == "skipped":
                    click.echo(
                        f"skipped {outcome.workflow_id}: a run with this id is in the store",
                        err=True,
                    )
                elif outcome.outcome == "failed":
                    click.echo(
                        f"error: {file} line {outcome.line}: run {outcome.workflow_id} was not "
                        f"imported: {outcome.why}",
                        err=True,
                    )
                elif outcome.outcome == "unreadable":
                    click.echo(
                        f"error: {file} line {outcome.line}: cannot read it: {outcome.why}",
                        err=True,
                    )
        finally:
            if stream is not sys.stdin:
                stream.close()
    click.echo(f"imported {counts['imported']} runs, skipped {counts['skipped']}")
    if counts["unreadable"] or counts["failed"]:
        ctx.exit(1)


def _create_extensions(source: Bulk, target_app: Any) -> None:
    """The integrations' tables the source holds, created in the target by their own
    migrations where the target lacks them."""
    from .._extension import ExtensionStore

    theirs = extension_versions(Bulk(target_app._runtime.store))
    for namespace, version in extension_versions(source).items():
        if namespace in theirs:
            continue
        module = _EXTENSIONS.get(namespace)
        if module is None:
            raise CliError(
                f"the store holds the tables of integration {namespace!r}, which migrate does "
                "not know; create them in the target first (open its ExtensionStore on the "
                "target store), then run migrate again"
            )
        try:
            migrations = importlib.import_module(module).MIGRATIONS
        except ImportError as exc:
            raise CliError(
                f"the store holds tables of the {namespace} integration: install what it "
                f"needs to create them in the target ({exc})"
            ) from None
        if version > len(migrations):
            raise CliError(f"the store's {namespace} tables are newer than this stalwart's")
        ExtensionStore(target_app, namespace, migrations)


def _shown(value: int | str) -> str:
    return f"sha256:{value[:16]}" if isinstance(value, str) else str(value)


def _print(report: Report) -> None:
    table = [("TABLE", "SOURCE", "TARGET", "")] + [
        (c.table, _shown(c.source), _shown(c.target), "" if c.same else "MISMATCH")
        for c in report.counts
    ]
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    for row in table:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=False)) + row[3])
    rows = sum(report.copied.values())
    rate = rows / report.seconds if report.seconds else 0.0
    click.echo(f"copied {rows} rows in {report.seconds:.1f} s ({rate:,.0f} rows/s)")


@cli.command("migrate")
@click.option("--to", "to_url", required=True, metavar="URL", help="The new, empty store.")
@click.option("--force", is_flag=True, help="Copy even while a worker of the source is seen.")
@url_option
@click.pass_context
def migrate_command(ctx: click.Context, to_url: str, force: bool) -> None:
    """Copy the whole store into the empty store at URL (any backend), verify row counts and
    payload digests on both sides, and print them; the source is not changed. Exit 1 on a
    mismatch, a target that holds data, or a worker of the source seen within a lease."""
    from .._app import Stalwart

    if to_url.startswith("memory:"):
        raise CliError("--to memory:// keeps nothing after this command; give a real store's URL")
    with open_app(ctx) as app:
        source = Bulk(app._runtime.store)
        if store_name(to_url) == app._runtime.name:
            raise CliError("--to names the source store itself; give a new store's URL")
        lease = app._runtime.lease_seconds
        if not force and (seen := live_workers(source, lease)):
            raise CliError(
                f"a worker of the source was seen within the last {lease:g} s ({seen[0]}"
                f"{f' and {len(seen) - 1} more' if len(seen) > 1 else ''}); stop the "
                "workers and wait out a lease, or give --force if they are gone"
            )
        with Stalwart(to_url) as target:
            check_empty(Bulk(target._runtime.store))
            _create_extensions(source, target)
            click.echo(f"copying into {mask_url(to_url)}", err=True)
            report = copy_store(app._runtime.store, target._runtime.store)
    _print(report)
    if not report.ok:
        wrong = ", ".join(c.table for c in report.counts if not c.same)
        raise CliError(f"the copy does not match the source ({wrong}); do not use the target")
