"""The ``stalwart`` command line: a thin consumer of the public API."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import click

from ._errors import StalwartError
from ._format import format_time, format_timeline, format_usage, short
from ._model import STATUSES

__all__ = ["main"]


def _app(url: str | None) -> Any:
    from ._app import Stalwart

    return Stalwart(url)


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
@click.option(
    "--status", default=None, type=click.Choice(STATUSES), help="Only runs in this status."
)
@click.option("--name", default=None, help="Only runs of this workflow.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines.")
@click.pass_context
def ls_command(ctx: click.Context, status: str | None, name: str | None, as_json: bool) -> None:
    """List runs, newest first."""
    with _app(ctx.obj["url"]) as app:
        runs = app.list_workflows(status=status, name=name)
        if as_json:
            _print_runs_json(app, runs)
            return
    click.echo(f"{'WORKFLOW ID':34} {'NAME':24} {'STATUS':16} {'CREATED':19}  ERROR")
    for r in runs:
        click.echo(
            f"{r.workflow_id:34} {r.name:24} {r.status:16} {format_time(r.created_at):19}  "
            f"{short(r.error, 60) if r.error else ''}"
        )


def _print_runs_json(app: Any, runs: list[Any]) -> None:
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
                    "usage": dataclasses.asdict(app.usage(r.workflow_id)),
                }
            )
        )


@cli.command("show")
@click.argument("workflow_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def show_command(ctx: click.Context, workflow_id: str, as_json: bool) -> None:
    """Show a run and its journal as a timeline."""
    with _app(ctx.obj["url"]) as app:
        status = app.handle(workflow_id).status()
        entries = app.journal(workflow_id)
        spent = app.usage(workflow_id)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "workflow_id": workflow_id,
                    "status": status,
                    "usage": dataclasses.asdict(spent),
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
                            "usage": e.usage and dataclasses.asdict(e.usage),
                            "idempotency_key": e.idempotency_key,
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
    if spent.input_tokens or spent.output_tokens or spent.cost:
        click.echo(format_usage(spent))


def _by_option(func: Any) -> Any:
    return click.option(
        "--by", default=None, help="Who performs the action (default: the OS user)."
    )(func)


@cli.command("worker")
@click.argument("target", metavar="MODULE:APP")
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=None,
    help="Runs executed at once (default 8).",
)
@click.option("--queue", "queues", multiple=True, help="Serve this queue (repeatable).")
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    help="The least severe log lines written.",
)
@click.option(
    "--log-format",
    default="text",
    show_default=True,
    type=click.Choice(["text", "json"]),
    help="text, or json: one JSON object per line.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics at http://HOST:PORT/metrics (needs stalwart[metrics]).",
)
@click.option(
    "--metrics-host", default="127.0.0.1", show_default=True, help="Where to serve metrics."
)
def worker_command(
    target: str,
    concurrency: int | None,
    queues: tuple[str, ...],
    log_level: str,
    log_format: str,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Run a worker for the app MODULE:APP until SIGINT or SIGTERM (uses the app's own store)."""
    import importlib
    import logging
    import os

    from ._app import Stalwart
    from ._logs import configure

    configure(log_level, log_format)  # before the app's module: its lines are formatted too

    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise click.UsageError(f"{target!r}: write MODULE:APP, for example agents.refunds:app")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise click.ClickException(f"cannot import {module_name!r}: {exc}") from exc
    app = getattr(module, attr, None)
    if not isinstance(app, Stalwart):
        raise click.ClickException(f"{target!r} is not a stalwart.Stalwart app")
    app.serve(
        concurrency=concurrency,
        queues=list(queues) or None,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
    )
    # A step that outlived the shutdown grace had its run released: it must not go on running
    # in this process while another worker executes the run. The worker is one OS process.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@cli.command("send-event")
@click.argument("workflow_id")
@click.argument("name")
@click.argument("payload", required=False, default=None)
@click.option("--dedup-key", default=None, help="Ignore a repeat of this event.")
@_by_option
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
    try:
        value = None if payload is None else json.loads(payload)
    except ValueError as exc:
        raise click.UsageError(f"PAYLOAD is not JSON: {exc}") from exc
    with _app(ctx.obj["url"]) as app:
        app.send_event(workflow_id, name, value, dedup_key=dedup_key, by=by)
    click.echo(f"sent {name!r} to {workflow_id}")


