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


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            found: bytes = value
            return found
    return None


def _content_length(scope: Scope) -> int | None:
    value = _header(scope, b"content-length")
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def _is_json(scope: Scope) -> bool:
    media = (_header(scope, b"content-type") or b"").partition(b";")[0].strip().lower()
    return media == b"application/json" or media.endswith(b"+json")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _non_standard(body: bytes) -> bool:
    """Whether ``body`` is JSON only to Python's parser (it holds NaN or Infinity, which no
    other client reads back); malformed JSON is left to the route, which says what it wanted."""
    try:
        json.loads(body, parse_constant=_no_constant)
    except ValueError as exc:
        return "is not JSON" in str(exc)
    return False


async def _refuse(send: Send, status: int, type_: str, message: str) -> None:
    # serialised as every other answer is (Starlette's JSONResponse)
    error = {"error": {"type": type_, "message": message}}
    body = json.dumps(error, ensure_ascii=False, separators=(",", ":")).encode()
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
        body = await self._body(receive)
        if body is None:
            await _refuse(send, 413, "PayloadTooLarge", f"a body is at most {MAX_BODY} bytes")
            return
        api = scope.get("path", "").startswith("/api/")
        if api and body[0] and not _is_json(scope):
            await _refuse(
                send, 415, "UnsupportedMediaType", "send the body as Content-Type: application/json"
            )
            return
        if api and body[0] and _non_standard(body[0]):
            await _refuse(
                send, 400, "BadRequest", "the body holds NaN or Infinity: send numbers JSON has"
            )
            return
        replay = _replay(receive, *body)
        head = scope.get("method") == "HEAD"
        if head:  # answered as GET, without the body
            scope = {**scope, "method": "GET"}

        async def send_with_headers(message: Message) -> None:
            if head and message["type"] == "http.response.body":
                message = {**message, "body": b""}
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
    async def _body(receive: Receive) -> tuple[bytes, Message | None] | None:
        """The whole body, and the message that came instead of more of it (a disconnect);
        ``None`` when the body is too large."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks), message
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > MAX_BODY:
                return None
            if not message.get("more_body", False):
                return b"".join(chunks), None


def _replay(receive: Receive, body: bytes, instead: Message | None) -> Receive:
    """``receive`` that first gives back what :meth:`Guard._body` read."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        if instead is not None:
            return instead
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
