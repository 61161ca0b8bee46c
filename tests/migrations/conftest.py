"""What the store-version tests share: release 0.2's interpreter, built once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import release_02


@pytest.fixture(scope="session")
def python_02() -> Path:
    """The interpreter of a virtualenv holding release 0.2 (``release_02.py``), built on first
    use and kept in pytest's cache folder, keyed by the commit, for the next sessions."""
    try:
        return release_02.python()
    except release_02.NotInHistory as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{exc} (CI needs a full clone)")
        pytest.skip(str(exc))
