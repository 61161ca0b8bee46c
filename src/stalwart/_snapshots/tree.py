"""The entries of a directory tree as a snapshot records them: regular files with their
modes, directories, and symbolic links as links; anything else is refused."""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

__all__ = ["ROOT", "TreeEntry", "walk"]

ROOT = "."  # the path the tree's own folder is recorded under


@dataclass(frozen=True, slots=True)
class TreeEntry:
    """One entry: ``path`` relative to the root, ``/``-separated (``ROOT`` for the root),
    ``full`` its path on this machine."""

    path: str
    full: str
    kind: str  # "file", "dir" or "link"
    mode: int
    size: int
    mtime_ns: int
    target: str | None = None


def _excluded(path: str, name: str, patterns: Sequence[str]) -> bool:
    """Whether ``path`` (relative) matches a pattern: the whole path, or its last part for a
    pattern without ``/`` (so ``"*.pyc"`` and ``".git"`` match at any depth)."""
    return any(
        fnmatch.fnmatchcase(path, p) or ("/" not in p and fnmatch.fnmatchcase(name, p))
        for p in patterns
    )


def _entry(path: str, full: str, st: os.stat_result) -> TreeEntry:
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISREG(st.st_mode):
        return TreeEntry(path, full, "file", mode, st.st_size, st.st_mtime_ns)
    if stat.S_ISDIR(st.st_mode):
        return TreeEntry(path, full, "dir", mode, 0, st.st_mtime_ns)
    if stat.S_ISLNK(st.st_mode):
        return TreeEntry(path, full, "link", mode, 0, st.st_mtime_ns, os.readlink(full))
    raise ValueError(
        f"snapshot: {full!r} is not a regular file, folder or symbolic link (a socket, pipe or "
        "device); remove it or pass its path in exclude="
    )


def _checked(path: str, full: str) -> str:
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"snapshot: the name {full!r} is not valid UTF-8; rename it or exclude it"
        ) from None
    return path


def walk(root: str, exclude: Sequence[str]) -> Iterator[TreeEntry]:
    """The root, then every entry under it not excluded, each folder before its contents
    (links are not followed)."""
    yield _entry(ROOT, root, os.stat(root))
    folders = [("", root)]
    while folders:
        prefix, folder = folders.pop()
        with os.scandir(folder) as found:
            names = sorted(found, key=lambda e: e.name)
        below = []
        for item in names:
            path = prefix + item.name
            if _excluded(path, item.name, exclude):
                continue
            _checked(path, item.path)
            try:
                entry = _entry(path, item.path, item.stat(follow_symlinks=False))
            except FileNotFoundError:
                continue  # removed since the folder was listed: not part of the snapshot
            yield entry
            if entry.kind == "dir":
                below.append((path + "/", item.path))
        folders.extend(reversed(below))
