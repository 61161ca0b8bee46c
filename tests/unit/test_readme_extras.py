"""README names every extra pyproject.toml declares (``dev`` aside) where it lists them, in
its Install section, so a reader finds each; and its list of the CLI names ``stalwart mcp``."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def section(text: str, start: str, end: str) -> str:
    """The part of ``text`` from ``start`` up to the next ``end`` after it."""
    begin = text.index(start)
    return text[begin : text.index(end, begin + len(start))]


def test_the_readme_names_every_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    extras = set(project["project"]["optional-dependencies"]) - {"dev"}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    install = section(readme, "## Install", "\n## ")
    missing = sorted(extra for extra in extras if f"`{extra}`" not in install)
    assert not missing, f"README.md's list of extras lacks {missing}"


def test_the_readme_cli_list_names_the_servers() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = section(readme, "- A CLI:", "\n- ")
    for server in ("stalwart ui", "stalwart mcp"):
        assert f"`{server}`" in commands, server
