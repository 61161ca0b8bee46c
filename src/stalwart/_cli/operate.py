"""The operator commands: events, approvals, cancel, retry, resolve, fork, breakers."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from .._errors import StalwartError
from .._format import Table, local_time, short
from .._model import STATUSES
from .._wire import approval_json, breaker_json, dumps
from ._output import WholeNumber
from ._root import cli, open_app, url_option

__all__: list[str] = []


def _by_option(func: Any) -> Any:
    return click.option("--by", default=None, help="Who acts (default: the OS user).")(func)


@cli.command("send-event")
@click.argument("workflow_id")
@click.argument("name")
@click.argument("payload", required=False, default=None)
@click.option("--dedup-key", default=None, help="Ignore a repeat of this event.")
@_by_option
@url_option
@click.pass_context
def send_event_command(
    ctx: click.Context,
    workflow_id: str,
    name: str,
    payload: str | None,
    dedup_key: str | None,
    by: str | None,
) -> None:
    """Send event NAME (with an optional JSON PAYLOAD) to a run."""
    value = _json_argument(payload, "PAYLOAD")
    with open_app(ctx) as app:
        delivered = app.send_event(workflow_id, name, value, dedup_key=dedup_key, by=by)
    if delivered:
        click.echo(f"sent {name!r} to {workflow_id}")
    else:
        click.echo(f"duplicate: {workflow_id} already got {name!r} with dedup key {dedup_key!r}")


def _json_argument(text: str | None, what: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        if text.lstrip()[:1] in ("{", "[", '"'):
            raise click.BadParameter(
                f"{text!r} is not valid JSON ({exc}); object keys and strings take double "
                """quotes: '{"amount": 10}'""",
                param_hint=what,
            ) from None
        quoted = json.dumps(text)
        raise click.BadParameter(
            f"{text!r} is not JSON; a string is written in quotes: '{quoted}'", param_hint=what
        ) from None


@cli.command("approvals")
@click.option("--all", "show_all", is_flag=True, help="Include decided requests.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON Lines.")
@url_option
@click.pass_context
def approvals_command(ctx: click.Context, show_all: bool, as_json: bool) -> None:
    """List approval requests waiting for a decision (with --all, decided ones too)."""
    with open_app(ctx) as app:
        requests = app.approvals(pending=not show_all)
    if as_json:
        for r in requests:
            click.echo(dumps(approval_json(r)))
        return
    if not requests:
        click.echo("no approval waits for a decision" if not show_all else "no approvals")
        return
    headers = ["WORKFLOW ID", "ID", "SUBJECT", "REQUESTED", "DETAILS"]
    if show_all:
        headers += ["DECISION", "BY", "DECIDED", "REASON"]
    table = Table(*headers, right=("ID",))
    for r in requests:
        cells: list[Any] = [
            r.workflow_id,
            r.approval_id,
            r.subject,
            local_time(r.requested_at),
            short(r.details),
        ]
        if show_all:
            d = r.decision
            cells += (
                ["pending", "", "", ""]
                if d is None
                else [
                    "approved" if d.approved else "rejected",
                    d.by,
                    local_time(d.decided_at),
                    d.reason or "",
                ]
            )
        table.add(*cells)
    table.echo()


def _decision_command(verb: str) -> Any:
    @cli.command(verb, help=f"{verb.capitalize()} the pending approval request of a run.")
    @click.argument("workflow_id")
    @click.option("--reason", default=None, help="Why (recorded with the decision).")
    @click.option("--approval-id", default=None, help="Which request, if the run has several.")
    @_by_option
    @url_option
    @click.pass_context
    def command(
        ctx: click.Context,
        workflow_id: str,
        reason: str | None,
        approval_id: str | None,
        by: str | None,
    ) -> None:
        with open_app(ctx) as app:
            decide = app.approve if verb == "approve" else app.reject
            decide(workflow_id, by=by, reason=reason, approval_id=approval_id)
        click.echo(f"{'approved' if verb == 'approve' else 'rejected'} {workflow_id}")

    return command


approve_command = _decision_command("approve")
reject_command = _decision_command("reject")


def _bulk_command(verb: str, summary: str) -> Any:
    @cli.command(verb, help=summary)
    @click.argument("workflow_ids", nargs=-1, metavar="[ID]...")
    @click.option("--status", default=None, type=click.Choice(STATUSES), help="Every run in it.")
    @click.option("--name", default=None, help="With --status: only runs of this workflow.")
    @click.option("--yes", is_flag=True, help="Do not ask for confirmation (with --status).")
    @_by_option
    @url_option
    @click.pass_context
    def command(
        ctx: click.Context,
        workflow_ids: tuple[str, ...],
        status: str | None,
        name: str | None,
        yes: bool,
        by: str | None,
    ) -> None:
        if bool(workflow_ids) == (status is not None):
            raise click.UsageError(f"give run IDs, or --status S [--name N]: {verb} which runs?")
        if name is not None and status is None:
            raise click.UsageError("--name goes with --status")
        with open_app(ctx) as app:
            ids = list(workflow_ids) or _matching(app, status, name)
            if status is not None:
                if not ids:
                    click.echo(f"no {status} runs" + (f" of {name}" if name else ""))
                    return
                _confirm(verb, len(ids), status, yes)
            refused = 0
            for wid in ids:
                try:
                    if verb == "retry":
                        app.retry(wid, by=by)
                        click.echo(f"retried {wid}: pending")
                    else:
                        app.cancel(wid, by=by)
                        click.echo(f"cancel requested for {wid} (now {app.handle(wid).status()})")
                except StalwartError as exc:
                    refused += 1
                    click.echo(f"error: {wid}: {' '.join(str(exc).split())}", err=True)
        if refused:
            raise click.exceptions.Exit(1)

    return command


def _matching(app: Any, status: str | None, name: str | None) -> list[str]:
    ids: list[str] = []
    before: Any = None
    while True:
        page = app.list_workflows(status, name, 500, before)
        ids += [r.workflow_id for r in page]
        if len(page) < 500:
            return ids
        before = page[-1]


def _confirm(verb: str, count: int, status: str, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        click.echo(
            f"error: {verb} {count} {status} run(s)? stdin is not a terminal: add --yes",
            err=True,
        )
        raise click.exceptions.Exit(2)
    if not click.confirm(f"{verb} {count} {status} run(s)?", default=False):
        raise click.exceptions.Exit(1)


retry_command = _bulk_command(
    "retry", "Redrive failed (or needs_attention) runs from their failed step."
)
cancel_command = _bulk_command(
    "cancel", "Cancel runs: at once if they wait, else at their next step boundary."
)


@cli.command("resolve")
@click.argument("workflow_id")
@click.argument("seq", type=WholeNumber(1, example=3))
@click.option("--result", "result", default=None, help="What happened, as JSON.")
@click.option("--rerun", is_flag=True, help="Run the step again.")
@_by_option
@url_option
@click.pass_context
def resolve_command(
    ctx: click.Context,
    workflow_id: str,
    seq: int,
    result: str | None,
    rerun: bool,
    by: str | None,
) -> None:
    """Settle an in-doubt irreversible step: --result JSON or --rerun."""
    if (result is None) == (not rerun):
        raise click.UsageError("give exactly one of --result JSON or --rerun")
    value = _json_argument(result, "--result")  # before the store is asked
    with open_app(ctx) as app:
        if rerun:
            app.resolve(workflow_id, seq, rerun=True, by=by)
        else:
            app.resolve(workflow_id, seq, result=value, by=by)
    click.echo(f"resolved {workflow_id} seq {seq}: pending")


@cli.command("fork")
@click.argument("workflow_id")
@click.option(
    "--from",
    "from_seq",
    type=WholeNumber(1, example=3),
    required=True,
    help="First seq to execute again.",
)
@click.option("--new-id", default=None, help="The new run's id (default: random).")
@click.option("--allow-reexecute", is_flag=True, help="Let completed irreversible steps rerun.")
@_by_option
@url_option
@click.pass_context
def fork_command(
    ctx: click.Context,
    workflow_id: str,
    from_seq: int,
    new_id: str | None,
    allow_reexecute: bool,
    by: str | None,
) -> None:
    """Start a new run that reuses the journal before --from and executes from there."""
    with open_app(ctx) as app:
        handle = app.fork(
            workflow_id, from_seq, new_id=new_id, allow_reexecute=allow_reexecute, by=by
        )
    click.echo(f"forked {workflow_id} at seq {from_seq}: {handle.workflow_id} (pending)")
    click.echo(
        f"a worker of the app executes it (stalwart worker MODULE:APP), or app.run(workflow, "
        f"workflow_id={handle.workflow_id!r}) in Python",
        err=True,
    )


@cli.command("breakers")
@click.option("--json", "as_json", is_flag=True, help="Print JSON Lines.")
@url_option
@click.pass_context
def breakers_command(ctx: click.Context, as_json: bool) -> None:
    """List the fleet's circuit breakers: state, failures in the window, when a probe may go."""
    with open_app(ctx) as app:
        breakers = app.breakers()
    if as_json:
        for b in breakers:
            click.echo(dumps(breaker_json(b)))
        return
    if not breakers:
        click.echo("no breaker has counted a failure")
        return
    table = Table("BREAKER", "STATE", "FAILURES", "OPENED", "RETRY AT", right=("FAILURES",))
    for b in breakers:
        table.add(b.name, b.state, b.failures, local_time(b.opened_at), local_time(b.retry_at))
    table.echo()
