"""A local OpenAI-compatible server whose answers a test scripts: the faults a provider
returns (429 with Retry-After, 5xx, 400/401, a reset connection, a slow answer, a malformed
body) and then ordinary chat completions. Every request is counted, per run too, so a test can
say how many calls reached the provider.

Two ways to fault:

* ``provider.script``: replies taken in order, one per request (then ``completion("ok")``);
  :func:`reset`, :func:`slow` and :func:`malformed` build the unusual ones;
* ``provider.throttle(seconds)``: a window during which every request gets 429 with
  ``Retry-After`` = the seconds left in the window, rounded up (and ``retry-after-ms`` with
  ``millis=True``), as a provider's rate limiter answers. The script is not consumed meanwhile.

A request names its run with the ``x-run-id`` header, or else the JSON body's ``user`` field;
:meth:`FakeProvider.calls_of` and :meth:`FakeProvider.per_run` count by it.
``FakeProvider.received`` keeps every request's headers (names lowercased), in order. Times are
``time.monotonic()`` of this process (the server runs in a thread of the test or the bench).
"""

from __future__ import annotations

import json
import math
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "Call",
    "FakeProvider",
    "Reply",
    "Window",
    "completion",
    "error",
    "fake_provider",
    "malformed",
    "reset",
    "slow",
]

RUN_HEADER = "x-run-id"


@dataclass
class Reply:
    """One scripted answer: a status, headers and a JSON body; or ``raw`` bytes sent as they
    are (with ``content-type: application/json``); after ``delay`` seconds; or, with
    ``reset``, no answer at all: the connection is reset (TCP RST) once the request is read."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    raw: bytes | None = None
    delay: float = 0.0
    reset: bool = False


def completion(text: str) -> dict[str, Any]:
    """A minimal chat completion the openai SDK parses."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "fake-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }


def error(status: int, message: str) -> dict[str, Any]:
    """An error body as the provider sends it."""
    return {"error": {"message": message, "type": "fake_error", "code": str(status)}}


def reset() -> Reply:
    """The connection is reset without an answer."""
    return Reply(reset=True)


def slow(seconds: float, reply: Reply | None = None) -> Reply:
    """``reply`` (by default ``completion("ok")``) after ``seconds``."""
    base = reply or Reply(body=completion("ok"))
    return Reply(base.status, dict(base.headers), base.body, base.raw, seconds, base.reset)


def malformed(text: str = '{"id": "chatcmpl-1", "choices": [') -> Reply:
    """A 200 whose JSON body is cut off."""
    return Reply(raw=text.encode())


@dataclass(frozen=True)
class Window:
    """A throttle window, from ``start`` to ``end`` (monotonic seconds)."""

    start: float
    end: float
    millis: bool = False

    def __contains__(self, moment: float) -> bool:
        return self.start <= moment < self.end

    def reply(self, now: float) -> Reply:
        """The 429 a request at ``now`` (inside the window) gets."""
        left = self.end - now
        headers = {"Retry-After": str(math.ceil(left))}
        if self.millis:
            headers["retry-after-ms"] = str(math.ceil(left * 1000))
        return Reply(429, headers, error(429, "rate limit reached, try again later"))


@dataclass(frozen=True)
class Call:
    """One request as it reached the server: when, for which run, and how it was answered
    (``status`` ``None`` for a reset)."""

    path: str
    run: str | None
    at: float
    status: int | None
    throttled: bool


class FakeProvider:
    """Answers from ``script`` in order, then ``completion("ok")`` for every further call;
    inside a :meth:`throttle` window every request gets 429 instead."""

    def __init__(self) -> None:
        self.latency = 0.0  # seconds before every ordinary answer (not the script's, nor a 429)
        self.script: list[Reply] = []
        self.calls: list[Call] = []
        self.windows: list[Window] = []
        self.received: list[dict[str, str]] = []  # each request's headers, names lowercased
        self.url = ""
        self.closing = threading.Event()
        self._lock = threading.Lock()

    def throttle(self, seconds: float, *, after: float = 0.0, millis: bool = False) -> Window:
        """Throttle every request from ``after`` seconds from now, for ``seconds``."""
        start = time.monotonic() + after
        window = Window(start, start + seconds, millis)
        with self._lock:
            self.windows.append(window)
        return window

    def next_reply(self, path: str, run: str | None = None) -> Reply:
        """The reply to a request arriving now; the request is counted."""
        now = time.monotonic()
        with self._lock:
            window = next((w for w in self.windows if now in w), None)
            if window is not None:
                reply = window.reply(now)
            elif self.script:
                reply = self.script.pop(0)
            else:
                reply = Reply(body=completion("ok"), delay=self.latency)
            status = None if reply.reset else reply.status
            self.calls.append(Call(path, run, now, status, window is not None))
            return reply

    def calls_of(self, run: str) -> list[Call]:
        """The requests that named ``run``, in order."""
        with self._lock:
            return [c for c in self.calls if c.run == run]

    def per_run(self) -> Counter[str | None]:
        """How many requests each run made (``None``: requests that named no run)."""
        with self._lock:
            return Counter(c.run for c in self.calls)


def _run_of(headers: Any, data: bytes) -> str | None:
    named = headers.get(RUN_HEADER)
    if named:
        return str(named)
    try:
        body = json.loads(data)
    except ValueError:
        return None
    user = body.get("user") if isinstance(body, dict) else None
    return user if isinstance(user, str) else None


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # a fleet's agents connect at once; the default 5 drops SYNs
    daemon_threads = True


@contextmanager
def fake_provider() -> Iterator[FakeProvider]:
    """A running :class:`FakeProvider` on 127.0.0.1; its ``url`` is the API base URL."""
    provider = FakeProvider()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            data = self.rfile.read(length)
            with provider._lock:
                provider.received.append({k.lower(): v for k, v in self.headers.items()})
            reply = provider.next_reply(self.path, _run_of(self.headers, data))
            if reply.delay and provider.closing.wait(reply.delay):
                reply = Reply(reset=True)  # shutting down: don't keep the server waiting
            if reply.reset:
                self._reset()
                return
            if reply.raw is not None:
                payload = reply.raw
            else:
                payload = json.dumps(reply.body if reply.body is not None else {}).encode()
            try:
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)
            except OSError:
                self.close_connection = True  # the client gave up waiting (a timeout)

        do_GET = do_POST

        def _reset(self) -> None:
            """Close with SO_LINGER 0: the kernel sends RST, not FIN."""
            self.close_connection = True
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = _Server(("127.0.0.1", 0), Handler)
    provider.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield provider
    finally:
        provider.closing.set()
        server.shutdown()
        server.server_close()
