"""``stalwart ui``'s server: the bind rules, the socket, uvicorn."""

from __future__ import annotations

import ipaddress
import secrets
import signal
import socket
import threading
from collections.abc import Callable
from typing import Any

from .._errors import UsageError

__all__ = ["Bind", "check_bind", "serve"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8377


class Bind:
    """Where the server listens and what it asks of clients."""

    def __init__(self, host: str, port: int, token: str, *, generated: bool) -> None:
        self.host = host
        self.port = port
        self.token = token
        self.generated = generated
        self.loopback = is_loopback(host)

    @property
    def reads_need_token(self) -> bool:
        """Reads are open on loopback only."""
        return not self.loopback


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback interface only."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, port: int, token: str | None) -> Bind:
    """The bind ``ui`` was asked for, refused (``UsageError``) when it is not loopback and has
    no token; on loopback without a token, a fresh one."""
    if token is not None and not token.strip():
        raise UsageError("the token is empty; pass --token T (or set STALWART_UI_TOKEN)")
    if token is None and not is_loopback(host):
        raise UsageError(
            f"--host {host} is reachable from other machines: give a token with --token T (or "
            "STALWART_UI_TOKEN), or bind to 127.0.0.1"
        )
    if token is None:
        return Bind(host, port, secrets.token_urlsafe(24), generated=True)
    return Bind(host, port, token.strip(), generated=False)


def _listen(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM
        )[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def url_of(sock: socket.socket) -> str:
    """The console's URL on ``sock``."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def serve(app: Any, bind: Bind, echo: Callable[[str], None]) -> None:
    """Listen on ``bind`` (port 0: a free one), say where with ``echo``, and serve ``app``
    until SIGINT or SIGTERM."""
    import uvicorn

    from .asgi import create_app

    sock = _listen(bind.host, bind.port)
    asgi = create_app(
        app, bind.token, reads_need_token=bind.reads_need_token, loopback=bind.loopback
    )
    echo(f"console: {url_of(sock)}")
    if bind.generated:
        echo(f"token: {bind.token}")
        echo("(writes need this token; it was generated: pass --token T to choose one)")
    else:
        echo("token: the one given (--token or STALWART_UI_TOKEN)")
    config = uvicorn.Config(
        asgi, log_level="warning", access_log=False, server_header=False, lifespan="off"
    )
    server = uvicorn.Server(config)
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then raises the signal again for the
    # handlers it found: these, so that a stop is a clean exit 0 (the app is closed after).
    quiet = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, _stopped) for sig in _STOP_SIGNALS} if quiet else {}
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _stopped(_sig: int, _frame: Any) -> None:
    """The signal that stopped the server, raised again once it stopped: nothing more to do."""
