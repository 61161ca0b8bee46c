"""docs/lifecycle.md's schema versions and its examples of a refused store are what the code
records and prints: this release's schema version, the refusal of a store a newer release
wrote (the store named by its absolute path, though opened by a relative URL), and release
0.2's refusal after the first encrypted write."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
import release_02

import stalwart
from stalwart._store.base import SCHEMA_VERSION
from stalwart._store.keys import ENCRYPTED_SCHEMA

DOC = Path(__file__).resolve().parents[2] / "docs" / "lifecycle.md"
_NEWER = re.compile(
    r"the store sqlite:///(?P<path>\S+) has schema version (?P<version>\d+), which needs "
    r"stalwart code of schema version (?P<oldest>\d+) or newer, and this code's schema version "
    r"is (?P<code>\d+): upgrade stalwart on this machine \(.*\)"
)


def _examples() -> list[str]:
    text = DOC.read_text(encoding="utf-8")
    section = text.split("### A store this stalwart cannot use", 1)[1]
    return re.findall(r"```text\n(.*?)\n```", section, flags=re.S)


def test_the_doc_names_this_releases_schema_version() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert f"this release's (0.3.0) is\n{SCHEMA_VERSION}" in text
    assert f"release 0.2's is {release_02.SCHEMA}" in text
    assert f"oldest compatible version of {ENCRYPTED_SCHEMA}" in text


def test_the_refusal_of_a_newer_store_is_printed_as_the_doc_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours = _examples()[0]
    found = _NEWER.fullmatch(ours)
    assert found is not None, ours
    assert int(found["code"]) == SCHEMA_VERSION < int(found["oldest"]) <= int(found["version"])
    monkeypatch.chdir(tmp_path)
    with stalwart.Stalwart("sqlite:///store.db"):
        pass
    conn = sqlite3.connect(tmp_path / "store.db")
    conn.execute(
        "INSERT INTO stalwart_schema VALUES (?, ?)", (int(found["version"]), int(found["oldest"]))
    )
    conn.commit()
    conn.close()
    with pytest.raises(stalwart.StoreError) as caught:
        stalwart.Stalwart("sqlite:///store.db")
    absolute = (tmp_path / "store.db").as_posix()
    assert str(caught.value) == ours.replace(found["path"], absolute)


def test_release_02s_refusal_in_the_doc_has_the_numbers_of_the_first_encrypted_write() -> None:
    theirs = _examples()[1]
    assert theirs == (
        f"the store postgresql://stalwart:***@db.internal/agents has schema version "
        f"{SCHEMA_VERSION}, which needs stalwart code of schema version {ENCRYPTED_SCHEMA} or "
        f"newer (this code has {release_02.SCHEMA}); upgrade stalwart on this machine"
    )
