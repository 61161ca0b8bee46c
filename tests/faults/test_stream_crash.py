"""A run's stream across a crash: a step streams a chat completion through the real ``openai``
SDK from a local server and emits each text delta; its worker is SIGKILLed mid-stream; the
recovery streams the answer again. A reader in another process (this one) follows the stream
over HTTP from ``stalwart ui`` (a third process), is cut off, and resumes with
``Last-Event-ID``. It ends with exactly the final text (``stream_text``: the killed attempt's
chunks dropped), no chunk twice and none missing."""

from __future__ import annotations

import datetime as dt
import os
import signal
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from fault_harness import Harness

import stalwart
from stalwart import StreamChunk, stream_text

sys.path.insert(0, str(Path(__file__).parents[1] / "ui_api"))
from ui_harness import ui_server

from fake_stream_provider import streaming_provider
from sse_client import Event, events

pytestmark = pytest.mark.timeout(180)

AGENT = Path(__file__).with_name("stream_agent.py")
WORDS = [f"w{i} " for i in range(60)]
PAUSE = 0.02  # between two deltas: the stream lasts over a second
KILL_AFTER = 15  # chunks written before the worker is killed
CUT_AFTER = 8  # chunks the reader sees before its connection is cut


class Reader(threading.Thread):
    """Follows the run's stream over HTTP; drops its connection once after ``CUT_AFTER``
    chunks and reconnects with ``Last-Event-ID``, as a browser's EventSource does."""

    def __init__(self, base: str, workflow_id: str) -> None:
        super().__init__(daemon=True)
        self.path = f"{base}api/v1/runs/{workflow_id}/stream"
        self.chunks: list[Event] = []
        self.reconnects = 0
        self.ended = False
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._follow()
        except BaseException as exc:  # the test re-raises it
            self.error = exc

    def _follow(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            last = self.chunks[-1].id if self.chunks else None
            headers = {} if last is None else {"Last-Event-ID": last}
            with (
                httpx.Client(timeout=30) as client,
                client.stream("GET", self.path, headers=headers) as answer,
            ):
                if answer.status_code == 404:  # the run is not created yet
                    time.sleep(0.02)
                    continue
                assert answer.status_code == 200, answer.read()
                for event in events(answer):
                    if event.event == "end":
                        self.ended = True
                        return
                    self.chunks.append(event)
                    if len(self.chunks) == CUT_AFTER and self.reconnects == 0:
                        break  # cut off: the connection closes with the block
            self.reconnects += 1


def _chunk(event: Event) -> StreamChunk:
    data = event.data
    at = dt.datetime.fromisoformat(data["at"])
    return StreamChunk(
        data["offset"], data["stream"], data["seq"], data["attempt"], data["data"], at
    )


def test_a_stream_survives_its_worker_killed_mid_stream(agent: Harness) -> None:
    wid = "stream/1"
    with (
        stalwart.Stalwart(agent.url) as app,
        streaming_provider(WORDS, PAUSE) as provider,
        ui_server(agent.url, "--token", "stream-token") as server,
    ):
        reader = Reader(server.base, wid)
        reader.start()
        command = [sys.executable, str(AGENT), agent.url, provider.base_url, wid]
        started = time.monotonic()
        first = agent.spawn_program(command)
        deadline = time.monotonic() + 60
        while _written(app, wid) < KILL_AFTER:
            assert first.poll() is None and time.monotonic() < deadline, "no stream to kill"
            time.sleep(0.005)
        os.kill(first.pid, signal.SIGKILL)
        assert agent.finish(first, started).killed
        at_kill = _written(app, wid)
        assert KILL_AFTER <= at_kill < len(WORDS) + 1  # killed mid-stream

        recovered = agent.finish(agent.spawn_program(command), time.monotonic())
        assert recovered.returncode == 0, recovered.describe()
        reader.join(60)
        stored = list(app.stream(wid, follow=False))

    assert reader.error is None, reader.error
    assert reader.ended and reader.reconnects == 1
    final = recovered.outcome["result"]
    assert final == provider.text and provider.requests == 2
    offsets = [int(event.id or "-1") for event in reader.chunks]
    assert offsets == list(range(len(stored)))  # none twice, none missing, in order
    chunks = [_chunk(event) for event in reader.chunks]
    assert chunks == stored
    assert stream_text(chunks) == "> " + final
    assert [c.data for c in chunks if c.seq is None] == ["> "]  # workflow code: once
    killed = [c for c in chunks if c.seq is not None and c.attempt == 1]
    assert 0 < len(killed) < len(WORDS)
    assert "".join(c.data for c in chunks if c.attempt == 2) == final


def _written(app: stalwart.Stalwart, workflow_id: str) -> int:
    try:
        return len(list(app.stream(workflow_id, follow=False)))
    except stalwart.WorkflowNotFound:
        return 0
