"""schemathesis against the OpenAPI document of a live ``stalwart ui``, on SQLite and on
PostgreSQL: whatever a client sends within the document, the server never answers 5xx, and
every answer matches the document. A bounded number of examples per operation.

The document is built from the code at collection (schemathesis makes one test per operation
from it); the test checks that the live server serves the same one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance
from ui_harness import UiServer, ui_server

import stalwart
from operator_agent import declare
from stalwart._ui import create_app
from store_urls import postgres_schema_url

TOKEN = "schema-token"
EXAMPLES = 25  # per operation, on SQLite
EXAMPLES_POSTGRES = 10  # the same document again, for what only PostgreSQL refuses (NUL, ...)
DOCUMENT = create_app(None, TOKEN).openapi()
CHECKS = [not_a_server_error, response_schema_conformance]

schema = schemathesis.openapi.from_dict(DOCUMENT)


@contextmanager
def _serve(url: str, workdir: Path) -> Iterator[UiServer]:
    """``stalwart ui`` on ``url`` with a completed run and pending ones (one a child's id)."""
    with stalwart.Stalwart(url) as app:
        workflows = declare(app, workdir)
        app.run(workflows["pay"], "o1", workflow_id="paid")
        app.start(workflows["ask"], "ship it?", workflow_id="asking")
        app.start(workflows["inbox"], workflow_id="a/child")
    with ui_server(url, "--token", TOKEN) as server:
        served = httpx.get(f"{server.base}api/v1/openapi.json", timeout=30).json()
        assert served == DOCUMENT
        yield server


@pytest.fixture(scope="module", params=["sqlite"])
def sqlite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiServer]:
    workdir = tmp_path_factory.mktemp("schema")
    with _serve(f"sqlite:///{workdir / 'schema.db'}", workdir) as server:
        yield server


@pytest.fixture(scope="module", params=["postgres"])  # the param: deselected without a server
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UiServer]:
    workdir = tmp_path_factory.mktemp("schema-pg")
    for url in postgres_schema_url():
        with _serve(url, workdir) as server:
            yield server


_SETTINGS = {
    "deadline": None,
    "database": None,
    "suppress_health_check": list(HealthCheck),
    "phases": [Phase.explicit, Phase.generate],
}


@schema.parametrize()
@settings(max_examples=EXAMPLES, **_SETTINGS)
def test_no_answer_is_a_server_error_and_every_answer_matches_the_document(
    case: schemathesis.Case, sqlite_server: UiServer
) -> None:
    case.call_and_validate(
        base_url=sqlite_server.base.rstrip("/"),
        headers={"Authorization": f"Bearer {TOKEN}"},
        checks=CHECKS,
    )


@schema.parametrize()
@settings(max_examples=EXAMPLES_POSTGRES, **_SETTINGS)
def test_on_postgres_too(case: schemathesis.Case, postgres_server: UiServer) -> None:
    case.call_and_validate(
        base_url=postgres_server.base.rstrip("/"),
        headers={"Authorization": f"Bearer {TOKEN}"},
        checks=CHECKS,
    )
