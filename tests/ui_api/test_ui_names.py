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
