"""schemathesis against the OpenAPI document of a live ``stalwart ui``, on SQLite and on
PostgreSQL: whatever a client sends within the document, the server never answers 5xx, and
every answer matches the document. A bounded number of examples per operation.

The document is built from the code at collection (schemathesis makes one test per operation
from it); the test checks that the live server serves the same one."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance
from ui_agent import declare
from ui_harness import UiServer, ui_server

import stalwart
from stalwart._ui import create_app
from store_urls import postgres_schema_url

TOKEN = "schema-token"
EXAMPLES = 25
DOCUMENT = create_app(None, TOKEN).openapi()

schema = schemathesis.openapi.from_dict(DOCUMENT)


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UiServer]:
    """``stalwart ui`` on a store with a completed run and pending ones."""
    workdir = tmp_path_factory.mktemp("schema")
    urls = (
        iter([f"sqlite:///{workdir / 'schema.db'}"])
        if request.param == "sqlite"
        else postgres_schema_url()
    )
    url = next(urls)
    try:
        with stalwart.Stalwart(url) as app:
            workflows = declare(app, workdir)
            app.run(workflows["pay"], "o1", workflow_id="paid")
            app.start(workflows["ask"], "ship it?", workflow_id="asking")
            app.start(workflows["inbox"], workflow_id="a/child")
        with ui_server(url, "--token", TOKEN) as server:
            served = httpx.get(f"{server.base}api/v1/openapi.json", timeout=30).json()
            assert served == DOCUMENT
            yield server
    finally:
        for _ in urls:  # drop the PostgreSQL schema
            pass


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.generate],
)
def test_no_answer_is_a_server_error_and_every_answer_matches_the_document(
    case: schemathesis.Case, served: UiServer
) -> None:
    case.call_and_validate(
        base_url=served.base.rstrip("/"),
        headers={"Authorization": f"Bearer {TOKEN}"},
        checks=[not_a_server_error, response_schema_conformance],
    )
