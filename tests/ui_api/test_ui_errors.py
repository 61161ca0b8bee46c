"""Client mistakes through the HTTP API: every one answers ``{"error": {"type", "message"}}``
with 400, 404, 405, 409 or 415, never 422 and never 500."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from ui_harness import Scene


def _error(answer: httpx.Response, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert set(body) == {"error"} and set(body["error"]) == {"type", "message"}
    assert body["error"]["message"]
    error: dict[str, Any] = body["error"]
    return error


@pytest.mark.parametrize(
    "workflow_id", ["nope", "a b/ü?#%", "x" * 3000, "\x00", "a\x1bb", "..", "a%2Fb"], ids=repr
)
def test_an_unknown_run_is_404_naming_it(ui: Scene, workflow_id: str) -> None:
    path = "/api/v1/runs/" + quote(workflow_id, safe="/").replace(".", "%2E")
    for answer in (
        ui.reader().get(path),
        ui.reader().get(f"{path}/journal"),
        ui.writer().post(f"{path}/cancel"),
        ui.writer().post(f"{path}/fork", json={"from_seq": 1}),
        ui.writer().post(f"{path}/events", json={"name": "ping"}),
    ):
        error = _error(answer, 404)
        assert error["type"] == "WorkflowNotFound"
        assert "no run with workflow_id" in error["message"]
    if workflow_id == "nope":
        assert error["message"] == "no run with workflow_id 'nope'"  # the id, not the store


def test_refused_actions_are_409_with_the_message_of_the_python_api(ui: Scene) -> None:
    writer = ui.writer()
    cancel = _error(writer.post("/api/v1/runs/paid/cancel"), 409)
    assert cancel == {
        "type": "InvalidOperation",
        "message": "run 'paid' is completed; there is nothing to cancel",
    }
    approve = _error(writer.post("/api/v1/runs/paid/approve", json={}), 409)
    assert approve["message"] == "run 'paid' has no pending approval request"
    retry = _error(writer.post("/api/v1/runs/paid/retry"), 409)
    assert "only failed and needs_attention runs can be retried" in retry["message"]
    resolve = _error(writer.post("/api/v1/runs/paid/resolve", json={"seq": 1, "rerun": True}), 409)
    assert resolve["message"] == "run 'paid' has no in-doubt step to resolve"
    past = _error(writer.post("/api/v1/runs/paid/fork", json={"from_seq": 99}), 409)
    assert past["type"] == "InvalidOperation" and "from_seq=99" in past["message"]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"limit": 0}, "limit='0': give a whole number from 1 to 1000"),
        ({"limit": 10**12}, "limit='1000000000000': give a whole number from 1 to 1000"),
        ({"limit": "abc"}, "limit='abc': give a whole number from 1 to 1000"),
        ({"limit": "2.5"}, "limit='2.5': give a whole number from 1 to 1000"),
        (
            {"status": "bogus"},
            "status='bogus': give one of pending, running, suspended, completed, failed, "
            "cancelled, needs_attention",
        ),
        ({"before": "not a cursor"}, "before='not a cursor': pass next_before of a page"),
        ({"before": "WyJ4IiwxXQ"}, "before="),  # a cursor of the wrong shape
        ({"since": "yesterday"}, "since='yesterday': pass an ISO 8601 time"),
        ({"since": "x" * 101}, "since='xxxxxxxxxx...': give at most 100 characters"),
        ({"name": ""}, "name='': give at least 1 character"),
        ({"queue": ""}, "queue='': give at least 1 character"),
        ({"name": "a\x00b"}, "name='a\\x00b': give a value without a NUL character"),
        ({"pending": "maybe"}, "pending='maybe': give true or false"),
    ],
    ids=repr,
)
def test_a_malformed_parameter_is_400_saying_what_to_pass(
    ui: Scene, params: dict[str, Any], message: str
) -> None:
    path = "/api/v1/approvals" if "pending" in params else "/api/v1/runs"
    error = _error(ui.reader().get(path, params=params), 400)
    assert error["type"] == "BadRequest" and error["message"].startswith(message), error
    assert "Input should" not in error["message"] and "query." not in error["message"]


@pytest.mark.parametrize("after", ["-1", "garbage", str(2**63)])
def test_a_malformed_journal_cursor_says_to_give_an_entry_id(ui: Scene, after: str) -> None:
    error = _error(ui.reader().get("/api/v1/runs/x/journal", params={"after": after}), 400)
    assert error["message"] == (
        f"after={after!r}: give the id of a journal entry (a whole number from 0)"
    )


def test_a_malformed_journal_limit_names_its_range(ui: Scene) -> None:
    error = _error(ui.reader().get("/api/v1/runs/x/journal", params={"limit": "0"}), 400)
    assert error["message"] == "limit='0': give a whole number from 1 to 1000"


@pytest.mark.parametrize(
    ("action", "body"),
    [
        ("fork", b"{not json"),
        ("fork", b"[1, 2]"),
        ("fork", b'"from_seq"'),
        ("fork", b"{}"),
        ("fork", b'{"from_seq": -1}'),
        ("fork", b'{"from_seq": 0}'),
        ("fork", b'{"from_seq": 1e400}'),
        ("fork", b'{"from_seq": 99999999999999999999999}'),
        ("fork", b'{"from_seq": 1, "from": 2}'),
        ("fork", b'{"from_seq": 1, "new_id": ""}'),
        ("resolve", b'{"seq": 1}'),
        ("resolve", b'{"seq": 1, "result": null, "rerun": true}'),
        ("resolve", b'{"seq": "one", "rerun": true}'),
        ("events", b'{"name": ""}'),
        ("events", b'{"payload": 1}'),
        ("events", b'{"name": "ping\\u0000"}'),
        ("approve", b'{"reason": 5}'),
        ("approve", b'{"reason": "\\ud800"}'),
        ("cancel", b'{"force": true}'),
        ("retry", b"[]"),
    ],
)
def test_a_malformed_body_is_400(ui: Scene, action: str, body: bytes) -> None:
    answer = ui.writer().post(
        f"/api/v1/runs/paid/{action}", content=body, headers={"Content-Type": "application/json"}
    )
    assert _error(answer, 400)["type"] in ("BadRequest", "SerializationError")


def test_a_body_not_sent_as_json_is_415_and_a_huge_one_413(ui: Scene) -> None:
    writer = ui.writer()
    form = writer.post("/api/v1/runs/paid/fork", content=b'{"from_seq": 2}')
    assert _error(form, 415)["type"] == "UnsupportedMediaType"
    text = writer.post(
        "/api/v1/runs/paid/fork", content=b"{}", headers={"Content-Type": "text/plain"}
    )
    assert _error(text, 415)["message"] == "send the body as Content-Type: application/json"
    huge = writer.post("/api/v1/runs/paid/events", json={"name": "x", "payload": "x" * 5_000_000})
    assert _error(huge, 413)["type"] == "PayloadTooLarge"


def test_unknown_routes_and_methods_answer_the_error_shape(ui: Scene) -> None:
    assert _error(ui.reader().get("/api/v1/nothing"), 404)["type"] == "NotFound"
    assert _error(ui.reader().get("/api/v2/runs"), 404)["type"] == "NotFound"
    assert _error(ui.reader().delete("/api/v1/runs"), 405)["type"] == "MethodNotAllowed"
    assert _error(ui.writer().put("/api/v1/runs/paid/cancel"), 405)["type"] == "MethodNotAllowed"
    assert ui.reader().get("/console/nothing.js").status_code == 404


def test_an_event_payload_json_cannot_hold_is_refused_before_the_store(ui: Scene) -> None:
    answer = ui.writer().post(
        "/api/v1/runs/paid/events",
        content=b'{"name": "ping", "payload": {"s": "\\ud800"}}',
        headers={"Content-Type": "application/json"},
    )
    assert _error(answer, 400)["type"] == "SerializationError"


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
def test_a_body_with_a_number_json_has_not_is_400(ui: Scene, constant: bytes) -> None:
    answer = ui.writer().post(
        "/api/v1/runs/paid/events",
        content=b'{"name": "ping", "payload": {"score": ' + constant + b"}}",
        headers={"Content-Type": "application/json"},
    )
    assert "NaN or Infinity" in _error(answer, 400)["message"]


def test_refusals_of_the_guard_are_serialised_as_every_other_answer(ui: Scene) -> None:
    refused = ui.writer().post("/api/v1/runs/paid/fork", content=b"{}")  # no content type
    routed = ui.reader().get("/api/v1/runs/nope")
    for answer in (refused, routed):
        assert answer.content == json.dumps(answer.json(), separators=(",", ":")).encode()


def test_head_answers_like_get_without_a_body(ui: Scene) -> None:
    for path in ("/api/v1/runs", "/api/v1/health", "/"):
        head, get = ui.reader().head(path), ui.reader().get(path)
        assert head.status_code == get.status_code == 200, path
        assert head.content == b""
        assert head.headers["content-type"] == get.headers["content-type"]


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/api/v1/stats", {"windw": "1h"}),
        ("/api/v1/runs", {"stauts": "failed"}),
        ("/api/v1/runs/paid/journal", {"aftr": "1"}),
        ("/api/v1/breakers", {"x": "1"}),
    ],
)
def test_an_unknown_query_name_is_refused_not_ignored(
    ui: Scene, path: str, params: dict[str, str]
) -> None:
    error = _error(ui.reader().get(path, params=params), 400)
    assert error["type"] == "BadRequest"
    assert f"unknown query parameter {next(iter(params))!r}" in error["message"]
