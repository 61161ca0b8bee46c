"""Ids and names with control characters, through the HTTP API of a real ``stalwart ui``: the
Python API refuses them (``UsageError``), so the answer is 400 naming the character, never a
500 and never a delivered event."""

from __future__ import annotations

import httpx
import pytest
from ui_harness import Scene


def _bad_request(answer: httpx.Response) -> str:
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["type"] in ("UsageError", "BadRequest")
    return str(error["message"])


@pytest.mark.parametrize("bad", ["pi\nng", "esc\x1b[0m", "tab\tped", "del\x7f"], ids=repr)
def test_an_event_whose_name_or_dedup_key_holds_a_control_character_is_400(
    ui: Scene, bad: str
) -> None:
    wid = ui.start("inbox", workflow_id=f"w-names-{bad.encode().hex()}")
    ui.until(wid, "suspended")
    writer = ui.writer()
    for body in ({"name": bad}, {"name": "ping", "dedup_key": bad}):
        message = _bad_request(writer.post(f"/api/v1/runs/{wid}/events", json=body))
        assert f"U+{ord(next(c for c in bad if not c.isprintable())):04X}" in message
    assert _bad_request(ui.reader().get("/api/v1/runs", params={"name": bad}))
    assert ui.status(wid) == "suspended"  # nothing was delivered
    sent = writer.post(f"/api/v1/runs/{wid}/events", json={"name": "ping", "payload": 7})
    assert sent.status_code == 200 and sent.json()["delivered"] is True
    ui.until(wid, "completed")
    assert ui.app.handle(wid).result(timeout=10) == 7


RUN_ROUTES = [
    ("GET", ""),
    ("GET", "/journal"),
    ("POST", "/cancel"),
    ("POST", "/retry"),
    ("POST", "/approve"),
    ("POST", "/events"),
]


@pytest.mark.parametrize("char", ["\n", "\r", "\x00", "\x01", "\x1b", "\x7f", "\t"], ids=repr)
def test_a_path_id_with_a_control_character_is_404_naming_the_id(ui: Scene, char: str) -> None:
    """Percent-encoded in the path, after a run's id, inside it or alone: 404
    ``WorkflowNotFound`` naming the id as every unknown run is, never a generic ``NotFound``
    (a newline once kept the route from matching) nor the run without the character."""
    wid = ui.start("inbox", workflow_id=f"w-path-{char.encode().hex()}")
    ui.until(wid, "suspended")
    encoded = f"%{ord(char):02X}"
    ids = [(wid + char, wid + encoded), (f"a{char}b", f"a{encoded}b"), (char, encoded)]
    # a route's own tail then the character: that id, not the route of the run without it
    ids.append((f"{wid}/journal{char}", f"{wid}/journal{encoded}"))
    for odd, path in ids:
        for method, tail in RUN_ROUTES:
            body = {"name": "ping"} if tail == "/events" else {}
            answer = ui.writer().request(method, f"/api/v1/runs/{path}{tail}", json=body)
            assert answer.status_code == 404, (method, path, tail, answer.text)
            assert answer.json()["error"] == {
                "type": "WorkflowNotFound",
                "message": f"no run with workflow_id {odd!r}",
            }
    assert ui.status(wid) == "suspended"  # nothing reached the run without the character
