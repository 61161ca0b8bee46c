"""The ingress counts on every backend: an upsert adds to a subscription's counts (creating
its row), concurrent adders never lose a count, and the listing reads them by name."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from stalwart._store import Store


def test_counts_are_created_then_added_to_and_listed_by_name(store: Store) -> None:
    assert store.list_ingress() == []
    store.count_ingress(
        "orders", kind="rabbitmq", target="starts agent", accepted=0, rejected=0, now=1.0
    )
    store.count_ingress(
        "orders", kind="rabbitmq", target="starts agent", accepted=1, rejected=0, now=2.0
    )
    store.count_ingress(
        "orders", kind="rabbitmq", target="starts agent", accepted=0, rejected=1, now=3.0
    )
    store.count_ingress(
        "github", kind="webhook", target="event 'push'", accepted=2, rejected=0, now=4.0
    )
    rows = store.list_ingress()
    assert [(r.name, r.kind, r.target, r.accepted, r.rejected) for r in rows] == [
        ("github", "webhook", "event 'push'", 2, 0),
        ("orders", "rabbitmq", "starts agent", 1, 1),
    ]
    assert rows[1].updated_at == 3.0


def test_a_new_declaration_replaces_kind_and_target_and_keeps_the_counts(store: Store) -> None:
    store.count_ingress(
        "orders", kind="rabbitmq", target="starts a", accepted=3, rejected=1, now=1.0
    )
    store.count_ingress("orders", kind="redis", target="event 'x'", accepted=0, rejected=0, now=2.0)
    (row,) = store.list_ingress()
    assert (row.kind, row.target, row.accepted, row.rejected) == ("redis", "event 'x'", 3, 1)


def test_concurrent_counts_add_up(store: Store) -> None:
    def add(_: int) -> None:
        store.count_ingress("s", kind="nats", target="starts a", accepted=1, rejected=0, now=1.0)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(add, range(40)))
    (row,) = store.list_ingress()
    assert row.accepted == 40
