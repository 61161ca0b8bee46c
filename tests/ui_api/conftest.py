"""The scene the HTTP API tests share: one store, one worker, one ``stalwart ui`` (each test
acts on runs of its own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from ui_harness import Scene, scene


@pytest.fixture(scope="session")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scene]:
    """``stalwart ui`` on a SQLite store with runs in every state, worked by a worker."""
    workdir = tmp_path_factory.mktemp("ui")
    with scene(f"sqlite:///{workdir / 'ui.db'}", workdir) as served:
        yield served
