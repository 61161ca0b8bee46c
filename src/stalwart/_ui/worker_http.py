"""``stalwart worker --http-port P``: the worker's own small HTTP server, beside its claim loop.

It serves the app's webhooks (``POST /api/v1/hooks/{name}``, :mod:`.hooks_route`) and, when
``--metrics-port`` is the same port, ``GET /metrics`` from the worker's registry. It is a
companion of the worker (``_worker.Companion``): it starts once the worker serves and stops
before the worker gives its runs back, so a delivery in flight still commits. Its socket is
bound at once, so a port in use is an error before the worker starts.
"""

from __future__ import annotations

import logging
import socket
import threading
from typing import TYPE_CHECKING, Any

from .hooks_route import DELIVERY_THREADS
from .server import _listen, url_of

if TYPE_CHECKING:
    from .._metrics import Metrics

__all__ = ["HookServer"]

log = logging.getLogger("stalwart")

STOP_SECONDS = 15.0


class HookServer:
    """Serves ``app``'s webhooks on ``host:port`` (and ``/metrics`` when ``metrics``) while
    the worker serves."""

    threads = DELIVERY_THREADS  # deliveries at once: the worker reserves a connection each

    def __init__(self, app: Any, host: str, port: int, *, metrics: bool = False) -> None:
        self.app = app
        self.serves_metrics = metrics
        self.sock: socket.socket = _listen(host, port)
        self.url = url_of(self.sock)
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def asgi(self, metrics: Metrics | None) -> Any:
        """The ASGI app: the hooks route, ``/metrics`` when asked, behind the guard."""
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import Response
        from starlette.routing import Route

        from .guard import Guard
        from .hooks_route import hooks_route

        routes = [hooks_route()]
        if self.serves_metrics and metrics is not None:

            async def scrape(_request: Request) -> Response:
                from prometheus_client import CONTENT_TYPE_LATEST

                return Response(metrics.text(), media_type=CONTENT_TYPE_LATEST)

            routes.append(Route("/metrics", scrape, methods=["GET"]))
        asgi = Starlette(routes=routes)
        asgi.state.hooks_app = self.app
        return Guard(asgi, loopback=False)

    def start(self, metrics: Metrics | None) -> None:
        """Serve from a thread of its own (deliveries counted into ``metrics``)."""
        import uvicorn

        from .._ingress import ingress_of
        from .hooks_route import warn_unsigned

        if metrics is not None:
            ingress_of(self.app).delivery.metrics = metrics
        config = uvicorn.Config(
            self.asgi(metrics),
            log_level="warning",
            access_log=False,
            server_header=False,
            lifespan="off",
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [self.sock]},
            name="stalwart-http",
            daemon=True,
        )
        self._thread.start()
        owner = self.app._runtime.owner
        log.info("worker %s: webhooks at %sapi/v1/hooks/", owner, self.url)
        warn_unsigned(self.app)
        if self.serves_metrics and metrics is not None:
            log.info("worker %s: metrics at %smetrics", owner, self.url)

    def stop(self) -> None:
        """Finish the requests in flight, then stop serving."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(STOP_SECONDS)
        self.sock.close()
