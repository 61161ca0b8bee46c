"""``POST /api/v1/hooks/{name}``: a webhook's delivery (docs/ingress.md, "Webhooks"), served by
``stalwart ui --app`` and by ``stalwart worker --http-port``.

No bearer token: the signature is the authentication, checked on the raw body before anything
else, so a bad or missing one answers 401 and records nothing. Then the delivery core
(``_ingress.delivery``) starts the run ``"<name>:<delivery id>"`` or sends the event, once:
202 ``{"workflow_id": ...}`` after the commit, 200 ``{"duplicate": true, ...}`` for a delivery
id seen before, 400 for a body the hook cannot take (counted as rejected). A store that cannot
be reached answers 503, so the sender delivers again later. At most ``DELIVERY_THREADS``
deliveries of one server run at once, each in a thread holding a store connection; a worker
reserves a connection for each (``HookServer.threads``), so a burst of deliveries never takes
the connections its runs need, nor waits for them.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from typing import Any

import anyio
import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from .._errors import StoreError
from .._ingress import Outcome, ingress_of
from .._ingress.webhooks import webhook_of
from .._signatures import BadSignature, delivery_id, verify
from .guard import HOOKS_PREFIX

__all__ = ["DELIVERY_THREADS", "HOOKS_PREFIX", "hooks_route"]

log = logging.getLogger("stalwart")

DELIVERY_THREADS = 8  # deliveries one server runs at once (the rest wait for a turn)


def _error(status: int, type_: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"type": type_, "message": message}}, status_code=status)


async def receive(request: Request) -> JSONResponse:
    """One delivery of the webhook ``name``."""
    app: Any = request.app.state.hooks_app
    name = request.path_params["name"]
    hook = webhook_of(app, name)
    if hook is None:
        return _error(
            404,
            "NotFound",
            f"no webhook named {name!r} here: declare it with app.webhook and serve the app "
            "(stalwart ui --app MODULE:APP, or stalwart worker MODULE:APP --http-port P)",
        )
    body = await request.body()
    headers = {key.lower(): value for key, value in request.headers.items()}
    try:
        verify(hook.scheme, hook.secret, headers, body, now=time.time())
    except BadSignature as exc:
        log.warning("webhook %s: delivery refused: %s", name, exc, extra={"webhook": name})
        return _error(401, "Unauthorized", str(exc))
    message_id = delivery_id(hook.scheme, headers, body)
    delivery = ingress_of(app).delivery
    try:
        verdict = await anyio.to_thread.run_sync(
            delivery.deliver, hook.subscription, message_id, body, limiter=_turns(request)
        )
    except StoreError as exc:
        log.error("webhook %s: %s: %s", name, type(exc).__name__, exc, extra={"webhook": name})
        return _error(503, type(exc).__name__, str(exc))
    if verdict.outcome is Outcome.REJECTED:
        return _error(400, "Rejected", verdict.reason or "the body does not fit this hook")
    if verdict.outcome is Outcome.DUPLICATE:
        return JSONResponse({"duplicate": True, "workflow_id": verdict.workflow_id})
    return JSONResponse({"workflow_id": verdict.workflow_id}, status_code=202)


def _turns(request: Request) -> anyio.CapacityLimiter:
    """The limit on deliveries at once of the loop serving ``request`` (made at its first
    delivery: a limiter belongs to one loop, and an ASGI app may be served by several)."""
    state = request.app.state
    by_loop: weakref.WeakKeyDictionary[Any, anyio.CapacityLimiter] | None = getattr(
        state, "hook_turns", None
    )
    if by_loop is None:
        by_loop = state.hook_turns = weakref.WeakKeyDictionary()
    loop = asyncio.get_running_loop()
    turns = by_loop.get(loop)
    if turns is None:
        turns = by_loop[loop] = anyio.CapacityLimiter(DELIVERY_THREADS)
    return turns


def warn_unsigned(app: Any) -> None:
    """One WARNING per hook of ``app`` served without a signature (``allow_unsigned=True``)."""
    for name, hook in (getattr(app, "_webhooks", None) or {}).items():
        if hook.secret is None:
            log.warning(
                "webhook %s: served unsigned (allow_unsigned=True): anyone who can reach "
                "%s%s can start runs",
                name,
                HOOKS_PREFIX,
                name,
                extra={"webhook": name},
            )


def hooks_route() -> Route:
    """The route, for an app whose ``state.hooks_app`` is the :class:`~stalwart.Stalwart`."""
    return Route(HOOKS_PREFIX + "{name}", receive, methods=["POST"], name="webhook")
