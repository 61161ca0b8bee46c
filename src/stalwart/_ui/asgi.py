"""The ASGI app: the API's routes under ``/api/v1`` (the webhooks' too), the console's files,
the error shape, the guard, and the OpenAPI document (without FastAPI's 422s)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.responses import FileResponse, HTMLResponse, Response
from fastapi.staticfiles import StaticFiles

from .. import __version__
from .api import ServerState, known_query, router
from .errors import install_error_handlers, strip_422
from .guard import Guard
from .hooks_route import hooks_route, warn_unsigned
from .stream_route import stream_router

__all__ = ["CONSOLE", "create_app"]

CONSOLE = Path(__file__).parent / "console"

_MISSING = (
    "<!doctype html><title>stalwart</title><p>The console's files are not installed "
    "(stalwart/_ui/console/index.html). The API answers at <code>/api/v1/</code>, described "
    "by <code>/api/v1/openapi.json</code>.</p>"
)


def create_app(
    app: Any, token: str, *, reads_need_token: bool = False, loopback: bool = True
) -> FastAPI:
    """The ASGI app serving ``app`` (a :class:`~stalwart.Stalwart`): writes need ``token``
    as a bearer token, reads too when ``reads_need_token``. On a ``loopback`` bind only
    requests addressed to a loopback name are answered (no DNS rebinding)."""
    if not token:
        raise ValueError("the console needs a token for writes")
    api = FastAPI(
        title="stalwart",
        version=__version__,
        summary="The operator API of a stalwart store: runs, journals, approvals, actions.",
        openapi_url="/api/v1/openapi.json",
        docs_url=None,
        redoc_url=None,
    )
    api.state.stalwart = ServerState(app=app, token=token, reads_need_token=reads_need_token)
    api.state.hooks_app = app
    install_error_handlers(api)
    # before the run's own route, whose id may hold slashes (it would take ".../stream")
    strict = [Depends(known_query)]  # an unknown query name is refused, never ignored
    api.include_router(stream_router, prefix="/api/v1", dependencies=strict)
    api.include_router(router, prefix="/api/v1", dependencies=strict)
    warn_unsigned(app)
    hooks = hooks_route()  # its signature is its authentication: no token, no OpenAPI entry
    api.add_route(hooks.path, hooks.endpoint, methods=["POST"], include_in_schema=False)
    api.add_api_route("/", _index, include_in_schema=False, methods=["GET"])
    api.mount("/console", _Console(directory=CONSOLE, check_dir=False), name="console")
    api.add_middleware(Guard, loopback=loopback)
    generate = api.openapi
    api.openapi = lambda: strip_422(generate())  # type: ignore[method-assign]
    return api


class _Console(StaticFiles):
    """The console's files; a missing folder answers 404 (a checkout without the console
    still serves the API)."""

    async def check_config(self) -> None:
        if CONSOLE.is_dir():
            await super().check_config()


def _index() -> Response:
    index = CONSOLE / "index.html"
    if not index.is_file():
        return HTMLResponse(_MISSING, status_code=404)
    return FileResponse(index, media_type="text/html")
