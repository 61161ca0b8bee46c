"""``stalwart worker`` and ``stalwart demo``."""

from __future__ import annotations

import importlib
import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click

from .._errors import mask_url
from ._root import CliError, cli, explicit_url, url_option

__all__ = ["same_store"]


def _normalised(url: str) -> tuple[Any, ...]:
    """What names a store: scheme, host, port, database or resolved file (never a password)."""
    if url.startswith("sqlite:///"):
        return ("sqlite", str(Path(url[len("sqlite:///") :]).resolve()))
    parts = urlsplit(url)
    scheme = "postgresql" if parts.scheme in ("postgres", "postgresql") else parts.scheme
    return (scheme, parts.hostname or "localhost", parts.port or 5432, parts.path.lstrip("/"))


def same_store(a: str, b: str) -> bool:
    """Whether two store URLs name the same store (normalised; passwords ignored)."""
    return _normalised(a) == _normalised(b)


@cli.command("worker")
@click.argument("target", metavar="MODULE:APP")
@click.option(
    "--concurrency", type=click.IntRange(min=1), default=None, help="Runs at once (default 8)."
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
@url_option
@click.pass_context
def worker_command(
    ctx: click.Context,
    target: str,
    concurrency: int | None,
    queues: tuple[str, ...],
    log_level: str,
    log_format: str,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Run a worker for the app MODULE:APP until SIGINT or SIGTERM, on the app's own store
    (a --url that names another store is refused)."""
    from .._logs import configure

    configure(log_level, log_format)  # before the app's module: its lines are formatted too
    app = _load_app(target)
    url = explicit_url(ctx)
    if url is not None and not same_store(url, app.url):
        raise CliError(
            f"{target} uses the store {mask_url(app.url)}, not --url {mask_url(url)}: give "
            "the app that URL (stalwart.Stalwart(url)) or drop --url"
        )
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


def _load_app(target: str) -> Any:
    from .._app import Stalwart

    module_name, _, attr = target.partition(":")
    if module_name.endswith(".py"):
        hint = module_name[: -len(".py")].replace("/", ".")
        raise CliError(f"{target!r}: name the module, not the file: {hint}:{attr or 'app'}")
    if not module_name or not attr:
        raise CliError(f"{target!r}: write MODULE:APP, for example agents.refunds:app")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module: say where it broke, not our traceback
        raise CliError(f"cannot import {module_name!r}: {_where(exc)}") from exc
    app = getattr(module, attr, None)
    if not isinstance(app, Stalwart):
        apps = [name for name, value in vars(module).items() if isinstance(value, Stalwart)]
        found = f"; it has {', '.join(f'{module_name}:{a}' for a in apps)}" if apps else ""
        raise CliError(f"{target!r} is not a stalwart.Stalwart app{found}")
    return app


def _where(exc: BaseException) -> str:
    """An import failure as one line: the error, and the file and line it came from."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"SyntaxError: {exc.msg} ({exc.filename}, line {exc.lineno})"
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "importlib" not in f.filename and "/stalwart/_" not in f.filename]
    place = f" ({ours[-1].filename}, line {ours[-1].lineno})" if ours else ""
    text = str(exc) if isinstance(exc, ImportError) else f"{type(exc).__name__}: {exc}"
    return text + place


@cli.command("demo")
def demo_command() -> None:
    """Crash a multi-step agent with SIGKILL mid-run, resume it, and print its journal."""
    from .._demo import run_demo

    run_demo()
