"""Payload garbage collection on an encrypted store: each sealed payload row lists the rows it
refers to in clear (keyed digests), and a column never seals a tree's root, so the collector
proves rows unused without a key. A run's rows that no other run shares go when it is pruned;
what another run still uses stays and reads. A sealed row written before refs were kept
(schema 26) stops the collector. An export carries a sealed tree whole, without a key."""

from __future__ import annotations

import datetime as _dt
import os
import time
from typing import Any

import stalwart
from stalwart import testing
from stalwart._store.portable.exporting import Selection, export_runs
from stalwart._store.portable.importing import import_lines

KEY = os.urandom(32)


def _ring() -> stalwart.Keyring:
    return stalwart.Keyring({"k1": KEY})


def _declare(app: stalwart.Stalwart) -> tuple[Any, Any]:
    @app.step
    def grow(tag: str, n: int) -> list[dict[str, str]]:
        return [{"role": "user", "content": f"{tag} message {i} " * 12} for i in range(n)]

    @app.workflow(name="first")
    def first(tag: str) -> dict[str, Any]:
        common, own = grow("common", 30), grow(tag, 30)
        return {"turns": len(common) + len(own), "last": own[-1]["content"][:20]}

    @app.workflow(name="second")
    def second(tag: str) -> dict[str, Any]:
        common, own = grow("common", 30), grow(tag, 30)
        return {"turns": len(common) + len(own), "last": own[-1]["content"][:20]}

    return first, second


def _soon() -> _dt.datetime:
    """A cutoff an hour ahead: every ended run is older."""
    return _dt.datetime.now(_dt.UTC) + _dt.timedelta(hours=1)


def _count(store: Any, where: str = "") -> int:
    return int(testing.execute_sql(store, f"SELECT count(*) FROM payloads {where}")[0][0])


def test_pruning_a_run_of_an_encrypted_store_collects_the_rows_only_it_used(
    shared_url: str,
) -> None:
    with stalwart.Stalwart(shared_url, encryption=_ring()) as app:
        first, second = _declare(app)
        app.run(first, "alpha", workflow_id="a")
        app.run(second, "beta", workflow_id="b")
        store = testing.store_of(app)
        assert _count(store, "WHERE refs IS NULL") == 0  # every row sealed, with its refs
        before = _count(store)
        assert app.prune(_soon(), name="first") == 1
        gone = store.collect_payloads(now=time.time() + 7200)
        assert gone > 0 and _count(store) == before - gone
        assert app.handle("b").result() == {"turns": 60, "last": "beta message 29 beta"}
        outputs = [e.output for e in app.journal("b") if e.kind == "step"]
        assert outputs and all(len(output) == 30 for output in outputs)
        assert app.prune(_soon(), name="second") == 1
        store.collect_payloads(now=time.time() + 7200)
        assert _count(store) == 0  # nothing references anything any more


def test_a_row_sealed_before_refs_were_kept_stops_the_collector(shared_url: str) -> None:
    with stalwart.Stalwart(shared_url, encryption=_ring()) as app:
        first, _second = _declare(app)
        app.run(first, "alpha", workflow_id="a")
        store = testing.store_of(app)
        testing.execute_sql(store, "UPDATE payloads SET refs = NULL")  # as schema 23 wrote them
        before = _count(store)
        assert app.prune(_soon()) == 1
        assert store.collect_payloads(now=time.time() + 7200) == 0
        assert _count(store) == before


def test_an_export_of_an_encrypted_run_carries_its_tree_whole(shared_url: str) -> None:
    with stalwart.Stalwart(shared_url, encryption=_ring()) as source:
        first, _second = _declare(source)
        result = source.run(first, "alpha", workflow_id="a")
        lines = [line for _id, line, _ in export_runs(testing.store_of(source), Selection())]
    target_url = shared_url.replace("shared.db", "target.db")
    if target_url == shared_url:  # PostgreSQL: the same schema, after the run is gone
        with stalwart.Stalwart(shared_url, encryption=_ring()) as source:
            assert source.prune(_soon()) == 1
            testing.store_of(source).collect_payloads(now=time.time() + 7200)
            assert _count(testing.store_of(source)) == 0
    with stalwart.Stalwart(target_url, encryption=_ring()) as target:
        _declare(target)
        outcomes = import_lines(testing.store_of(target), [line for line in lines if line])
        assert [o.outcome for o in outcomes] == ["imported"]
        assert target.handle("a").result() == result
        steps = [e.output for e in target.journal("a") if e.kind == "step"]
        assert steps and all(len(output) == 30 for output in steps)
