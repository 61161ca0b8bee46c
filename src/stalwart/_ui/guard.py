"""What every request and answer passes through: the Host check of a loopback bind, the body
size limit, the check that an API body is standard JSON, the security headers, and the last
resort for an unexpected error (logged, and answered in the error shape, never as plain text).

A console bound to loopback reads without a token, so a web page elsewhere must not reach it
through DNS rebinding (its own name pointed at 127.0.0.1): such requests carry that other name
in ``Host`` and are refused. Webhooks (``/api/v1/hooks/``) skip the Host check and the JSON
checks: a proxy forwards them under its own name, and their route checks the signature on the
raw body before anything else. Writes need the bearer token in a header, which no other origin
can make a browser send (no cookie is ever read, and no CORS header is ever sent).
"""

from __future__ import annotations

import json
import logging
import math
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["CSP", "MAX_BODY", "Guard"]

log = logging.getLogger("stalwart")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY = 4 * 1024 * 1024
HOOKS_PREFIX = "/api/v1/hooks/"
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


class _NotStandard(ValueError):
    """A body that only Python's parser reads as JSON (NaN, Infinity, a number past float)."""


def _no_constant(name: str) -> Any:
    raise _NotStandard(f"the body holds NaN or Infinity ({name}): send numbers JSON has")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _NotStandard(f"the number {text[:40]} overflows a float: send a smaller number")
    return value


def _bounded(text: str) -> int:
    value = int(text)
    if abs(value) > sys.float_info.max:  # JavaScript, the console's language, reads Infinity
        raise _NotStandard(f"the number {text[:40]}... overflows a float: send a smaller number")
    return value


def _body_problem(body: bytes) -> str | None:
    """Why ``body`` is not a JSON document every client reads alike (``None``: it is one): not
    UTF-8, malformed, nested past what the server parses, NaN or Infinity, or a number that
    overflows a float (``1e400``, which Python would read as infinity)."""
    try:
        json.loads(
            body.decode("utf-8"),
            parse_constant=_no_constant,
            parse_float=_finite,
            parse_int=_bounded,
        )
    except UnicodeDecodeError as exc:
        return f"the body is not UTF-8 (byte {exc.start}): send JSON encoded as UTF-8"
    except _NotStandard as exc:
        return str(exc)
    except RecursionError:
        return "the body nests too deeply to parse: send a flatter document"
    except ValueError as exc:  # JSONDecodeError, and an integer past Python's digit limit
        return f"the body is not valid JSON: {exc}"
    return None


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
    """ASGI middleware: Host check (on loopback), body checks, security headers, and the
    answer to an unexpected error."""

    def __init__(self, app: ASGIApp, *, loopback: bool) -> None:
        self.app = app
        self.loopback = loopback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False
        head = scope.get("method") == "HEAD"  # answered as GET, without the body

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            elif head and message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        try:
            await self._guarded(scope, receive, tracked)
        except Exception as exc:
            if started:  # too late for an answer: the server closes the connection
                raise
            kind = type(exc).__name__
            where = f"{scope.get('method')} {scope.get('path')}"
            log.error("ui: %s failed: %s: %s", where, kind, exc, exc_info=exc)
            await _refuse(
                tracked, 500, "InternalError", f"the server failed ({kind}); its log says why"
            )

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        # a webhook is reached through a proxy under the proxy's name, and its signature over
        # the raw body, checked first by its route, is its authentication
        hook = path.startswith(HOOKS_PREFIX)
        if self.loopback and not hook and _host_name(scope) not in LOOPBACK_NAMES:
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
        api = path.startswith("/api/") and not hook
        if api and body[0] and not _is_json(scope):
            await _refuse(
                send, 415, "UnsupportedMediaType", "send the body as Content-Type: application/json"
            )
            return
        problem = _body_problem(body[0]) if api and body[0] else None
        if problem is not None:
            await _refuse(send, 400, "BadRequest", problem)
            return
        replay = _replay(receive, *body)
        if scope.get("method") == "HEAD":
            scope = {**scope, "method": "GET"}

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
