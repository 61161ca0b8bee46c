"""The copy under the commands, on every backend (memory, SQLite, PostgreSQL): a run exported
from one store and imported into another reads back the same, and ``copy_store`` copies and
verifies a store into a memory one."""

from __future__ import annotations

from pathlib import Path

import pytest

import stalwart
from stalwart import testing
from stalwart._store.keys import ENCRYPTED_SCHEMA
from stalwart._store.portable.exporting import Selection, export_runs
from stalwart._store.portable.importing import import_lines
from stalwart._store.portable.migrate import copy_store

pytestmark = pytest.mark.filterwarnings("ignore::stalwart.NotDurableWarning")


def _declare(app: stalwart.Stalwart) -> object:
    @app.step
    def long_text(n: int) -> list[str]:
        stalwart.emit("working")
        return [f"line {i} " * 20 for i in range(n)]

    @app.workflow(name="writer")
    def writer(n: int) -> int:
        return len(long_text(n))

    return writer


def test_export_import_and_copy_on_every_backend(store_url: str) -> None:
    with stalwart.Stalwart(store_url) as source:
        writer = _declare(source)
        assert source.run(writer, 300, workflow_id="w-1") == 300
        lines = [line for _id, line, _status in export_runs(testing.store_of(source), Selection())]
        with stalwart.Stalwart("memory://") as target:
            _declare(target)
            outcomes = list(import_lines(testing.store_of(target), [t for t in lines if t]))
            assert [o.outcome for o in outcomes] == ["imported"]
            assert target.handle("w-1").result(timeout=5) == 300
            entries = target.journal("w-1")
            assert [e.name for e in entries] == [e.name for e in source.journal("w-1")]
            assert [c.data for c in target.stream("w-1", follow=False)] == ["working"]
        with stalwart.Stalwart("memory://") as copy:
            report = copy_store(testing.store_of(source), testing.store_of(copy))
            assert report.ok, report.counts
            assert copy.handle("w-1").result(timeout=5) == 300
            assert copy.usage("w-1") == source.usage("w-1")


def test_importing_encrypted_runs_makes_older_code_refuse_the_store(tmp_path: Path) -> None:
    """An export of an encrypted store carries sealed values; importing one is a first
    encrypted write like any other: release 0.2 must refuse the target from then on."""
    ring = stalwart.Keyring({"k1": bytes(range(32))})
    with stalwart.Stalwart(f"sqlite:///{tmp_path / 'sealed.db'}", encryption=ring) as source:
        writer = _declare(source)
        assert source.run(writer, 30, workflow_id="w-1") == 30
        lines = [line for _id, line, _status in export_runs(testing.store_of(source), Selection())]
    plain = _plain_lines(tmp_path)
    with stalwart.Stalwart(f"sqlite:///{tmp_path / 'target.db'}") as target:
        store = testing.store_of(target)
        oldest = store.schema_version().oldest_compatible
        assert [o.outcome for o in import_lines(store, [t for t in plain if t])] == ["imported"]
        assert store.schema_version().oldest_compatible == oldest  # plaintext: nothing changes
        assert [o.outcome for o in import_lines(store, [t for t in lines if t])] == ["imported"]
        assert store.schema_version().oldest_compatible == ENCRYPTED_SCHEMA


def _plain_lines(tmp_path: Path) -> list[str | None]:
    with stalwart.Stalwart(f"sqlite:///{tmp_path / 'plain.db'}") as app:
        writer = _declare(app)
        assert app.run(writer, 3, workflow_id="p-1") == 3
        return [line for _id, line, _status in export_runs(testing.store_of(app), Selection())]
