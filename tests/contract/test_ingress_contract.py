"""The ingress counts on every backend: an upsert adds to a subscription's counts (creating
its row), concurrent adders never lose a count, and the listing reads them by name."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from stalwart._store import Entry, Store
from stalwart._store.ingress import IngressCount


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


def _run(store: Store, wid: str, count: IngressCount | None) -> bool:
    return store.create_run(
        workflow_id=wid,
        name="agent",
        status="pending",
        queue="default",
        priority=0,
        input=b"J[]",
        now=5.0,
        owner=None,
        lease_until=None,
        entry=Entry(kind="run", name="started", status="completed", input=b"J[]"),
        count=count,
    )


def test_a_run_or_event_is_counted_in_its_own_transaction_and_a_repeat_is_not(
    store: Store,
) -> None:
    orders = IngressCount("orders", "redis", "starts agent")
    assert _run(store, "orders:1", orders)
    assert not _run(store, "orders:1", orders)  # the id exists: nothing written, not counted
    assert _run(store, "other", None)
    paid = IngressCount("paid", "nats", "event 'paid'")
    note = Entry(kind="operator", name="send-event", status="completed")

    def send(key: str) -> bool:
        return store.deliver_event(
            "other", name="paid", payload=b"J1", dedup_key=key, now=6.0, entry=note, count=paid
        )

    assert send("m1")
    assert not send("m1")  # a repeated dedup_key: not counted again
    counts = {row.name: (row.accepted, row.rejected) for row in store.list_ingress()}
    assert counts == {"orders": (1, 0), "paid": (1, 0)}
