"""Release 0.2, the real one: the last commit of this repository's history before release 0.3's
work began, installed with pip from a ``git archive`` of it into a virtualenv of its own.

That commit still said ``__version__ = "0.1.0"`` (0.2 never wrote its own number; 0.3's first
change, d57f6ce, wrote ``0.3.0`` in one place), so it is found by its place in the history
instead: the last commit of the session that landed release 0.2 (issues 13 and 15), before
issue 21 (what the 0.2 acceptance tests found) began with 47831a7. Its code writes schema
version 15.

The virtualenv takes a dozen seconds to build (pip reads the package index for 0.2's
dependencies, and nothing else from the network); it is built once into a folder named by
the commit and reused while it is complete (``ready`` is written last), under a lock, so
pytest-xdist workers and ``make_02_store.py`` may ask for it at the same time.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMIT = "3512989f315842314689bc94fd30acf182f9ecff"
SCHEMA = 15  # the schema version release 0.2's code writes
HERE = Path(__file__).resolve().parent
AGENT = HERE / "agent_02.py"
FIXTURE = HERE / "data" / "store_02.db"
EXPECTED = HERE / "data" / "store_02.json"


class NotInHistory(Exception):
    """The commit is not in this checkout (a shallow clone)."""


def default_folder() -> Path:
    """Where the virtualenv is kept between test sessions: pytest's cache folder."""
    return ROOT / ".pytest_cache" / "d" / f"stalwart-0.2-{COMMIT[:12]}"


def python(folder: Path | None = None) -> Path:
    """The interpreter of release 0.2's virtualenv in ``folder``, built first if need be."""
    folder = folder or default_folder()
    folder.mkdir(parents=True, exist_ok=True)
    venv = folder / "venv"
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "ready").exists():
            shutil.rmtree(venv, ignore_errors=True)
            _build(venv)
            (folder / "ready").write_text(COMMIT + "\n")
    return venv / "bin" / "python"


def _build(venv: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="stalwart-0.2-src-") as scratch:
        archive = Path(scratch) / "src.tar"
        done = _run(["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), COMMIT])
        if done.returncode != 0:
            raise NotInHistory(
                f"release 0.2 ({COMMIT[:7]}) is not in this checkout's history "
                f"({done.stderr.strip()}): fetch the whole history (git fetch --unshallow)"
            )
        source = Path(scratch) / "src"
        with tarfile.open(archive) as tar:
            tar.extractall(source, filter="data")
        _check(_run([sys.executable, "-m", "venv", str(venv)]), "create the virtualenv")
        install = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        _check(_run([*install, f"{source}[postgres]"]), "install release 0.2 into it")


def environment() -> dict[str, str]:
    """This process's environment for release 0.2's: without ``PYTHONPATH``, which could put
    this release's code before it."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, env=environment(), check=False)


def _check(done: subprocess.CompletedProcess[str], what: str) -> None:
    if done.returncode != 0:
        raise RuntimeError(f"could not {what}: {done.stderr.strip() or done.stdout.strip()}")


def agent(
    python_path: Path, *args: str, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """``agent_02.py`` with ``args``, run by release 0.2's interpreter."""
    return subprocess.run(
        [str(python_path), str(AGENT), *args],
        capture_output=True,
        text=True,
        env=environment(),
        timeout=timeout,
        check=False,
    )
