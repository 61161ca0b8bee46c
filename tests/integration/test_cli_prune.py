"""``stalwart prune`` as the real command: a dry run counts, no terminal and no --yes exits 2
having deleted nothing, --yes deletes, a status that has not ended is one error line."""

from __future__ import annotations

from pathlib import Path

import pytest

import stalwart
from cli_process import stalwart as _stalwart

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'prune.db'}"
    with stalwart.Stalwart(url) as app:

        @app.workflow(name="count")
        def count(x: int) -> int:
            return x + 1

        for i in range(3):
            app.run(count, i, workflow_id=f"ok-{i}")
        app.start(count, 9, workflow_id="waiting")
    return url


def test_prune_counts_asks_and_deletes(url: str, tmp_path: Path) -> None:
    def cli(*args: str) -> tuple[int, str, str]:
        done = _stalwart("prune", "--url", url, *args, cwd=tmp_path, stdin="", clean=True)
        return done.returncode, done.stdout, done.stderr

    code, out, _ = cli("--older-than", "0s", "--dry-run")
    assert code == 0 and out.startswith("would delete 3 run(s)")
    code, out, err = cli("--older-than", "0s")
    assert code == 2 and "stdin is not a terminal: add --yes" in err and out == ""
    code, out, err = cli("--older-than", "0s", "--status", "pending")
    assert code == 2 and err.splitlines()[-1].startswith("error: ")
    assert "ended runs only" in err
    code, out, _ = cli("--older-than", "1h", "--yes")
    assert code == 0 and out.startswith("nothing to delete: 0 run(s)")
    code, out, _ = cli("--older-than", "0s", "--name", "count", "--status", "completed", "--yes")
    assert code == 0 and out.startswith("deleted 3 completed run(s) of count")
    with stalwart.Stalwart(url) as app:
        assert [r.workflow_id for r in app.list_workflows()] == ["waiting"]


def test_prune_never_creates_a_store(tmp_path: Path) -> None:
    """A mistyped path is an error, whatever the flags: a store that is not there has nothing
    to prune, and none is made to find that out."""
    missing = tmp_path / "typo.db"
    for flags in (["--dry-run"], ["--yes"], ["--status", "failed", "--yes"]):
        done = _stalwart(
            "prune", "--url", f"sqlite:///{missing}", "--older-than", "30d", *flags,
            cwd=tmp_path, stdin="", clean=True,
        )  # fmt: skip
        assert done.returncode == 1 and done.stderr.startswith("error: no store at"), flags
        assert not missing.exists()
