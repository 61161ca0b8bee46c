"""``GET /runs/{id}/journal?after=ID&limit=N``, the run page's poll and a script's pages: only
the entries after the last one a client has (at most ``limit``, ``more`` saying whether others
follow), their ``total`` telling it whether it holds every entry below (a row committed late
under a lower id, which only PostgreSQL can do), bad values refused with 400."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from ui_harness import Scene

import stalwart
from stalwart._ui import create_app
from store_urls import POSTGRES_URL, postgres_schema_url


def test_after_answers_only_the_entries_after_it(ui: Scene) -> None:
    wid = ui.start("inbox", workflow_id="after/1")
    ui.until(wid, "suspended")
    client = ui.reader()
    first = client.get(f"/api/v1/runs/{wid}/journal").json()
    ids = [e["id"] for e in first["entries"]]
    assert ids == sorted(set(ids)) and first["total"] == len(ids) >= 2
    path = f"/api/v1/runs/{wid}/journal"
    assert client.get(path, params={"after": 0}).json() == first
    tail = client.get(path, params={"after": ids[0]}).json()
    assert tail == {
        "workflow_id": wid,
        "entries": first["entries"][1:],
        "more": False,
        "total": len(ids),
    }
    none = client.get(path, params={"after": ids[-1]}).json()
    assert none == {"workflow_id": wid, "entries": [], "more": False, "total": len(ids)}

    ui.writer().post(f"{path.removesuffix('/journal')}/events", json={"name": "ping"})
    ui.until(wid, "completed")
    new = client.get(path, params={"after": ids[-1]}).json()
    whole = client.get(path).json()
    assert new["entries"] and all(e["id"] > ids[-1] for e in new["entries"])
    assert first["entries"] + new["entries"] == whole["entries"]  # as a full reload shows it
    assert new["total"] == whole["total"] == len(whole["entries"])
    assert [e["kind"] for e in new["entries"]][-1] == "run"  # its end
    beyond = client.get(path, params={"after": 2**63 - 1}).json()
    assert beyond == {"workflow_id": wid, "entries": [], "more": False, "total": whole["total"]}


def test_limit_pages_the_journal_and_more_says_whether_others_follow(ui: Scene) -> None:
    wid = ui.start("inbox", workflow_id="after/pages")
    ui.until(wid, "suspended")
    client = ui.reader()
    path = f"/api/v1/runs/{wid}/journal"
    whole = client.get(path).json()
    assert whole["more"] is False and len(whole["entries"]) == whole["total"] >= 2
    pages, after = [], 0
    while True:
        page = client.get(path, params={"after": after, "limit": 1}).json()
        assert len(page["entries"]) <= 1 and page["total"] == whole["total"]
        pages.append(page)
        if not page["more"]:
            break
        after = page["entries"][-1]["id"]
    assert [e for p in pages for e in p["entries"]] == whole["entries"]
    assert [p["more"] for p in pages] == [True] * (len(pages) - 1) + [False]
    first = client.get(path, params={"limit": 1}).json()
    assert first["entries"] == whole["entries"][:1] and first["more"] is True
    every = client.get(path, params={"limit": 1000}).json()
    assert every == whole


@pytest.mark.parametrize("limit", ["0", "-1", "x", "1.5", "", "1001"])
def test_a_bad_limit_is_400(ui: Scene, limit: str) -> None:
    answer = ui.reader().get(f"/api/v1/runs/paid/journal?limit={limit}")
    assert answer.status_code == 400, answer.text
    assert "limit" in answer.json()["error"]["message"]


@pytest.mark.parametrize("after", ["-1", "x", "1.5", "", "1e3", "0x10", str(2**63)])
def test_a_bad_after_is_400(ui: Scene, after: str) -> None:
    answer = ui.reader().get(f"/api/v1/runs/paid/journal?after={after}")
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["type"] == "BadRequest"
    assert "after" in answer.json()["error"]["message"]


def test_an_unknown_run_is_404_with_after_too(ui: Scene) -> None:
    answer = ui.reader().get("/api/v1/runs/no-such-run/journal", params={"after": 1})
    assert answer.status_code == 404, answer.text
    assert answer.json()["error"] == {
        "type": "WorkflowNotFound",
        "message": "no run with workflow_id 'no-such-run'",
    }


def test_the_openapi_document_shows_after_and_the_ids(ui: Scene) -> None:
    document = ui.reader().get("/api/v1/openapi.json").json()
    operation = document["paths"]["/api/v1/runs/{workflow_id}/journal"]["get"]
    [after] = [p for p in operation["parameters"] if p["name"] == "after"]
    assert after["in"] == "query" and not after["required"] and "last entry" in after["description"]
    assert {"type": "integer", "minimum": 0, "maximum": 2**63 - 1} in after["schema"]["anyOf"]
    assert {"400", "404"} <= set(operation["responses"])
    schemas = document["components"]["schemas"]
    assert {"more", "total"} <= set(schemas["Journal"]["required"])
    assert "id" in schemas["Entry"]["required"]
    [limit] = [p for p in operation["parameters"] if p["name"] == "limit"]
    assert {"type": "integer", "minimum": 1, "maximum": 1000} in limit["schema"]["anyOf"]


# -- a late commit (PostgreSQL) -----------------------------------------------------------------


@pytest.fixture(params=["postgres"])  # the param: deselected without a server
def pg_url() -> Iterator[str]:
    yield from postgres_schema_url()


def _insert(conn: Any, workflow_id: str, name: str) -> int:
    """A journal row written as a concurrent writer of the run would, without committing."""
    return int(
        conn.execute(
            "INSERT INTO journal (workflow_id, kind, name, status) "
            "VALUES (%s, 'operator', %s, 'completed') RETURNING id",
            (workflow_id, name),
        ).fetchone()[0]
    )


def test_an_entry_committed_late_below_after_shows_in_total(pg_url: str) -> None:
    """Two writers of one run: the first takes id N, the second N+1 and commits first. A
    poll sees N+1 and moves past N; once N commits, ``total`` tells the client it lacks one,
    and the whole journal (what it reads then) has it in its place."""
    import psycopg

    assert POSTGRES_URL is not None
    schema = parse_qs(urlsplit(pg_url).query)["schema"][0]
    with stalwart.Stalwart(pg_url) as app:

        @app.workflow(name="idle")
        def idle() -> None: ...

        wid = f"late-{uuid.uuid4().hex[:8]}"
        app.start(idle, workflow_id=wid)  # no worker: it stays pending, one entry

        async def polls() -> None:
            transport = httpx.ASGITransport(app=create_app(app, token="t"))
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
                path = f"/api/v1/runs/{wid}/journal"
                held = (await c.get(path)).json()["entries"]
                with (
                    psycopg.connect(POSTGRES_URL) as slow,
                    psycopg.connect(POSTGRES_URL, autocommit=True) as fast,
                ):
                    for conn in (slow, fast):
                        conn.execute(f"SET search_path TO {schema}")
                    slow.commit()
                    low = _insert(slow, wid, "slow")  # its transaction stays open
                    high = _insert(fast, wid, "fast")  # committed at once
                    assert high > low
                    poll = (await c.get(path, params={"after": held[-1]["id"]})).json()
                    assert [e["id"] for e in poll["entries"]] == [high]
                    assert len(held) + len(poll["entries"]) == poll["total"]  # all there is yet
                    held += poll["entries"]
                    slow.commit()
                poll = (await c.get(path, params={"after": high})).json()
                assert poll["entries"] == [] and len(held) + 0 < poll["total"]  # one is missing
                whole = (await c.get(path)).json()
                assert [e["id"] for e in whole["entries"]][-2:] == [low, high]
                assert [e["name"] for e in whole["entries"]][-2:] == ["slow", "fast"]
                assert whole["total"] == poll["total"] == len(held) + 1

        asyncio.run(polls())
