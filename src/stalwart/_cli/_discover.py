"""Which store a command uses, found the way the app finds it (docs/cli.md, "Which store"):
``--url``, then ``--app MODULE:APP`` (or ``$STALWART_APP``), then ``[tool.stalwart]`` ``app``
or ``url`` in the ``pyproject.toml`` of the current folder or the nearest parent that has one,
then ``$STALWART_URL``, then the embedded default."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

import click

from .._store import DEFAULT_URL

__all__ = ["Found", "discover", "pyproject_section", "sqlite_path"]

_KEYS = ("app", "url")


@dataclass(frozen=True)
class Found:
    """Where a command's store comes from: a URL, or an app to import (``target``, from
    ``folder``); ``source`` says which, for the ``store:`` line and the errors."""

    source: str
    url: str | None = None
    target: str | None = None
    folder: Path | None = None  # a pyproject's folder: its app is imported from there


def pyproject_section(start: Path) -> tuple[Path, dict[str, str]] | None:
    """The nearest ``pyproject.toml`` at or above ``start`` with a ``[tool.stalwart]`` table,
    and that table (checked: only ``app`` or ``url``, one of them, a string)."""
    for folder in (start, *start.parents):
        path = folder / "pyproject.toml"
        if not path.is_file():
            continue
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise click.ClickException(
                f"cannot read {path} to find the store: {exc}; fix it, or give --url"
            ) from None
        table = data.get("tool", {}).get("stalwart")
        if table is None:
            continue
        return path, _checked(path, table)
    return None


def _checked(path: Path, table: object) -> dict[str, str]:
    where = f"[tool.stalwart] in {path}"
    if not isinstance(table, dict):
        raise click.ClickException(f'{where} must be a table: app = "MODULE:APP" or url = "..."')
    unknown = sorted(set(table) - set(_KEYS))
    if unknown:
        raise click.ClickException(
            f'{where}: unknown key {unknown[0]!r}; it takes app = "MODULE:APP" or url = "..."'
        )
    if len(table) != 1:
        raise click.ClickException(f'{where}: give app = "MODULE:APP" or url = "...", one of them')
    ((key, value),) = table.items()
    if not isinstance(value, str) or not value.strip():
        raise click.ClickException(f"{where}: {key} must be a non-empty string")
    return {key: value.strip()}


def sqlite_path(url: str, folder: Path | None) -> Path | None:
    """The file of a ``sqlite:///`` URL (``None`` for another store), a relative path taken
    against ``folder`` when one is given."""
    if not url.startswith("sqlite:///"):
        return None
    path = Path(url[len("sqlite:///") :])
    return path if folder is None or path.is_absolute() else folder / path


def _beside(url: str, folder: Path) -> str:
    """A ``sqlite:///relative`` URL made absolute against ``folder`` (the pyproject's)."""
    path = sqlite_path(url, folder)
    return url if path is None else f"sqlite:///{path}"


def discover(url: str | None, app: str | None) -> Found:
    """Where the store comes from, given ``--url`` and ``--app`` as typed (or ``None``)."""
    if url is not None:
        return Found("--url", url=url)
    if app is not None:
        return Found(f"--app {app}", target=app)
    env_app = os.environ.get("STALWART_APP")
    if env_app:
        return Found(f"STALWART_APP={env_app}", target=env_app)
    found = pyproject_section(Path.cwd())
    if found is not None:
        path, table = found
        if "app" in table:
            return Found(f"pyproject.toml at {path}", target=table["app"], folder=path.parent)
        return Found(f"pyproject.toml at {path}", url=_beside(table["url"], path.parent))
    env_url = os.environ.get("STALWART_URL")
    if env_url:
        return Found("STALWART_URL", url=env_url)
    return Found("the default store", url=DEFAULT_URL)
