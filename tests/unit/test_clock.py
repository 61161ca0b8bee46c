"""The server-corrected clock: measured at start, refreshed, and never blocked by a failure."""

from __future__ import annotations

import time

from stalwart._clock import ServerClock


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
