"""The fault lab itself: its faults really happen, and only where they are aimed.

A process in a namespace reaches the lab's PostgreSQL until the link is cut; a cut or a delay of
one namespace leaves another alone; a restart of the lab's server cuts its connections; a small
disk fills up; a skewed clock is seen by Python in the child.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
from lab import Namespace, SmallDisk, require, skewed_clock_env

from conftest import LabDatabase

pytestmark = pytest.mark.faults

PROBE = """
import json, sys, time, psycopg
url, count = sys.argv[1], int(sys.argv[2])
took = []
try:
    with psycopg.connect(url, connect_timeout=3) as conn:
        for _ in range(count):
            began = time.monotonic()
            conn.execute("SELECT 1").fetchone()
            took.append(time.monotonic() - began)
    print(json.dumps({"ok": True, "took": took}))
except Exception as exc:
    print(json.dumps({"ok": False, "error": type(exc).__name__}))
"""


def _probe(ns: Namespace, url: str, count: int = 3) -> dict[str, object]:
    done = subprocess.run(
        [*ns.wrap, sys.executable, "-c", PROBE, url, str(count)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_a_namespace_reaches_the_lab_database_until_its_link_is_cut(
    lab_pg: LabDatabase, netns: Callable[[], Namespace]
) -> None:
    one, other = netns(), netns()
    assert one.addr != other.addr
    assert _probe(one, lab_pg.url_in(one))["ok"] is True
    one.cut()
    assert _probe(one, lab_pg.url_in(one))["ok"] is False
    assert _probe(other, lab_pg.url_in(other))["ok"] is True  # only the aimed link is cut
    one.heal()
    assert _probe(one, lab_pg.url_in(one))["ok"] is True


def test_a_degraded_link_is_slow_and_the_others_are_not(
    lab_pg: LabDatabase, netns: Callable[[], Namespace]
) -> None:
    slow, fast = netns(), netns()
    slow.degrade(delay_ms=200, loss=0.0)
    slow_took = _probe(slow, lab_pg.url_in(slow))["took"]
    assert isinstance(slow_took, list) and min(slow_took) >= 0.19
    fast_took = _probe(fast, lab_pg.url_in(fast))["took"]
    assert isinstance(fast_took, list) and min(fast_took) < 0.19
    slow.heal()


def test_a_restart_of_the_lab_database_cuts_its_connections(lab_pg: LabDatabase) -> None:
    import psycopg

    with psycopg.connect(lab_pg.url, autocommit=True) as conn:
        lab_pg.server.restart()
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    with psycopg.connect(lab_pg.url, autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_small_disk_fills_up_and_frees(small_disk: SmallDisk) -> None:
    small_disk.fill()
    with pytest.raises(OSError), (small_disk.path / "more").open("wb") as f:
        f.write(b"x" * 65536)
        f.flush()
    small_disk.free()
    assert small_disk.free_bytes() > 1_000_000


def test_a_skewed_child_sees_its_clock_moved() -> None:
    require("faketime")
    env = {**skewed_clock_env(-30)}
    done = subprocess.run(
        [sys.executable, "-c", "import time; print(time.time())"],
        capture_output=True,
        text=True,
        env={**dict(__import__("os").environ), **env},
        timeout=30,
        check=True,
    )
    assert float(done.stdout) - time.time() == pytest.approx(-30, abs=5)
