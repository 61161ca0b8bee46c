"""Trees for the snapshot tests: one with every kind of entry a workspace has, and a check
that two trees are equal byte for byte, modes, links and file times included."""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["assert_same_tree", "make_workspace", "tree_of"]


def make_workspace(root: Path, outside: Path) -> Path:
    """A workspace at ``root``: nested folders, an empty one, an empty file, an executable, a
    file of several chunks, a read-only folder, and links inside, outside (``outside``), to a
    folder and dangling."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "__init__.py").write_text("VALUE = 42\n")
    (root / "src" / "main.py").write_text("print('hello')\n" * 500)
    (root / "empty-dir").mkdir()
    (root / "empty.txt").write_bytes(b"")
    tool = root / "run.sh"
    tool.write_text("#!/bin/sh\necho ok\n")
    tool.chmod(0o755)
    (root / "data.bin").write_bytes(os.urandom(3 * 1024 * 1024) + b"tail" * 300_000)
    locked = root / "locked"
    locked.mkdir()
    (locked / "secret.txt").write_text("read only\n")
    (locked / "secret.txt").chmod(0o400)
    locked.chmod(0o555)
    os.symlink("src/main.py", root / "main-link")
    os.symlink(str(outside), root / "outside-link")
    os.symlink("src/pkg", root / "pkg-link")
    os.symlink("nowhere/at/all", root / "dangling")
    return root


def tree_of(root: Path) -> dict[str, tuple[object, ...]]:
    """Every entry under ``root`` (not following links): kind, mode, and content, target or
    nothing, with a file's modification time."""
    found: dict[str, tuple[object, ...]] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            full = Path(folder) / name
            st = full.lstat()
            rel = str(full.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", os.readlink(full))
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = ("dir", stat.S_IMODE(st.st_mode))
            else:
                found[rel] = ("file", stat.S_IMODE(st.st_mode), full.read_bytes(), st.st_mtime_ns)
    found["."] = ("dir", stat.S_IMODE(root.stat().st_mode))
    return found


def assert_same_tree(expected: Path, got: Path) -> None:
    """``got`` holds what ``expected`` holds, byte for byte."""
    want, have = tree_of(expected), tree_of(got)
    assert sorted(have) == sorted(want)
    for path, entry in want.items():
        assert have[path] == entry, path
