"""Importing the app a command names (``MODULE:APP``): ``worker``, ``check``, and the store
discovery of every other command (``--app``, ``$STALWART_APP``, ``[tool.stalwart] app``)."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ._group import CliError

__all__ = ["load_app"]


@contextlib.contextmanager
def _in_folder(folder: Path | None) -> Iterator[None]:
    """Import from ``folder`` (the working directory when ``None``), and run the module there:
    a relative store path in it means what it means when the app runs from its project."""
    where = Path.cwd() if folder is None else folder
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))
    if folder is None:
        yield
        return
    before = Path.cwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


def load_app(target: str, folder: Path | None = None) -> Any:
    """The ``stalwart.Stalwart`` named by ``target`` (``MODULE:APP``), imported from ``folder``
    (default: the working directory); a mistake is one ``CliError`` line."""
    from .._app import Stalwart

    module_name, _, attr = target.partition(":")
    if module_name.endswith(".py"):
        hint = module_name[: -len(".py")].replace("/", ".")
        raise CliError(f"{target!r}: name the module, not the file: {hint}:{attr or 'app'}")
    if not module_name or not attr:
        raise CliError(f"{target!r}: write MODULE:APP, for example agents.refunds:app")
    with _in_folder(folder):
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:  # the user's module: say where it broke, not our traceback
            raise CliError(f"cannot import {module_name!r}: {_where(exc)}") from exc
    app = getattr(module, attr, None)
    if not isinstance(app, Stalwart):
        apps = [name for name, value in vars(module).items() if isinstance(value, Stalwart)]
        found = f"; it has {', '.join(f'{module_name}:{a}' for a in apps)}" if apps else ""
        raise CliError(f"{target!r} is not a stalwart.Stalwart app{found}")
    return app


def _where(exc: BaseException) -> str:
    """An import failure as one line: the error, and the file and line it came from."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"SyntaxError: {exc.msg} ({exc.filename}, line {exc.lineno})"
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "importlib" not in f.filename and "/stalwart/_" not in f.filename]
    place = f" ({ours[-1].filename}, line {ours[-1].lineno})" if ours else ""
    text = str(exc) if isinstance(exc, ImportError) else f"{type(exc).__name__}: {exc}"
    return text + place
