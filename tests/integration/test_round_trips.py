"""What a run costs in store round trips: every store verb is one transaction (reads too), and
a one-step ``app.run`` makes two of them on every backend: create the run holding its lease,
then journal the step's outcome and finish the run together. Nothing is read back that this
process just wrote.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import stalwart
from stalwart import testing


@contextmanager
def verbs_called(app: stalwart.Stalwart) -> Iterator[list[str]]:
    """The store verbs this thread calls meanwhile, in order (background threads, such as the
    lease keeper's, are not counted)."""
    store = testing.store_of(app)
    calls: list[str] = []
    me = threading.get_ident()
    patched: dict[str, Any] = {}

    def counting(name: str, verb: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            # load_payload reads the store only for a payload kept apart from its row
            inline = name == "load_payload" and bytes(args[0])[:1] not in (b"H", b"M", b"Q", b"U")
            if threading.get_ident() == me and not inline:
                calls.append(name)
            return verb(*args, **kwargs)

        return call

    for name in dir(store):
        verb = getattr(store, name)
        if not name.startswith("_") and callable(verb):
            patched[name] = verb
            setattr(store, name, counting(name, verb))
    try:
        yield calls
    finally:
        for name in patched:
            delattr(store, name)


def _one_step(app: stalwart.Stalwart) -> Any:
    """A workflow of one step that doubles its argument."""

    @app.step
    def double(x: int) -> int:
        return 2 * x

    @app.workflow
    def one_step(x: int) -> int:
        return double(x)

    return one_step


def test_a_one_step_run_costs_two_store_transactions(app: stalwart.Stalwart) -> None:
    one_step = _one_step(app)

    assert app.run(one_step, 1, workflow_id="warm-up") == 2
    with verbs_called(app) as calls:
        assert app.run(one_step, 21, workflow_id="counted") == 42
    assert calls == ["create_run", "finish_run"]
    assert [e.status for e in app.journal("counted") if e.kind == "step"] == ["completed"]


def test_a_run_that_exists_is_read_before_it_is_taken(app: stalwart.Stalwart) -> None:
    """Creating first costs a finished run one refused insert and one read, nothing more."""

    @app.workflow
    def noop() -> str:
        return "done"

    assert app.run(noop, workflow_id="again") == "done"
    with verbs_called(app) as calls:
        assert app.run(noop, workflow_id="again") == "done"
    assert calls == ["create_run", "get_run"]


def test_the_end_of_a_run_created_here_leaves_out_its_parent_and_approvals(
    app: stalwart.Stalwart,
) -> None:
    """A top-level run that ``app.run`` created, and that opened no approval, has no parent to
    wake and no approval to close: its end leaves both statements out. A run that was taken
    over (it may be anyone's child) and a run that asked for an approval keep them."""
    store: Any = testing.store_of(app)
    woken: list[str] = []
    real = store._wake_parent

    def noted(conn: Any, workflow_id: str, now: float) -> None:
        woken.append(workflow_id)
        real(conn, workflow_id, now)

    store._wake_parent = noted
    one_step = _one_step(app)

    @app.workflow
    def gate() -> Any:
        decision = stalwart.request_approval("deploy")
        return decision is not None and decision.approved

    def approve_when_asked() -> None:
        deadline = time.monotonic() + 30
        while not app.approvals() and time.monotonic() < deadline:
            time.sleep(0.01)
        app.approve("asked")

    approving = threading.Thread(target=approve_when_asked)
    approving.start()
    try:
        assert app.run(one_step, 1, workflow_id="created") == 2
        assert app.run(gate, workflow_id="asked") is True
        app.start(one_step, 2, workflow_id="started")  # created pending, then taken
        assert app.run(one_step, 2, workflow_id="started") == 4
    finally:
        approving.join(timeout=30)
        del store._wake_parent
    assert woken == ["asked", "started"]
