"""One clock per store: a server's, measured at start, refreshed, carried forward by the
monotonic clock and never blocked by a failure; this machine's for a store on it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import stalwart
from stalwart._clock import ServerClock, SystemClock
from stalwart.testing import runtime_of


def test_the_offset_is_applied_refreshed_and_kept_when_a_measurement_fails() -> None:
    answers: list[float | None] = [5.0, None, -2.0]
    clock = ServerClock(lambda: answers.pop(0), refresh_every=0.0)
    assert clock.offset == 5.0
    time.sleep(0.001)
    assert abs(clock.time() - (time.time() + 5.0)) < 0.05  # the refresh failed: offset kept
    time.sleep(0.001)
    assert abs(clock.time() - (time.time() - 2.0)) < 0.05
    assert answers == []


def test_an_unreachable_server_at_start_means_no_correction() -> None:
    clock = ServerClock(lambda: None, refresh_every=3600.0)
    assert clock.offset == 0.0
    assert abs(clock.time() - time.time()) < 0.05


def test_a_step_of_this_machines_wall_clock_does_not_move_the_servers_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = ServerClock(lambda: 5.0, refresh_every=3600.0)
    before = clock.time()
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 3600.0)  # NTP steps the clock an hour
    assert abs(clock.time() - before) < 0.05  # until the next measurement: the server's time
    assert abs(clock.time() - (real() + 5.0)) < 0.05


def test_a_store_on_this_machine_reads_this_machines_clock(tmp_path: Path) -> None:
    with stalwart.Stalwart(f"sqlite:///{tmp_path / 'runs.db'}") as app:
        assert type(runtime_of(app).clock) is SystemClock
