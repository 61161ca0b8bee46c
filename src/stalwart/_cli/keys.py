"""``stalwart keygen`` and ``stalwart rekey``: encryption at rest from a terminal."""

from __future__ import annotations

import secrets

import click

from .._keyring import new_key_text
from ._output import WholeNumber
from ._root import cli, open_app, url_option

__all__: list[str] = []


@cli.command("keygen")
@click.option("--id", "key_id", default=None, help="The key id (default: a random one).")
def keygen_command(key_id: str | None) -> None:
    """Print a new random key as STALWART_ENCRYPTION_KEYS takes it (ID:BASE64)."""
    click.echo(f"{key_id or 'k' + secrets.token_hex(4)}:{new_key_text()}")


@cli.command("rekey")
@click.option(
    "--batch",
    type=WholeNumber(1, example=500),
    default=500,
    show_default=True,
    help="Values re-encrypted per transaction.",
)
@url_option
@click.pass_context
def rekey_command(ctx: click.Context, batch: int) -> None:
    """Re-encrypt every stored payload under the current key (online; safe to stop and run
    again), then older keys can be dropped from STALWART_ENCRYPTION_KEYS."""
    with open_app(ctx, write=True) as app:
        total = 0
        while done := app.rekey(batch):
            total += done
            click.echo(f"re-encrypted {total} values so far", err=True)
    click.echo(f"re-encrypted {total} values; every payload is under the current key")
