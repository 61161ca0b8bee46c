"""``stalwart export`` and ``import``: a round trip between two stores keeps every row (the
numbers a store gives aside), a suspended run imported resumes on a worker process of the
target, and an import skips what exists and stops at nothing it cannot read."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from portable_stores import contents, resumes_on_a_worker, seeded

import stalwart
from cli_process import stalwart as cli
from store_urls import postgres_schema_url

pytestmark = pytest.mark.timeout(180)
RUNS = ["ask-1", "done-1", "done-2", "fails-1", "snap-1", "talk-1"]


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL schema."""
    yield from postgres_schema_url()


def _export(url: str, out: Path, *args: str) -> str:
    done = cli("--url", url, "export", *args, "-o", str(out), cwd=out.parent)
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_round_trip_sqlite_to_postgres_keeps_every_row(tmp_path: Path, pg_url: str) -> None:
    source = f"sqlite:///{tmp_path / 'source.db'}"
    seeded(source, tmp_path / "tree")
    out = tmp_path / "runs.jsonl"
    stderr = _export(source, out, "--with-snapshots")
    assert "exported 6 runs" in stderr
    # the runs that are not over are named: they must not go on in the source too
    warned = {line.split()[2] for line in stderr.splitlines() if line.startswith("warning:")}
    assert warned == {"ask-1", "talk-1"}
    lines = out.read_text().splitlines()
    assert sorted(json.loads(line)["workflow_id"] for line in lines) == RUNS
    done = cli("--url", pg_url, "import", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "imported 6 runs, skipped 0"
    mine, theirs = contents(source, renumbered=True), contents(pg_url, renumbered=True)
    global_tables = {
        "shared_writes",
        "schedules",
        "queues",
        "queue_starts",
        "breakers",
        "breaker_failures",
        "payloads",
    }
    for table in set(mine) - global_tables:
        assert theirs[table] == mine[table], table
    # a payload the runs reference came along; the source's others (shared values) did not
    assert set(theirs["payloads"]) <= set(mine["payloads"])
    assert len(theirs["stream_chunks"]) == 3 * 4 + 1  # three runs write, talk-1 thinks
    resumes_on_a_worker(pg_url, tmp_path)


def test_round_trip_postgres_to_sqlite_and_import_again(tmp_path: Path, pg_url: str) -> None:
    seeded(pg_url, tmp_path / "tree")
    out = tmp_path / "runs.jsonl"
    _export(pg_url, out)
    target = f"sqlite:///{tmp_path / 'target.db'}"
    first = cli("--url", target, "import", str(out), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    with stalwart.Stalwart(target) as app:
        assert app.snapshots("snap-1") == []  # snapshots only with --with-snapshots
        assert app.handle("fails-1").status() == "failed"
    again = cli("--url", target, "import", str(out), cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "imported 0 runs, skipped 6"
    skipped = [line for line in again.stderr.splitlines() if line.startswith("skipped ")]
    assert sorted(line.split()[1].rstrip(":") for line in skipped) == RUNS
    resumes_on_a_worker(target, tmp_path)


def test_export_filters_and_unknown_ids(tmp_path: Path) -> None:
    source = f"sqlite:///{tmp_path / 'source.db'}"
    seeded(source, tmp_path / "tree")
    out = tmp_path / "suspended.jsonl"
    _export(source, out, "--status", "suspended")
    assert sorted(json.loads(line)["workflow_id"] for line in out.read_text().splitlines()) == [
        "ask-1",
        "talk-1",
    ]
    _export(source, out, "--name", "done", "--since", "1h")
    assert len(out.read_text().splitlines()) == 2
    missing = cli("--url", source, "export", "done-1", "nope", cwd=tmp_path)
    assert missing.returncode == 1
    assert json.loads(missing.stdout)["workflow_id"] == "done-1"
    assert missing.stderr.splitlines()[-1] == (
        "error: no run nope in the store; check the ids with stalwart ls"
    )


def test_import_reports_a_line_it_cannot_read_and_imports_the_rest(tmp_path: Path) -> None:
    source = f"sqlite:///{tmp_path / 'source.db'}"
    seeded(source, tmp_path / "tree")
    out = tmp_path / "runs.jsonl"
    _export(source, out, "done-1")
    good = out.read_text()
    out.write_text('{"not": "an export"}\n' + good + "{broken\n")
    target = f"sqlite:///{tmp_path / 'target.db'}"
    done = cli("--url", target, "import", str(out), cwd=tmp_path)
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert errors[0] == (
        f"error: {out} line 1: cannot read it: not a run of a stalwart export (format 1)"
    )
    assert errors[1].startswith(f"error: {out} line 3: cannot read it: not JSON")
    assert done.stdout.strip() == "imported 1 runs, skipped 0"
    with stalwart.Stalwart(target) as app:
        assert app.handle("done-1").result(timeout=5) == " ".join(f"word{i}" for i in range(2000))
