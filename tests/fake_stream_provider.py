"""A local OpenAI-compatible server that streams chat completions (``stream=True``): every
request is answered with the same text, one ``chat.completion.chunk`` event per word, a pause
between two, then ``data: [DONE]``, as the real API streams. It runs in a thread of the test;
``requests`` counts what it answered."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["StreamingProvider", "streaming_provider"]


@dataclass
class StreamingProvider:
    """Where the server listens and what it streams."""

    base_url: str
    words: list[str]
    pause: float
    requests: int = 0

    @property
    def text(self) -> str:
        """The whole answer, as a client joins its deltas."""
        return "".join(self.words)


def _chunk(content: str | None, finish: str | None = None) -> bytes:
    event: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "fake-model",
        "choices": [
            {
                "index": 0,
                "delta": {} if content is None else {"role": "assistant", "content": content},
                "finish_reason": finish,
            }
        ],
    }
    return f"data: {json.dumps(event)}\n\n".encode()


@contextmanager
def streaming_provider(words: list[str], pause: float) -> Iterator[StreamingProvider]:
    """The server on 127.0.0.1 (a free port) until the block ends."""
    provider = StreamingProvider("", words, pause)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", "0")))
            provider.requests += 1
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("connection", "close")
            self.end_headers()
            try:
                for word in provider.words:
                    self.wfile.write(_chunk(word))
                    self.wfile.flush()
                    time.sleep(provider.pause)
                self.wfile.write(_chunk(None, "stop"))
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client died mid-stream (the test killed it)
            self.close_connection = True

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    provider.base_url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield provider
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
