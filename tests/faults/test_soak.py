"""The chaos soak (issue 26 item 3): 4 workers over PostgreSQL, a mixed workload, random faults,
then the history checker. ``soak_driver`` says what it does, ``soak_checker`` what it checks.

It runs ``$STALWART_SOAK_SECONDS`` seconds of chaos (2 minutes by default, the form ``make test``
runs; ``make soak`` runs 10), prints the faults injected, the runs, the effects and the
violations (``-s`` shows them), and fails on any violation.

With the fault lab (``lab.py``: root, iproute2, iptables, PostgreSQL's server programs) the
workers run in network namespaces of their own over the lab's PostgreSQL, so the soak also cuts
a worker off from the database and restarts the database twice. Without it the soak runs on a
schema of ``$STALWART_TEST_POSTGRES_URL`` with SIGKILL and SIGSTOP only, and says so (under
``CI=true`` a missing lab fails the test instead).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from lab import LabDatabase, Namespace, missing, shared_postgres
from soak_driver import Lab, run_soak

from store_urls import postgres_schema_url

SECONDS = float(os.environ.get("STALWART_SOAK_SECONDS", "120"))
SETTLE_S = 240.0
LAB_TOOLS = ("ip", "iptables", "postgres", "runuser")


class SoakLab:
    """The soak's :class:`soak_driver.Lab`: a namespace per worker slot over one database of
    the lab's PostgreSQL."""

    def __init__(self, db: LabDatabase, netns: Callable[[], Namespace]) -> None:
        self.db = db
        self._netns = netns
        self.namespaces: dict[int, Namespace] = {}

    def worker(self, index: int) -> tuple[str, list[str]]:
        ns = self.namespaces.get(index)
        if ns is None:
            ns = self.namespaces[index] = self._netns()
        return self.db.url_in(ns), ns.wrap

    def partition(self, index: int) -> None:
        self.namespaces[index].cut()

    def heal(self, index: int) -> None:
        self.namespaces[index].heal()

    def restart_database(self) -> None:
        self.db.server.restart()


@pytest.fixture
def soak_store(request: pytest.FixtureRequest) -> Iterator[tuple[str, Lab | None]]:
    """The soak's store URL (seen from the test process) and its lab, or ``None`` when the
    lab's tools are missing (a schema of the test database then)."""
    reason = missing(*LAB_TOOLS)
    if reason is None:
        server = shared_postgres()
        db = LabDatabase(server, server.create_database())
        netns: Callable[[], Namespace] = request.getfixturevalue("netns")
        try:
            yield db.url, SoakLab(db, netns)
        finally:
            db.server.drop_database(db.name)
        return
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    print(f"\n(no fault lab: {reason}; partitions and database restarts are left out)")
    for url in postgres_schema_url():
        yield url, None


@pytest.mark.timeout(SECONDS + SETTLE_S + 180)
def test_chaos_soak(tmp_path: Path, soak_store: tuple[str, Lab | None]) -> None:
    url, lab = soak_store
    report = run_soak(url, tmp_path, SECONDS, lab=lab, settle_timeout=SETTLE_S)
    summary = report.summary()
    print("\n" + summary)
    (tmp_path / "summary.txt").write_text(summary)
    assert not report.violations, summary
    assert sum(report.faults.values()) >= SECONDS / 8, f"too few faults injected\n{summary}"
    assert report.statuses["completed"] >= SECONDS, f"too little work done\n{summary}"
