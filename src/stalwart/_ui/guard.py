"""What every request and answer passes through: the Host check of a loopback bind, the body
size limit, and the security headers.

A console bound to loopback reads without a token, so a web page elsewhere must not reach it
through DNS rebinding (its own name pointed at 127.0.0.1): such requests carry that other name
in ``Host`` and are refused. Writes need the bearer token in a header, which no other origin
can make a browser send (no cookie is ever read, and no CORS header is ever sent).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["CSP", "MAX_BODY", "Guard"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY = 4 * 1024 * 1024
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)


def _host_name(scope: Scope) -> str:
    for key, value in scope.get("headers", ()):
        if key == b"host":
            host: str = value.decode("latin-1").strip().lower()
            if host.startswith("["):
                return host.partition("]")[0] + "]"
            return host.rpartition(":")[0] if host.count(":") == 1 else host
    return ""


def _content_length(scope: Scope) -> int | None:
    for key, value in scope.get("headers", ()):
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _refuse(send: Send, status: int, type_: str, message: str) -> None:
    body = json.dumps({"error": {"type": type_, "message": message}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"x-content-type-options", b"nosniff"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class Guard:
    """ASGI middleware: Host check (on loopback), body limit, security headers."""

    def __init__(self, app: ASGIApp, *, loopback: bool) -> None:
        self.app = app
        self.loopback = loopback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.loopback and _host_name(scope) not in LOOPBACK_NAMES:
            await _refuse(send, 400, "BadRequest", "this console answers only on a loopback name")
            return
        length = _content_length(scope)
        if length is not None and length > MAX_BODY:
            await _refuse(send, 413, "PayloadTooLarge", f"a body is at most {MAX_BODY} bytes")
            return
        replay = await self._buffered(receive)
        if replay is None:
            await _refuse(send, 413, "PayloadTooLarge", f"a body is at most {MAX_BODY} bytes")
            return
        api = scope.get("path", "").startswith("/api/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                headers.append((b"x-content-type-options", b"nosniff"))
                headers.append((b"referrer-policy", b"no-referrer"))
                content_type = dict(headers).get(b"content-type", b"")
                if content_type.startswith(b"text/html"):
                    headers.append((b"content-security-policy", CSP.encode()))
                    headers.append((b"x-frame-options", b"DENY"))
                if api:
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, replay, send_with_headers)

    @staticmethod
    async def _buffered(receive: Receive) -> Receive | None:
        """``receive`` replaying the whole body, read here; ``None`` when it is too large."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                first: Message | None = message
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > MAX_BODY:
                return None
            if not message.get("more_body", False):
                first = None
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                if first is not None:
                    return first
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        return replay
