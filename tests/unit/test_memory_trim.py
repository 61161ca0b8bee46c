"""A worker gives memory back once per burst of runs, after it has been quiet a while."""

from __future__ import annotations

from stalwart._memory import QUIET_S, Trimmer


def test_trims_once_after_a_burst_when_quiet() -> None:
    released: list[float] = []
    trimmer = Trimmer(lambda: released.append(now))
    now = 0.0
    trimmer.note(0, now)  # idle from the start: nothing to give back
    now = 10.0
    trimmer.note(0, now)
    assert released == []
    trimmer.note(3, 11.0)  # a burst
    now = 12.0
    trimmer.note(0, now)  # quiet from here
    now = 12.0 + QUIET_S / 2
    trimmer.note(0, now)
    assert released == []
    now = 12.0 + QUIET_S
    trimmer.note(0, now)
    assert released == [now]
    now += 10
    trimmer.note(0, now)  # still quiet: once per burst
    assert len(released) == 1


def test_a_run_starting_again_restarts_the_quiet_spell() -> None:
    released: list[bool] = []
    trimmer = Trimmer(lambda: released.append(True))
    trimmer.note(1, 0.0)
    trimmer.note(0, 1.0)
    trimmer.note(1, 1.0 + QUIET_S / 2)  # busy again before the spell was long enough
    trimmer.note(0, 2.0 + QUIET_S / 2)
    trimmer.note(0, 2.0 + QUIET_S)
    assert released == []
    trimmer.note(0, 2.0 + QUIET_S * 1.5)
    assert released == [True]
