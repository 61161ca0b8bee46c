"""``GET /api/v1/runs/{id}/stream``: a run's stream as Server-Sent Events from ``stalwart ui``
in its own process, read live with httpx while a worker in this one executes the run: every
chunk once, in order, ``event: end`` when the run ends, and ``Last-Event-ID`` resuming after
the last chunk a client saw."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from ui_harness import UiServer, ui_server

import stalwart
from sse_client import Event, events
from stalwart import testing
from store_urls import postgres_schema_url

pytestmark = pytest.mark.timeout(120)
TOKEN = "stream-token"


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'stream.db'}"
    else:
        yield from postgres_schema_url()


@pytest.fixture
def served(url: str) -> Iterator[tuple[stalwart.Stalwart, UiServer, dict[str, object]]]:
    """An app whose worker runs ``talker`` here, and ``stalwart ui`` on the same store."""
    with stalwart.Stalwart(url) as app:

        @app.step
        def say(words: list[str]) -> None:
            for word in words:
                stalwart.emit(word)

        @app.workflow(name="talker")
        def talker() -> str:
            say(["one ", "two "])
            stalwart.wait_for_event("more")
            stalwart.emit({"note": "workflow code"}, stream="notes")
            say(["three"])
            return "said"

        worker = testing.worker(app, concurrency=2)
        thread = threading.Thread(target=worker.serve, daemon=True)
        thread.start()
        try:
            with ui_server(url, "--token", TOKEN) as server:
                yield app, server, {"talker": talker}
        finally:
            worker.stop()
            thread.join(10)


def _chunks(found: list[Event]) -> list[tuple[str | None, str]]:
    return [(e.id, e.data["data"]) for e in found if e.event == "chunk"]


def test_a_reader_follows_the_run_live_and_resumes_with_last_event_id(
    served: tuple[stalwart.Stalwart, UiServer, dict[str, object]],
) -> None:
    app, server, workflows = served
    app.start(workflows["talker"], workflow_id="talk/1")
    with server.client() as client:
        _follow_and_resume(app, client)


def _follow_and_resume(app: stalwart.Stalwart, client: httpx.Client) -> None:
    path = "/api/v1/runs/talk/1/stream"
    seen: list[Event] = []
    with client.stream("GET", path) as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("text/event-stream")
        for event in events(answer):
            seen.append(event)
            if event.event == "chunk" and event.id == "1":
                app.send_event("talk/1", "more")  # the run goes on while we read
            if event.event == "end":
                break
    assert _chunks(seen) == [("0", "one "), ("1", "two "), ("2", "three")]
    assert seen[-1].event == "end"
    first = seen[0].data
    assert first["seq"] == 1 and first["attempt"] == 1 and first["stream"] == "default"
    assert dt.datetime.fromisoformat(first["at"]).utcoffset() == dt.timedelta(0)

    # a reconnecting EventSource: Last-Event-ID wins over after
    resumed = client.get(path, params={"after": -1}, headers={"Last-Event-ID": "1"})
    assert _chunks(list(events(resumed))) == [("2", "three")]
    notes = client.get(path, params={"stream": "notes"})
    noted = [(e.event, e.data) for e in events(notes)]
    assert [name for name, _data in noted] == ["chunk", "end"]
    assert noted[0][1]["data"] == {"note": "workflow code"} and noted[0][1]["seq"] is None
    assert client.get(path, params={"after": 2}).text == "event: end\ndata: {}\n\n"


def test_an_unknown_run_and_bad_offsets_are_refused(
    served: tuple[stalwart.Stalwart, UiServer, dict[str, object]],
) -> None:
    app, server, workflows = served
    with server.client() as client:
        _refusals(app, client, workflows)


def _refusals(app: stalwart.Stalwart, client: httpx.Client, workflows: dict[str, object]) -> None:
    missing = client.get("/api/v1/runs/nope/stream")
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "WorkflowNotFound"
    bad = client.get("/api/v1/runs/nope/stream", params={"after": -2})
    assert bad.status_code == 400
    app.start(workflows["talker"], workflow_id="talk/3")
    wrong = client.get("/api/v1/runs/talk/3/stream", headers={"Last-Event-ID": "x"})
    assert wrong.status_code == 400
    assert "Last-Event-ID" in wrong.json()["error"]["message"]
    paths = client.get("/api/v1/openapi.json").json()["paths"]
    assert (
        "text/event-stream"
        in paths["/api/v1/runs/{workflow_id}/stream"]["get"]["responses"]["200"]["content"]
    )
