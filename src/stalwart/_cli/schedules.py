"""``stalwart schedules``: the schedules kept in the store and their next ticks."""

from __future__ import annotations

import click

from .._format import Table
from .._wire import dumps, schedule_json
from ._root import cli, open_app, url_option

__all__: list[str] = []


@cli.command("schedules")
@click.option("--json", "as_json", is_flag=True, help="Print JSON Lines.")
@url_option
@click.pass_context
def schedules_command(ctx: click.Context, as_json: bool) -> None:
    """List the schedules (app.schedule): workflow, cron, time zone, catch-up, next tick."""
    with open_app(ctx) as app:
        schedules = app.schedules()
    if as_json:
        for s in schedules:
            click.echo(dumps(schedule_json(s)))
        return
    if not schedules:
        click.echo("no schedules (declare one with app.schedule(workflow, cron))")
        return
    table = Table("SCHEDULE", "WORKFLOW", "CRON", "TIMEZONE", "CATCH UP", "NEXT TICK")
    for s in schedules:
        tick = s.next_tick.strftime("%Y-%m-%d %H:%M:%S %Z")  # in the schedule's own zone
        table.add(s.name, s.workflow, s.cron, s.timezone, s.catch_up, tick)
    table.echo()


@cli.command("unschedule")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@url_option
@click.pass_context
def unschedule_command(ctx: click.Context, name: str, as_json: bool) -> None:
    """Remove schedule NAME: no tick of it starts after this (its runs already started are
    left as they are); exit 1 if there is none."""
    with open_app(ctx) as app:  # a store that is not there has no schedule: never create one
        app.unschedule(name)
    click.echo(dumps({"removed": name}) if as_json else f"removed schedule {name!r}")
