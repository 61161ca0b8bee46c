"""Store URLs for tests: a PostgreSQL schema of each test's own, when a server is configured."""

from __future__ import annotations

import os
import queue
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

POSTGRES_URL = os.environ.get("STALWART_TEST_POSTGRES_URL")
NO_POSTGRES = "set STALWART_TEST_POSTGRES_URL to run the PostgreSQL backend"
_DROP_ATTEMPTS = 5  # a server restarting (the exclusive restart test) refuses for a moment


class _Dropper:
    """Drops the schemas the tests are done with, one at a time, in a thread of this process:
    a test's teardown does not wait for the server to drop some thirty tables (0.1 to 0.5 s a
    schema), and :meth:`finish` waits for the last ones before the process ends."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def drop(self, schema: str) -> None:
        """Drop ``schema`` soon, in the background."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="schema-dropper")
                self._thread.daemon = True
                self._thread.start()
        self._queue.put(schema)

    def finish(self) -> None:
        """Wait until every schema handed to :meth:`drop` is dropped (or given up on)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join()

    def _run(self) -> None:
        import psycopg

        assert POSTGRES_URL is not None
        while (schema := self._queue.get()) is not None:
            for attempt in range(_DROP_ATTEMPTS):
                try:
                    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
                    break
                except psycopg.Error:
                    time.sleep(0.5 * (attempt + 1))


dropper = _Dropper()


def postgres_schema_url() -> Iterator[str]:
    """A URL naming a fresh schema of the test database; the schema is dropped afterwards (in
    the background: :data:`dropper`)."""
    if not POSTGRES_URL:
        pytest.skip(NO_POSTGRES)
    schema = f"t_{uuid.uuid4().hex[:16]}"
    separator = "&" if "?" in POSTGRES_URL else "?"
    yield f"{POSTGRES_URL}{separator}schema={schema}"
    dropper.drop(schema)
