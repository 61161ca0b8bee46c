"""``stalwart shared get|set|history``: the shared context from a terminal (app.shared_get,
app.shared_set with compare-and-set, app.shared_history)."""

from __future__ import annotations

import click

from .._format import Table, local_time, short
from .._wire import dumps, shared_write_json, versioned_json
from ._group import CliError
from ._output import WholeNumber
from ._root import cli, open_app, url_option
from .operate import _by_option, _json_argument

__all__: list[str] = []


def _key(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    """KEY checked on the command line, so that a mistake there exits 2."""
    if not value:
        raise click.BadParameter("it is empty; give the shared key's name, for example plan")
    return value


@cli.group("shared")
def shared_group() -> None:
    """Read and write the shared context: versioned keys that runs and clients share."""


@shared_group.command("get")
@click.argument("key", callback=_key)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@url_option
@click.pass_context
def get_command(ctx: click.Context, key: str, as_json: bool) -> None:
    """Print KEY's value and version (version 0 and null when never written)."""
    with open_app(ctx) as app:
        current = app.shared_get(key)
    if as_json:
        click.echo(dumps(versioned_json(key, current)))
        return
    click.echo(f"{key} (version {current.version}): {dumps(current.value)}")


@shared_group.command("set")
@click.argument("key", callback=_key)
@click.argument("value", metavar="JSON")
@click.option(
    "--if-version",
    type=WholeNumber(0, example=3),
    default=None,
    help="Write only if KEY is still at this version (0: never written); exit 1 if it moved.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_by_option
@url_option
@click.pass_context
def set_command(
    ctx: click.Context,
    key: str,
    value: str,
    if_version: int | None,
    as_json: bool,
    by: str | None,
) -> None:
    """Write JSON as KEY's next version (with --if-version, only if KEY is still at it)."""
    decoded = _json_argument(value, "JSON")
    with open_app(ctx, write=True) as app:
        written = app.shared_set(key, decoded, if_version=if_version, by=by)
        current = app.shared_get(key) if written is None else written
    if written is None:
        raise CliError(
            f"{key!r} is at version {current.version}, not {if_version}: another writer moved "
            f"it; read it again (stalwart shared get {key}) and retry with --if-version "
            f"{current.version}"
        )
    if as_json:
        click.echo(dumps(versioned_json(key, written)))
        return
    click.echo(f"wrote {key} version {written.version}")


@shared_group.command("history")
@click.argument("key", callback=_key)
@click.option("--json", "as_json", is_flag=True, help="Print JSON Lines, oldest first.")
@url_option
@click.pass_context
def history_command(ctx: click.Context, key: str, as_json: bool) -> None:
    """Every write of KEY, oldest first: version, who wrote it, when and the value."""
    with open_app(ctx) as app:
        writes = app.shared_history(key)
    if as_json:
        for write in writes:
            click.echo(dumps(shared_write_json(write)))
        return
    if not writes:
        click.echo(f"{key!r} was never written")
        return
    table = Table("VERSION", "BY", "AT", "VALUE")
    for write in writes:
        table.add(str(write.version), write.by, local_time(write.at), short(write.value))
    table.echo()
