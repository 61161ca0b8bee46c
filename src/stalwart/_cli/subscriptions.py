"""``stalwart subscriptions``: what brokers and webhooks feed the app, and the fleet-wide
counts of the messages each accepted and rejected."""

from __future__ import annotations

import dataclasses

import click

from .._format import Table
from .._wire import dumps
from ._root import cli, open_app, url_option

__all__: list[str] = []


@cli.command("subscriptions")
@click.option("--json", "as_json", is_flag=True, help="Print JSON Lines.")
@url_option
@click.pass_context
def subscriptions_command(ctx: click.Context, as_json: bool) -> None:
    """List the subscriptions and webhooks (app.subscribe, app.webhook): source, what a
    message does, messages accepted and rejected (fleet-wide). With --url, those a worker
    served; with --app, the app's own too."""
    with open_app(ctx) as app:
        subscriptions = app.subscriptions()
    if as_json:
        for s in subscriptions:
            click.echo(dumps(dataclasses.asdict(s)))
        return
    if not subscriptions:
        click.echo("no subscriptions (declare one with app.subscribe(source, start=workflow))")
        return
    table = Table("NAME", "SOURCE", "DOES", "ACCEPTED", "REJECTED", right=("ACCEPTED", "REJECTED"))
    for s in subscriptions:
        table.add(s.name, s.kind, s.target, str(s.accepted), str(s.rejected))
    table.echo()
