"""Bodies the server cannot take, and faults of its own, through a live ``stalwart ui``: a
number JSON readers disagree on (``1e400``), a body nested past what can be parsed, bytes that
are not UTF-8 all answer 400 in the error shape, on every route that takes a body, and nothing
reaches the store; an unexpected exception answers a logged 500 in the same shape; ``HEAD``
answers every read as ``GET`` does, without the body."""

from __future__ import annotations

import signal
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest
from ui_harness import Scene, ui_server

import stalwart

JSON = {"Content-Type": "application/json"}
ROUTES = ["events", "approve", "reject", "resolve", "fork", "retry", "cancel"]


def _refused(answer: httpx.Response, status: int = 400) -> str:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/json"
    body = answer.json()
    assert set(body) == {"error"} and set(body["error"]) == {"type", "message"}
    message: str = body["error"]["message"]
    assert message and "\n" not in message
    return message


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize(
    "number",
    [b"1e400", b"-1e400", b"1E+999", b"123456789e999", b"1" + b"0" * 400],
    ids=lambda n: n.decode()[:12],
)
def test_a_number_that_overflows_a_float_is_400_on_every_route(
    ui: Scene, route: str, number: bytes
) -> None:
    fields = {
        "events": b'{"name": "ping", "payload": {"score": %s}}',
        "approve": b'{"reason": "ok", "extra": [%s]}',
        "reject": b'{"reason": "no", "extra": [%s]}',
        "resolve": b'{"seq": 1, "result": {"amount": %s}}',
        "fork": b'{"from_seq": 1, "new_id": "x", "extra": %s}',
        "retry": b'{"extra": %s}',
        "cancel": b'{"extra": %s}',
    }
    wid = f"overflow-{route}"
    if wid not in [r.workflow_id for r in ui.app.list_workflows(name="inbox", limit=1000)]:
        ui.start("inbox", workflow_id=wid)
        ui.until(wid, "suspended")
    before = ui.app.journal(wid)
    answer = ui.writer().post(
        f"/api/v1/runs/{wid}/{route}", content=fields[route] % number, headers=JSON
    )
    assert "overflows a float" in _refused(answer)
    assert ui.app.journal(wid) == before and ui.status(wid) == "suspended"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"[" * 100_000, "nests too deeply"),
        (b'{"name": "ping", "payload": ' + b"[" * 5_000 + b"]" * 5_000 + b"}", "nests too deeply"),
        (b'{"name": "\xff\xfe"}', "not UTF-8"),
        (b'{"name": "ping", "payload": "\xc3"}', "not UTF-8"),
        ('{"name": "ping"}'.encode("utf-16"), "not UTF-8"),
        (b'\xef\xbb\xbf{"name": "ping"}', "not valid JSON"),  # a byte order mark
        (b'{"name": "ping", "payload": 1' + b"0" * 5_000 + b"}", "not valid JSON"),
        (b'{"name": "ping", "payload": [1, 2', "not valid JSON"),
        (b'{"name": "ping"} {"name": "pong"}', "not valid JSON"),
    ],
    ids=["100k-brackets", "deep-payload", "bad-utf8", "cut-utf8", "utf16", "bom", "huge-int",
         "cut", "two-documents"],
)  # fmt: skip
def test_a_body_the_server_cannot_parse_is_400_in_the_error_shape(
    ui: Scene, body: bytes, says: str
) -> None:
    answer = ui.writer().post("/api/v1/runs/paid/events", content=body, headers=JSON)
    assert says in _refused(answer)


def test_a_deep_body_is_refused_on_a_read_too_and_the_server_keeps_answering(ui: Scene) -> None:
    reader = ui.reader()
    answer = reader.request("GET", "/api/v1/runs", content=b"[" * 100_000, headers=JSON)
    assert "nests too deeply" in _refused(answer)
    assert reader.get("/api/v1/health").json()["ok"] is True


def test_head_answers_every_read_like_get_without_a_body(ui: Scene) -> None:
    reader = ui.reader()
    document = reader.get("/api/v1/openapi.json").json()
    paths = ["/", "/api/v1/openapi.json", "/console/app.js", "/api/v1/runs/nope"]
    for path, operations in document["paths"].items():
        if "get" in operations:
            paths.append(path.replace("{workflow_id}", "paid"))
    for path in paths:
        head, get = reader.head(path), reader.get(path)
        assert head.status_code == get.status_code, path
        assert get.status_code in (200, 404), path
        assert head.content == b"", path
        assert head.headers["content-type"] == get.headers["content-type"], path


# -- a fault of the server ----------------------------------------------------------------------


def test_an_unexpected_exception_is_a_logged_500_in_the_error_shape(tmp_path: Path) -> None:
    """A run row whose time no datetime holds (a damaged store) makes the read raise
    ``OverflowError``, which no handler knows: still JSON, still logged, and the server goes
    on answering."""
    db = tmp_path / "damaged.db"
    url = f"sqlite:///{db}"
    with stalwart.Stalwart(url) as app:

        @app.workflow(name="idle")
        def idle() -> None: ...

        app.start(idle, workflow_id="damaged")
        app.start(idle, workflow_id="fine")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET updated_at = 1e300 WHERE workflow_id = 'damaged'")
    with ui_server(url, "--token", "t") as server, server.client("t") as client:
        answers: list[Any] = [
            client.get("/api/v1/runs/damaged"),
            client.get("/api/v1/runs"),
            client.get("/api/v1/runs", params={"status": "pending"}),
        ]
        for answer in answers:
            message = _refused(answer, 500)
            assert answer.json()["error"]["type"] == "InternalError"
            assert "OverflowError" in message and "log" in message
            assert answer.headers["x-content-type-options"] == "nosniff"
        head = client.head("/api/v1/runs/damaged")
        assert head.status_code == 500 and head.content == b""
        assert client.get("/api/v1/runs/fine").status_code == 200  # it goes on answering
        server.process.send_signal(signal.SIGINT)
        server.process.wait(15)
        assert server.process.stderr is not None
        log = server.process.stderr.read()
    # each failed request is logged once, with its traceback (not again by uvicorn)
    assert log.count("ui: GET /api/v1/runs/damaged failed: OverflowError") == 1
    assert log.count("Traceback") == len(answers) + 1, log
    assert "Exception in ASGI application" not in log
    assert "Internal Server Error" not in log
