"""``stalwart migrate`` both ways (SQLite -> PostgreSQL, PostgreSQL -> SQLite): every row
copied and verified, the source unchanged, and a run suspended on an event in the source
resumed and completed by a real worker process of the target; its refusals."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from portable_agent import declare
from portable_stores import contents, resumes_on_a_worker, seeded, start_worker, stop, words

import stalwart
from cli_process import stalwart as cli
from store_urls import postgres_schema_url

pytestmark = pytest.mark.timeout(180)
HERE = Path(__file__).parent


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL schema."""
    yield from postgres_schema_url()


def _sqlite(tmp_path: Path, name: str) -> str:
    return f"sqlite:///{tmp_path / name}"


def _migrated(source: str, target: str, tmp_path: Path) -> None:
    before = contents(source)
    done = cli("--url", source, "migrate", "--to", target, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "MISMATCH" not in done.stdout
    assert "payloads digest" in done.stdout
    assert contents(source) == before  # the source is never changed
    assert contents(target) == before
    with stalwart.Stalwart(target) as app:
        assert app.handle("done-1").result(timeout=5) == words(2000)
        assert app.handle("talk-1").status() == "suspended"
        chunks = list(app.stream("talk-1", follow=False))
        assert stalwart.stream_text(chunks) == "thinking part 0 part 1 part 2 "
        assert [c.data for c in app.stream("done-1", stream="events", follow=False)] == [
            {"done": 2000}
        ]
        assert app.shared_get("plan").value == {"steps": ["a", "b", "c"]}
        assert len(app.shared_history("plan")) == 2
        assert [s.name for s in app.schedules()] == ["nightly"]
        assert app.usage("done-1") == _usage(source, "done-1")
        [ref] = app.snapshots("snap-1")
        app.restore(ref, tmp_path / "restored")
    assert (tmp_path / "restored" / "sub" / "b.bin").read_bytes() == bytes(range(256)) * 64


def _usage(url: str, workflow_id: str) -> Any:
    with stalwart.Stalwart(url) as app:
        return app.usage(workflow_id)


def test_migrate_sqlite_to_postgres_and_resume_there(tmp_path: Path, pg_url: str) -> None:
    source = _sqlite(tmp_path, "source.db")
    seeded(source, tmp_path / "tree")
    _migrated(source, pg_url, tmp_path)
    resumes_on_a_worker(pg_url, tmp_path)
    with stalwart.Stalwart(source) as app:
        assert app.handle("talk-1").status() == "suspended"  # the source went on with nothing


def test_migrate_postgres_to_sqlite_and_resume_there(tmp_path: Path, pg_url: str) -> None:
    seeded(pg_url, tmp_path / "tree")
    target = _sqlite(tmp_path, "target.db")
    _migrated(pg_url, target, tmp_path)
    resumes_on_a_worker(target, tmp_path)


def test_migrate_refuses_a_target_with_data(tmp_path: Path, pg_url: str) -> None:
    source = _sqlite(tmp_path, "source.db")
    seeded(source, tmp_path / "tree")
    with stalwart.Stalwart(pg_url) as other:
        other.shared_set("mine", 1)
    refused = cli("--url", source, "migrate", "--to", pg_url, cwd=tmp_path)
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[-1].startswith("error: the target store")
    assert "shared_writes" in refused.stderr
    with stalwart.Stalwart(pg_url) as other:
        assert [w.key for w in other.shared_history("mine")] == ["mine"]
        assert other.list_workflows() == []


def test_migrate_into_a_store_an_app_opened_with_its_queues(tmp_path: Path) -> None:
    source = _sqlite(tmp_path, "source.db")
    seeded(source, tmp_path / "tree")
    target = _sqlite(tmp_path, "target.db")
    with stalwart.Stalwart(target) as app:
        declare(app)  # its queue declarations do not make it a store with data
    done = cli("--url", source, "migrate", "--to", target, cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def test_migrate_refuses_while_a_worker_of_the_source_is_seen(tmp_path: Path) -> None:
    source = _sqlite(tmp_path, "source.db")
    seeded(source, tmp_path / "tree")
    worker = start_worker(source, tmp_path)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with stalwart.Stalwart(source) as app:
                if app.workers():
                    break
            time.sleep(0.1)
        target = _sqlite(tmp_path, "target.db")
        refused = cli("--url", source, "migrate", "--to", target, cwd=tmp_path)
        assert refused.returncode == 1
        assert refused.stderr.splitlines()[-1].startswith(
            "error: a worker of the source was seen within the last 30 s"
        )
        assert "--force" in refused.stderr
        forced = cli("--url", source, "migrate", "--to", target, "--force", cwd=tmp_path)
        assert forced.returncode == 0, forced.stderr
    finally:
        stop(worker)


def test_migrate_refuses_its_own_store(tmp_path: Path) -> None:
    source = _sqlite(tmp_path, "source.db")
    stalwart.Stalwart(source).close()
    refused = cli("--url", source, "migrate", "--to", source, cwd=tmp_path)
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[-1] == (
        "error: --to names the source store itself; give a new store's URL"
    )


def test_migrate_refuses_a_memory_target(tmp_path: Path) -> None:
    source = f"sqlite:///{tmp_path / 'source.db'}"
    stalwart.Stalwart(source).close()
    refused = cli("--url", source, "migrate", "--to", "memory://", cwd=tmp_path)
    assert refused.returncode == 1
    assert refused.stderr.splitlines()[-1] == (
        "error: --to memory:// keeps nothing after this command; give a real store's URL"
    )


def test_migrate_an_encrypted_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Everything moves sealed as it is, the digest key with it (the one the target's app
    derived on opening it gives way), and the target reads it with the same keys, and after a
    rekey without the first."""
    import base64
    import os

    k1, k2 = (base64.b64encode(os.urandom(32)).decode() for _ in range(2))
    monkeypatch.setenv("STALWART_ENCRYPTION_KEYS", f"k1:{k1}")
    source = _sqlite(tmp_path, "source.db")
    seeded(source, tmp_path / "tree")
    monkeypatch.setenv("STALWART_ENCRYPTION_KEYS", f"k2:{k2},k1:{k1}")
    with stalwart.Stalwart(source):
        pass  # the digest key is wrapped under k2 too
    target = _sqlite(tmp_path, "target.db")
    _migrated(source, target, tmp_path)
    with stalwart.Stalwart(target) as app:
        assert app.handle("done-1").result(timeout=5) == words(2000)
        while app.rekey():
            pass
    monkeypatch.setenv("STALWART_ENCRYPTION_KEYS", f"k2:{k2}")  # k1 dropped after the rekey
    with stalwart.Stalwart(target) as app:
        assert app.handle("done-1").result(timeout=5) == words(2000)
        assert app.shared_set("plan2", {"x": 1}) is not None  # writes: the digest key is there
