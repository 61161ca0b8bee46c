"""The operator console's server (``pip install 'stalwart[ui]'``): a JSON API under ``/api/v1``
over the app's public methods, described by ``/api/v1/openapi.json``, and the console's static
files at ``/`` and ``/console/``. See docs/http-api.md.

Importing this package needs nothing of the extra: :mod:`.server` checks a bind first, and
FastAPI is imported only to serve (``create_app``, in :mod:`.asgi`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app"]


def create_app(
    app: Any, token: str, *, reads_need_token: bool = False, loopback: bool = True
) -> Any:
    """The ASGI app (a FastAPI instance) serving the :class:`~stalwart.Stalwart` ``app``; see
    :func:`stalwart._ui.asgi.create_app`."""
    from .asgi import create_app as build

    return build(app, token, reads_need_token=reads_need_token, loopback=loopback)
