"""A local OpenAI-compatible server whose answers a test scripts: the faults a provider
returns (429 with Retry-After, 5xx, 401) and then ordinary chat completions. Every request
is counted, so a test can say how many calls reached the provider."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted answer: a status, headers and a JSON body."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None


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


class FakeProvider:
    """Answers from ``script`` in order, then ``completion("ok")`` for every further call."""

    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.calls: list[str] = []
        self._lock = threading.Lock()
        self.url = ""

    def next_reply(self, path: str) -> Reply:
        with self._lock:
            self.calls.append(path)
            return self.script.pop(0) if self.script else Reply(body=completion("ok"))


@contextmanager
def fake_provider() -> Iterator[FakeProvider]:
    """A running :class:`FakeProvider` on 127.0.0.1; its ``url`` is the API base URL."""
    provider = FakeProvider()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            self.rfile.read(length)
            reply = provider.next_reply(self.path)
            data = json.dumps(reply.body if reply.body is not None else {}).encode()
            self.send_response(reply.status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    provider.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield provider
    finally:
        server.shutdown()
        server.server_close()
