"""README names every extra pyproject.toml declares (``dev`` aside), so a reader finds each."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_names_every_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = set(project["project"]["optional-dependencies"]) - {"dev"}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = sorted(extra for extra in extras if f"`{extra}`" not in readme)
    assert not missing, f"README.md's list of extras lacks {missing}"
