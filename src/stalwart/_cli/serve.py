"""``stalwart worker`` and ``stalwart demo``."""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click

from .._errors import mask_url
from ._load import load_app
from ._output import WholeNumber
from ._root import CliError, app_target, app_url, cli, explicit_url, url_option

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
@click.argument("target", metavar="[MODULE:APP]", required=False)
@click.option(
    "--concurrency", type=WholeNumber(1, example=8), default=None, help="Runs at once (default 8)."
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
    type=WholeNumber(0, 65535, example=9464),
    default=None,
    help="Serve Prometheus metrics at http://HOST:PORT/metrics (needs stalwart[metrics]).",
)
@click.option(
    "--metrics-host", default="127.0.0.1", show_default=True, help="Where to serve metrics."
)
@click.option(
    "--http-port",
    type=WholeNumber(0, 65535, example=8080),
    default=None,
    help="Serve the app's webhooks at http://HOST:PORT/api/v1/hooks/NAME (needs "
    "stalwart[ui]), and /metrics when --metrics-port is the same port.",
)
@click.option(
    "--http-host", default="127.0.0.1", show_default=True, help="Where to serve webhooks."
)
@url_option
@click.pass_context
def worker_command(
    ctx: click.Context,
    target: str | None,
    concurrency: int | None,
    queues: tuple[str, ...],
    log_level: str,
    log_format: str,
    metrics_port: int | None,
    metrics_host: str,
    http_port: int | None,
    http_host: str,
) -> None:
    """Run a worker for the app MODULE:APP (default: --app, $STALWART_APP, or [tool.stalwart]
    app in pyproject.toml) until SIGINT or SIGTERM, on the app's own store (a --url that names
    another store is refused)."""
    from .._logs import configure

    target, folder = app_target(ctx, target)
    configure(log_level, log_format)  # before the app's module: its lines are formatted too
    app = load_app(target, folder)
    url = explicit_url(ctx)
    if url is not None and not same_store(url, app_url(app, folder)):
        raise CliError(
            f"{target} uses the store {mask_url(app.url)}, not --url {mask_url(url)}: give "
            "the app that URL (stalwart.Stalwart(url)) or drop --url"
        )
    if http_port is None:
        app.serve(
            concurrency=concurrency,
            queues=list(queues) or None,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
        )
    else:
        shared = http_port != 0 and metrics_port == http_port
        server = _hook_server(app, http_host, http_port, metrics=shared)
        app._serve_beside(
            server,
            concurrency,
            list(queues) or None,
            metrics_port,
            metrics_host,
            metrics_on_server=shared,
        )
    # A step that outlived the shutdown grace had its run released: it must not go on running
    # in this process while another worker executes the run. The worker is one OS process.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _hook_server(app: Any, host: str, port: int, *, metrics: bool) -> Any:
    """The worker's HTTP server (bound now: a port in use is an error before it serves)."""
    from .._errors import UsageError
    from .ui import extra_missing

    try:
        if any(importlib.util.find_spec(m) is None for m in ("starlette", "uvicorn")):
            raise ImportError("starlette or uvicorn")
        from .._ui.worker_http import HookServer
    except (ImportError, ValueError):  # ValueError: find_spec of a module set to None
        raise CliError(extra_missing().replace("the console", "--http-port")) from None
    try:
        return HookServer(app, host, port, metrics=metrics)
    except UsageError as exc:
        raise CliError(str(exc)) from None


@cli.command("demo")
def demo_command() -> None:
    """Crash a multi-step agent with SIGKILL mid-run, resume it, and print its journal."""
    from .._demo import run_demo

    run_demo()
