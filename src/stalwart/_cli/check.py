"""``stalwart check MODULE:APP``: the gate before a deploy. Replays every run in flight
against the code of MODULE:APP without executing anything; exit 1 when any run would not
replay (docs/changing-code.md)."""

from __future__ import annotations

from typing import Any

import click

from .._checks import LIVE
from .._errors import mask_url
from .._format import Table
from .._runtime import READ_ONLY_DECLARATIONS
from .._wire import dumps
from ._load import load_app
from ._root import CliError, app_target, app_url, cli, explicit_url, url_option
from .serve import same_store

__all__: list[str] = []

_PAGE = 500


class _NotChecked(CliError):
    """Nothing was checked (MODULE:APP does not load, or names another store): exit 2, so
    that CI tells it from runs that would not replay (exit 1)."""

    exit_code = 2


def _ids_in(app: Any, status: str) -> list[str]:
    """Every run in ``status``, page by page."""
    ids: list[str] = []
    before = None
    while True:
        page = app.list_workflows(status, limit=_PAGE, before=before)
        ids.extend(run.workflow_id for run in page)
        if len(page) < _PAGE:
            return ids
        before = page[-1]


def _summary(results: list[Any]) -> str:
    bad = [r for r in results if not r.ok]
    if not bad:
        return f"{len(results)} run(s) checked: every one replays on this code"
    reasons = ("diverged", "stranded", "corrupt")
    counts = {reason: sum(r.reason == reason for r in bad) for reason in reasons}
    found = ", ".join(f"{n} {reason}" for reason, n in counts.items() if n)
    return f"{len(results)} run(s) checked: {found}"


@cli.command("check")
@click.argument("target", metavar="[MODULE:APP]", required=False)
@click.option("--status", default=None, type=click.Choice(LIVE), help="Only runs in this status.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON Lines, one object per run.")
@url_option
@click.pass_context
def check_command(
    ctx: click.Context, target: str | None, status: str | None, as_json: bool
) -> None:
    """Replay every run that has not ended against the code of MODULE:APP, executing nothing,
    and exit 1 if any diverged from its journal, is stranded (its workflow is no longer
    registered) or has a corrupt record: a CI gate before a deploy."""
    target, folder = app_target(ctx, target)
    declaring = READ_ONLY_DECLARATIONS.set(True)  # its queues and schedules stay unwritten
    try:
        app = load_app(target, folder)
    except CliError as exc:
        raise _NotChecked(exc.message) from None
    finally:
        READ_ONLY_DECLARATIONS.reset(declaring)
    url = explicit_url(ctx)
    if url is not None and not same_store(url, app_url(app, folder)):
        raise _NotChecked(
            f"{target} uses the store {mask_url(app.url)}, not --url {mask_url(url)}: give "
            "the app that URL (stalwart.Stalwart(url)) or drop --url"
        )
    click.echo(f"store: {mask_url(app_url(app, folder))}", err=True)
    try:
        results = app.check(None if status is None else _ids_in(app, status))
    finally:
        app.close()
    if as_json:
        for r in results:
            fields = ("workflow_id", "ok", "seq", "recorded", "requested", "reason")
            click.echo(dumps({name: getattr(r, name) for name in fields}))
        click.echo(_summary(results), err=True)
    else:
        bad = [r for r in results if not r.ok]
        if bad:
            table = Table("WORKFLOW ID", "RESULT", "SEQ", "RECORDED", "REQUESTED", right=("SEQ",))
            for r in bad:
                table.add(r.workflow_id, r.reason, r.seq, r.recorded, r.requested)
            table.echo()
        click.echo(_summary(results))
    if any(not r.ok for r in results):
        for line in _advice(results):
            click.echo(line, err=True)
        ctx.exit(1)


def _advice(results: list[Any]) -> list[str]:
    """What to do about the runs that would not replay, one line per kind of trouble."""
    found = {r.reason for r in results if not r.ok}
    lines = []
    if "diverged" in found:
        lines.append(
            "diverged: guard the change with stalwart.patched('<id>') where the code begins to "
            "differ, or ship it under a new workflow name and keep the old one until its runs "
            "end (docs/changing-code.md)"
        )
    if "stranded" in found:
        lines.append(
            "stranded: keep registering the workflow these runs belong to until they end, or "
            "cancel them (stalwart cancel ID)"
        )
    if "corrupt" in found:
        lines.append("corrupt: stalwart show ID --seq SEQ prints the record that cannot be read")
    return lines
