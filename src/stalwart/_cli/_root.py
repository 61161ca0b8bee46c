"""The root ``stalwart`` group and what every command shares: ``--url`` and ``--app``
(before or after the command), ``--version``, the store a command uses (found as docs/cli.md
says, "Which store", ``_discover``), and the one-line user error (``_group``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from .._errors import mask_url
from .._store import DEFAULT_URL
from ._discover import Found, discover, sqlite_path
from ._group import CliError, StalwartGroup

__all__ = [
    "CliError",
    "app_target",
    "app_url",
    "cli",
    "explicit_url",
    "open_app",
    "url_option",
]


def _remember(key: str) -> Callable[[click.Context, click.Parameter, str | None], None]:
    def callback(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
        if value is not None:
            ctx.find_root().ensure_object(dict)[key] = value

    return callback


def url_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--url`` and ``--app`` after the command too (``stalwart ls --url U`` as
    ``stalwart --url U ls``)."""
    func = click.option(
        "--app",
        "app_target",
        default=None,
        metavar="MODULE:APP",
        expose_value=False,
        is_eager=True,
        callback=_remember("app"),
        help="Use this app and its store (else $STALWART_APP, else [tool.stalwart] app).",
    )(func)
    return click.option(
        "--url",
        default=None,
        expose_value=False,
        is_eager=True,
        callback=_remember("url"),
        help="Store URL; without it, see docs/cli.md, 'Which store'.",
    )(func)


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        from .. import __version__

        click.echo(f"stalwart {__version__}")
        ctx.exit(0)


@click.group(cls=StalwartGroup, invoke_without_command=True)
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_version,
    help="Print the version and exit.",
)
@url_option
@click.pass_context
def cli(ctx: click.Context) -> None:
    """stalwart: durable execution for long-running AI agents."""
    ctx.ensure_object(dict)
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


def explicit_url(ctx: click.Context) -> str | None:
    """The ``--url`` given on the command line, if any (never ``$STALWART_URL``)."""
    url: str | None = ctx.find_root().ensure_object(dict).get("url")
    return url


def explicit_app(ctx: click.Context) -> str | None:
    """The ``--app`` given on the command line, if any (never ``$STALWART_APP``)."""
    app: str | None = ctx.find_root().ensure_object(dict).get("app")
    return app


def found_store(ctx: click.Context) -> Found:
    """Where the command's store comes from (found once per command)."""
    obj = ctx.find_root().ensure_object(dict)
    if "found" not in obj:
        obj["found"] = discover(explicit_url(ctx), explicit_app(ctx))
    found: Found = obj["found"]
    return found


def app_target(ctx: click.Context, target: str | None) -> tuple[str, Path | None]:
    """The ``MODULE:APP`` of ``worker`` and ``check``, and the folder to import it from: the
    argument, else the app the store discovery finds (``--app``, ``$STALWART_APP``,
    ``[tool.stalwart] app``)."""
    if target is not None:
        if explicit_app(ctx) not in (None, target):
            raise click.UsageError(f"{target} and --app {explicit_app(ctx)}: name one app")
        return target, None
    found = found_store(ctx) if explicit_url(ctx) is None else discover(None, explicit_app(ctx))
    if found.target is None:
        raise click.UsageError(
            "which app? give MODULE:APP, --app MODULE:APP, $STALWART_APP, or "
            '[tool.stalwart] app = "MODULE:APP" in pyproject.toml'
        )
    return found.target, found.folder


def where(found: Found, *, why: bool = False, app_url: str | None = None) -> str:
    """``found``'s source as a phrase: ``from --url``, ..., or ``the default store`` (with
    ``why``: what was looked for first). A store from an app names the app and, when the
    app's ``Stalwart()`` took its URL (``app_url``) from ``$STALWART_URL`` or its default,
    that too."""
    if found.target is not None:
        named = f": app {found.target}" if found.source.startswith("pyproject") else ""
        taken = _taken(app_url)
        if taken:
            named += f", whose store {taken}"
        return f"from {found.source}{named}"
    if found.source != "the default store":
        return f"from {found.source}"
    if why:
        return "the default store: no --url, --app, STALWART_APP, [tool.stalwart] or STALWART_URL"
    return found.source


def _taken(app_url: str | None) -> str:
    """Where an app's ``Stalwart()`` took ``app_url`` from, when it was not given one that
    differs: ``comes from STALWART_URL``, ``is the default``, or ``""``."""
    env = os.environ.get("STALWART_URL")
    if app_url is None:
        return ""
    if env and app_url == env:
        return "comes from STALWART_URL"
    if not env and app_url == DEFAULT_URL:
        return "is the default"
    return ""


