"""What the contract tests share: a store opened straight from its URL, on every backend."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest

from stalwart import NotDurableWarning
from stalwart._store import Store, open_store


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """The backend of ``store_url`` opened as the engine opens it, closed after the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotDurableWarning)
        instance = open_store(store_url)
    yield instance
    instance.close()
