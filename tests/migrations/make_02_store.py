"""Write the 0.2-written store fixture: ``data/store_02.db`` and ``data/store_02.json``.

Release 0.2 itself writes them: this script installs the last commit of release 0.2 from this
repository's history into a virtualenv of its own (``release_02.py``; pip reads the package
index for its dependencies), and that interpreter runs ``agent_02.py write``, which creates a
SQLite store with runs in every state a deploy meets (completed, failed, suspended on an event,
on a timer and on an approval, a parent waiting on its child, pending), a schedule and shared
values, and writes to the ``.json`` file what release 0.2 reads of that store.
``test_store_upgrade.py`` upgrades copies of the store with this release and checks that it
reads the same and that its waiting runs complete.

Regenerate (only when the fixture's agent changes; the store must stay 0.2's):

    .venv/bin/python tests/migrations/make_02_store.py

and commit both files. ``--venv DIR`` builds (or reuses) the virtualenv there instead of
pytest's cache folder.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

import release_02


def main() -> None:
    """Build release 0.2's virtualenv, have it write the store, keep the store compact."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, help="the folder of release 0.2's virtualenv")
    options = parser.parse_args()
    python = release_02.python(options.venv)
    with tempfile.TemporaryDirectory(prefix="stalwart-0.2-store-") as scratch:
        store = Path(scratch) / "store_02.db"
        expected = Path(scratch) / "store_02.json"
        done = release_02.agent(python, "write", f"sqlite:///{store}", str(expected))
        if done.returncode != 0:
            sys.exit(f"error: release 0.2 could not write the store:\n{done.stderr}")
        with sqlite3.connect(store) as conn:  # WAL already checkpointed by 0.2's close
            conn.execute("VACUUM")
        conn.close()
        release_02.FIXTURE.parent.mkdir(exist_ok=True)
        shutil.copyfile(store, release_02.FIXTURE)
        shutil.copyfile(expected, release_02.EXPECTED)
    print(f"wrote {release_02.FIXTURE} and {release_02.EXPECTED} with release 0.2")


if __name__ == "__main__":
    main()
