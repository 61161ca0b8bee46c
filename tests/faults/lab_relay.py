"""A TCP relay that can delay what a worker sends: the lab's latency where ``tc netem`` is
missing.

Some kernels are built without the ``netem`` queueing discipline (``tc qdisc add ... netem``
answers "Specified qdisc kind is unknown"). There the lab routes a namespace's database traffic
through one of these relays (listening on the veth's host address, forwarding to the lab's
server on 127.0.0.1) from the start, so that a delay set later applies to connections already
open, as netem would. Packet loss is still real: an ``iptables -m statistic`` rule in the
namespace drops packets, and TCP retransmits them.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time

__all__ = ["Relay"]

CHUNK = 65536


class Relay:
    """Accepts on ``(host, 0)`` and forwards each connection to ``upstream``; what the client
    sends reaches the upstream ``delay`` seconds later (0 by default)."""

    def __init__(self, host: str, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.delay = 0.0
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((host, 0))
        self._listener.listen(128)
        self.port = int(self._listener.getsockname()[1])
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name=f"relay-{self.port}", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
                server.settimeout(None)
            except OSError:
                client.close()  # the server is down: the client sees the connection closed
                continue
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, server]
            self._pump(client, server, delayed=True)
            self._pump(server, client, delayed=False)

    def _pump(self, src: socket.socket, dst: socket.socket, *, delayed: bool) -> None:
        pending: queue.Queue[tuple[float, bytes]] = queue.Queue()

        def read() -> None:
            try:
                while data := src.recv(CHUNK):
                    if delayed and self.delay > 0:
                        pending.put((time.monotonic() + self.delay, data))
                    else:
                        pending.put((0.0, data))
            except OSError:
                pass
            pending.put((0.0, b""))

        def write() -> None:
            try:
                while True:
                    due, data = pending.get()
                    if not data:
                        break
                    wait = due - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                    dst.sendall(data)
            except OSError:
                pass
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

        threading.Thread(target=read, daemon=True).start()
        threading.Thread(target=write, daemon=True).start()

    def close(self) -> None:
        """Stop accepting and cut every relayed connection."""
        self._closed.set()
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