def _url_at(path: Path, folder: Path | None) -> str | None:
    """The URL ``Stalwart()`` takes (``$STALWART_URL``, else the default) if, run from
    ``folder``, it names the SQLite file ``path`` (absolute); else ``None``."""
    url = os.environ.get("STALWART_URL") or DEFAULT_URL
    named = sqlite_path(url, folder or Path.cwd())
    return url if named is not None and named.absolute() == path else None


def _remedy(found: Found) -> str:
    """What to do about a store that is not there, by where its URL came from."""
    existing = "give --url sqlite:///PATH of an existing store"
    if found.target is not None:
        return f"start a worker of {found.target} to create its store, or {existing}"
    if found.source == "STALWART_URL":
        return f"set STALWART_URL to an existing store, or {existing}"
    if found.source.startswith("pyproject.toml"):
        return f"fix url in its [tool.stalwart], or {existing}"
    if found.source == "--url":
        return existing
    return f"{existing}, or --app MODULE:APP to use your app's store"


def app_url(app: Any, folder: Path | None) -> str:
    """The URL of ``app``'s store, a relative SQLite path made absolute against ``folder``
    (where a pyproject's app was imported and run)."""
    url: str = app.url
    path = sqlite_path(url, folder)
    return url if path is None else f"sqlite:///{path}"


def _import_app(found: Found, *, write: bool, command: str) -> Any:
    """The app ``found`` names, imported; unless ``write``, the way ``stalwart check`` imports
    one: its store is opened without being created or migrated and its queue and schedule
    declarations write nothing (a missing SQLite file, or a store older than this code, is
    refused, saying what ``command`` needs)."""
    from .._runtime import READ_ONLY_DECLARATIONS
    from .._store.base import SCHEMA_VERSION, MissingStore, UnmigratedStore
    from ._load import load_app

    assert found.target is not None
    if write:
        return load_app(found.target, found.folder)
    declaring = READ_ONLY_DECLARATIONS.set(True)
    try:
        return load_app(found.target, found.folder)
    except CliError as exc:
        if isinstance(exc.__cause__, MissingStore):
            raise CliError(
                f"no store at {exc.__cause__.path} "
                f"({where(found, app_url=_url_at(exc.__cause__.path, found.folder))}); "
                f"{_remedy(found)}"
            ) from None
        older = exc.__cause__
        if isinstance(older, UnmigratedStore):
            has = (
                f"has schema version {older.current}" if older.current else "has no stalwart schema"
            )
            raise CliError(
                f"{command}: the store {mask_url(older.url)} ({where(found)}) {has} and this "
                f"stalwart needs {SCHEMA_VERSION}; start a worker of {found.target} (or any "
                f"command that writes) to {'upgrade' if older.current else 'create'} it, or "
                "give --url of another store"
            ) from None
        raise
    finally:
        READ_ONLY_DECLARATIONS.reset(declaring)


def open_app(ctx: click.Context, *, write: bool = False) -> Any:
    """An app on the command's store, named on stderr with where it came from. Only ``write``
    commands may create a store: a read command on a SQLite path that does not exist is
    refused, naming the path and where its URL came from. An app found by ``--app``,
    ``$STALWART_APP`` or ``[tool.stalwart] app`` is imported, read-only unless ``write``."""
    from .._app import Stalwart

    found = found_store(ctx)
    if found.target is not None:
        app = _import_app(found, write=write, command=f"stalwart {ctx.info_name}")
        url = app.url
    else:
        app, url = None, str(found.url)
    source = where(found, app_url=url if found.target is not None else None)
    if url.startswith("memory:"):
        if app is not None:
            app.close()
        raise CliError(
            f"{mask_url(url)} ({source}): a memory store lives in one process; give "
            "--url of a real store"
        )
    path = sqlite_path(url, found.folder)
    if app is None and path is not None and not write and not path.exists():
        demo = Path(".stalwart") / "demo.db"
        hint = (
            f" (the demo's runs are in sqlite:///{demo}: add --url sqlite:///{demo})"
            if demo.exists() and path != demo
            else ""
        )
        raise CliError(
            f"no store at {path.absolute()} ({where(found, why=True)}); {_remedy(found)}{hint}"
        )
    if app is None:
        app = Stalwart(url)
    click.echo(f"store: {app._runtime.name} ({source})", err=True)  # stderr: stdout stays clean
    return app