@cli.command("approvals")
@click.option("--all", "show_all", is_flag=True, help="Include decided requests.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines.")
@click.pass_context
def approvals_command(ctx: click.Context, show_all: bool, as_json: bool) -> None:
    """List approval requests waiting for a decision."""
    with _app(ctx.obj["url"]) as app:
        requests = app.approvals(pending=not show_all)
    if as_json:
        for r in requests:
            decision = r.decision
            click.echo(
                json.dumps(
                    {
                        "workflow_id": r.workflow_id,
                        "approval_id": r.approval_id,
                        "subject": r.subject,
                        "details": r.details,
                        "requested_at": r.requested_at.isoformat(),
                        "expires_at": r.expires_at and r.expires_at.isoformat(),
                        "decision": None
                        if decision is None
                        else {
                            "approved": decision.approved,
                            "by": decision.by,
                            "reason": decision.reason,
                            "decided_at": decision.decided_at.isoformat(),
                        },
                    },
                    default=str,
                )
            )
        return
    click.echo(f"{'WORKFLOW ID':34} {'ID':>4}  {'SUBJECT':28} {'REQUESTED':19}  DETAILS")
    for r in requests:
        click.echo(
            f"{r.workflow_id:34} {r.approval_id:>4}  {r.subject:28} "
            f"{format_time(r.requested_at):19}  {short(r.details)}"
        )


@cli.command("breakers")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines.")
@click.pass_context
def breakers_command(ctx: click.Context, as_json: bool) -> None:
    """List the fleet's circuit breakers: state, failures in the window, when a probe may go."""
    with _app(ctx.obj["url"]) as app:
        breakers = app.breakers()
    if as_json:
        for b in breakers:
            fields = dataclasses.asdict(b)
            fields["opened_at"] = b.opened_at and b.opened_at.isoformat()
            fields["retry_at"] = b.retry_at and b.retry_at.isoformat()
            click.echo(json.dumps(fields))
        return
    if not breakers:
        click.echo("no breaker has counted a failure")
        return
    click.echo(f"{'BREAKER':24} {'STATE':10} {'FAILURES':>8}  {'OPENED':19}  RETRY AT")
    for b in breakers:
        opened = format_time(b.opened_at) if b.opened_at else "-"
        retry = format_time(b.retry_at) if b.retry_at else "-"
        click.echo(f"{b.name:24} {b.state:10} {b.failures:>8}  {opened:19}  {retry}")


def _decision_command(verb: str) -> Any:
    @cli.command(verb, help=f"{verb.capitalize()} the pending approval request of a run.")
    @click.argument("workflow_id")
    @click.option("--reason", default=None, help="Why (recorded with the decision).")
    @click.option("--approval-id", default=None, help="Which request, if the run has several.")
    @_by_option
    @click.pass_context
    def command(
        ctx: click.Context,
        workflow_id: str,
        reason: str | None,
        approval_id: str | None,
        by: str | None,
    ) -> None:
        with _app(ctx.obj["url"]) as app:
            decide = app.approve if verb == "approve" else app.reject
            decide(workflow_id, by=by, reason=reason, approval_id=approval_id)
        click.echo(f"{'approved' if verb == 'approve' else 'rejected'} {workflow_id}")

    return command


approve_command = _decision_command("approve")
reject_command = _decision_command("reject")


@cli.command("cancel")
@click.argument("workflow_id")
@_by_option
@click.pass_context
def cancel_command(ctx: click.Context, workflow_id: str, by: str | None) -> None:
    """Cancel a run: at once if it waits, else at its next step boundary."""
    with _app(ctx.obj["url"]) as app:
        app.cancel(workflow_id, by=by)
        status = app.handle(workflow_id).status()
    click.echo(f"cancel requested for {workflow_id} (now {status})")


@cli.command("retry")
@click.argument("workflow_id")
@_by_option
@click.pass_context
def retry_command(ctx: click.Context, workflow_id: str, by: str | None) -> None:
    """Redrive a failed (or needs_attention) run from its failed step."""
    with _app(ctx.obj["url"]) as app:
        app.retry(workflow_id, by=by)
    click.echo(f"retried {workflow_id}: pending")


@cli.command("resolve")
@click.argument("workflow_id")
@click.argument("seq", type=int)
@click.option("--result", "result", default=None, help="What happened, as JSON.")
@click.option("--rerun", is_flag=True, help="Run the step again.")
@_by_option
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
    with _app(ctx.obj["url"]) as app:
        if rerun:
            app.resolve(workflow_id, seq, rerun=True, by=by)
        else:
            assert result is not None
            try:
                value = json.loads(result)
            except ValueError as exc:
                raise click.UsageError(f"--result is not JSON: {exc}") from exc
            app.resolve(workflow_id, seq, result=value, by=by)
    click.echo(f"resolved {workflow_id} seq {seq}: pending")


@cli.command("fork")
@click.argument("workflow_id")
@click.option("--from", "from_seq", type=int, required=True, help="First seq to execute again.")
@click.option("--new-id", default=None, help="The new run's id (default: random).")
@click.option(
    "--allow-reexecute", is_flag=True, help="Allow completed irreversible steps to run again."
)
@_by_option
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
    with _app(ctx.obj["url"]) as app:
        handle = app.fork(
            workflow_id, from_seq, new_id=new_id, allow_reexecute=allow_reexecute, by=by
        )
    click.echo(f"forked {workflow_id} at seq {from_seq}: {handle.workflow_id} (pending)")


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
