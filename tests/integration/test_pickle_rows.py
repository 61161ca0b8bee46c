"""An app with ``serializer="json"`` never unpickles what it finds in its store.

Whoever can write one row could otherwise run code in every worker; a row tagged as pickle is
refused with ``CorruptRecord`` saying how to read it (open the app with ``serializer="pickle"``).
"""

from __future__ import annotations

import contextlib
import pickle
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import stalwart
from stalwart._serde import make_codec

pytestmark = pytest.mark.timeout(60)


def _touch(path: str) -> str:
    """What unpickling the planted payload does: a visible side effect."""
    Path(path).write_text("unpickled")
    return "planted"


class Planted:
    """A pickled object whose loading calls :func:`_touch`."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_touch, (self.path,))


def _pickle_row(marker: Path) -> bytes:
    return b"P" + pickle.dumps(Planted(marker))


def _crashed_run(app: stalwart.Stalwart, calls: list[int]) -> Any:
    stop = {"on": True}

    @app.step(name="tool")
    def tool() -> str:
        calls.append(1)
        return "real"

    @app.step(name="halt")
    def halt() -> None:
        if stop["on"]:
            raise KeyboardInterrupt

    @app.workflow(name="agent")
    def agent() -> str:
        got = tool()
        halt()
        return got

    with pytest.raises(KeyboardInterrupt):
        app.run(agent, workflow_id="w")
    stop["on"] = False
    return agent


def test_a_json_app_refuses_a_pickled_step_output(
    app: stalwart.Stalwart, raw_sql: Callable[..., list[Any]], tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    calls: list[int] = []
    agent = _crashed_run(app, calls)
    raw_sql(
        app,
        "UPDATE journal SET output = :bad WHERE workflow_id = 'w' AND seq = 1",
        {"bad": _pickle_row(marker)},
    )
    with pytest.raises(stalwart.CorruptRecord, match="pickle") as info:
        app.run(agent, workflow_id="w")
    assert (info.value.workflow_id, info.value.seq) == ("w", 1)
    assert "serializer='pickle'" in str(info.value)
    assert app.handle("w").status() == "needs_attention"
    with pytest.raises(stalwart.CorruptRecord, match="pickle"):
        app.journal("w")
    assert not marker.exists()
    assert calls == [1]


def test_a_json_app_refuses_pickled_input_result_event_and_details(
    app: stalwart.Stalwart, raw_sql: Callable[..., list[Any]], tmp_path: Path
) -> None:
    marker = tmp_path / "marker"

    @app.workflow(name="echo")
    def echo(x: Any) -> Any:
        return x

    app.start(echo, 1, workflow_id="in")
    raw_sql(
        app, "UPDATE runs SET input = :bad WHERE workflow_id = 'in'", {"bad": _pickle_row(marker)}
    )
    with pytest.raises(stalwart.CorruptRecord, match="pickle"):
        app.run(echo, 1, workflow_id="in")

    assert app.run(echo, 2, workflow_id="out") == 2
    raw_sql(
        app, "UPDATE runs SET output = :bad WHERE workflow_id = 'out'", {"bad": _pickle_row(marker)}
    )
    with pytest.raises(stalwart.CorruptRecord, match="pickle"):
        app.handle("out").result()

    @app.workflow(name="waiter")
    def waiter() -> Any:
        return stalwart.wait_for_event("go")

    app.start(waiter, workflow_id="ev")
    app.send_event("ev", "go", "hello")
    raw_sql(
        app,
        "UPDATE events SET payload = :bad WHERE workflow_id = 'ev'",
        {"bad": _pickle_row(marker)},
    )
    with pytest.raises(stalwart.CorruptRecord, match="pickle"):
        app.run(waiter, workflow_id="ev")

    assert not marker.exists()


def test_a_json_app_refuses_pickled_approval_details(
    store_url: str, raw_sql: Callable[..., list[Any]], tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    with stalwart.Stalwart(store_url) as app:

        @app.workflow(name="asker")
        def asker() -> Any:
            return stalwart.request_approval("refund", {"amount": 5})

        def run() -> None:
            with contextlib.suppress(Exception):
                app.run(asker, workflow_id="ap")

        runner = threading.Thread(target=run, daemon=True)
        runner.start()
        deadline = time.monotonic() + 20
        while not app.approvals() and time.monotonic() < deadline:
            time.sleep(0.02)
        raw_sql(app, "UPDATE approvals SET details = :bad", {"bad": _pickle_row(marker)})
        with pytest.raises(stalwart.CorruptRecord, match="pickle"):
            app.approvals()
        app.cancel("ap")
        runner.join(20)
    assert not marker.exists()


def test_a_pickle_app_still_reads_json_and_pickle_rows(tmp_path: Path) -> None:
    codec = make_codec("pickle")
    assert codec.decode(make_codec("json").encode({"a": (1, 2)})) == {"a": (1, 2)}
    assert codec.decode(codec.encode({"a": {1, 2}})) == {"a": {1, 2}}
    with pytest.raises(ValueError, match="serializer='pickle'"):
        make_codec("json").decode(codec.encode([1]))


def test_rows_a_pickle_app_wrote_are_refused_by_a_json_app_on_the_same_file(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    marker = tmp_path / "marker"
    with stalwart.Stalwart(url, serializer="pickle") as writer:

        @writer.step(name="tool")
        def tool() -> Any:
            return Planted(marker)

        @writer.workflow(name="agent")
        def agent() -> None:
            tool()

        writer.run(agent, workflow_id="p")  # the pickle app reads its own rows
    assert marker.exists()
    marker.unlink()
    with stalwart.Stalwart(url) as reader, pytest.raises(stalwart.CorruptRecord, match="pickle"):
        reader.journal("p")
    assert not marker.exists()
