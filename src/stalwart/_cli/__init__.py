"""The ``stalwart`` command line: a thin consumer of the public API.

``--url`` and ``--app`` are accepted before or after the command; without them the store is
found as docs/cli.md says ("Which store", ``_discover``). Read commands never create a store
from a URL. Every error is one ``error: ...`` line on stderr (a hint where one is known),
never a traceback for a user mistake (``_group``).

``_root`` holds the group and what its commands share; each command module adds its commands
to it, and this package imports them all, so it is the whole command line.
"""

from __future__ import annotations

from . import (  # noqa: F401  (each adds its commands)
    check,
    keys,
    operate,
    portability,
    prune,
    runs,
    schedules,
    serve,
    shared,
    subscriptions,
    tail,
    ui,
)
from ._root import cli, open_app, url_option

__all__ = ["cli", "main", "open_app", "url_option"]


def main() -> None:
    """Entry point of the ``stalwart`` console script."""
    cli.main()
