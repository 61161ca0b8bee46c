"""Shared fixtures: every store-backed test runs on each backend.

The ``postgres`` backend runs when ``STALWART_TEST_POSTGRES_URL`` names a database (``.ci/run``
sets it); each test gets a schema of its own, dropped afterwards. Without it, the tests that need
PostgreSQL are deselected rather than skipped one by one, and the end of the run says in one line
how many did not run and how to run them (see :func:`needs_postgres`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import stalwart
from fake_provider import FakeProvider, fake_provider
from parallel import (  # noqa: F401  (hooks: they share the suite between pytest-xdist workers)
    pytest_collection_finish,
    pytest_configure_node,
    pytest_unconfigure,
    pytest_xdist_make_scheduler,
)
from stalwart import testing
from stalwart.testing import FakeClock
from store_urls import NO_POSTGRES, POSTGRES_URL, dropper, postgres_schema_url

BACKENDS = ["memory", "sqlite", "postgres"]
# Fixtures that always need PostgreSQL. A fixture parametrized over backends needs it only for
# its "postgres" param, which needs_postgres() recognises whatever the fixture's name.
POSTGRES_ONLY_FIXTURES = frozenset({"pg_url", "pg_workers"})
_DESELECTED = pytest.StashKey[int]()


def needs_postgres(item: pytest.Item) -> bool:
    """Whether ``item`` runs on PostgreSQL: a ``"postgres"`` fixture param or a PostgreSQL-only
    fixture."""
    callspec = getattr(item, "callspec", None)
    if callspec is not None and "postgres" in callspec.params.values():
        return True
    return not POSTGRES_ONLY_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without a PostgreSQL URL, deselect its tests (instead of ~140 identical SKIPPED lines)."""
    if POSTGRES_URL:
        return
    postgres = [item for item in items if needs_postgres(item)]
    if postgres:
        config.hook.pytest_deselected(items=postgres)
        items[:] = [item for item in items if not needs_postgres(item)]
    config.stash[_DESELECTED] = len(postgres)
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:  # a pytest-xdist worker: the controller prints the line
        workeroutput["postgres_deselected"] = len(postgres)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """Each pytest-xdist worker collects (and deselects) the whole suite: keep its count."""
    count = getattr(node, "workeroutput", {}).get("postgres_deselected", 0)
    stash = node.config.stash
    stash[_DESELECTED] = max(stash.get(_DESELECTED, 0), count)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Wait for the schemas the tests left to the background dropper (``store_urls``)."""
    dropper.finish()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """One line for the PostgreSQL tests that did not run, and how to run them."""
    count = config.stash.get(_DESELECTED, 0)
    if count:
        terminalreporter.write_line(
            f"PostgreSQL: the {count} tests of the PostgreSQL backend did not run; {NO_POSTGRES}, "
            "e.g. STALWART_TEST_POSTGRES_URL=postgresql://postgres@127.0.0.1:5432/test make test",
            yellow=True,
        )


@pytest.fixture(params=BACKENDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store URL for each backend."""
    if request.param == "memory":
        yield "memory://"
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'stalwart.db'}"
    else:
        yield from postgres_schema_url()


@pytest.fixture(params=["sqlite", "postgres"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store several connections and processes can share (a memory store cannot)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'shared.db'}"
    else:
        yield from postgres_schema_url()


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    """A fake OpenAI-compatible server on 127.0.0.1 (tests/fake_provider.py)."""
    with fake_provider() as running:
        yield running


@pytest.fixture
def clock() -> FakeClock:
    """A clock that jumps forward instead of sleeping."""
    return FakeClock()


@pytest.fixture
def app(store_url: str, clock: FakeClock) -> Iterator[stalwart.Stalwart]:
    """An app on a fresh store of each backend, with a fake clock."""
    with stalwart.Stalwart(store_url, clock=clock) as instance:
        yield instance


def execute_sql(
    app: stalwart.Stalwart, sql: str, params: dict[str, Any] | None = None
) -> list[Any]:
    """Run raw SQL (``:name`` placeholders) on the app's store, whatever its backend."""
    return testing.execute_sql(testing.store_of(app), sql, params)


@pytest.fixture
def raw_sql() -> Callable[..., list[Any]]:
    """:func:`execute_sql`, for tests that inspect or damage what a store holds."""
    return execute_sql
