"""Fixtures of the crash tests and the fault lab; the harnesses live in ``fault_harness.py``
and ``lab.py``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fault_harness import Harness, WorkerHarness
from lab import LabDatabase, Namespace, SmallDisk, require, shared_postgres

from store_urls import postgres_schema_url


@pytest.fixture(params=["sqlite", "postgres"])
def fault_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The store the crash tests share with their children: a SQLite file, or a PostgreSQL
    schema of their own."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.db'}"
    else:
        yield from postgres_schema_url()


@pytest.fixture
def agent(tmp_path: Path, fault_url: str) -> Iterator[Harness]:
    """Spawns agents on the store of ``fault_url``; kills leftover children at the end."""
    harness = Harness(tmp_path, fault_url)
    try:
        yield harness
    finally:
        harness.close()


@pytest.fixture
def workers(tmp_path: Path, fault_url: str) -> Iterator[WorkerHarness]:
    """Starts ``worker_agent.py`` workers on the store of ``fault_url``; kills leftovers."""
    harness = WorkerHarness(tmp_path, fault_url)
    try:
        yield harness
    finally:
        harness.close()


# -- the fault lab (lab.py): namespaces, its own PostgreSQL, small disks -------------------


@pytest.fixture
def lab_pg() -> Iterator[LabDatabase]:
    """A fresh database of the lab's own PostgreSQL (restartable at will), dropped afterwards."""
    require("postgres", "runuser")
    server = shared_postgres()
    db = LabDatabase(server, server.create_database())
    try:
        yield db
    finally:
        db.server.drop_database(db.name)


@pytest.fixture
def netns() -> Iterator[Callable[[], Namespace]]:
    """A factory of network namespaces (``netns()`` makes one); all are deleted afterwards."""
    require("ip", "iptables", "tc")
    made: list[Namespace] = []

    def make() -> Namespace:
        made.append(Namespace.create())
        return made[-1]

    try:
        yield make
    finally:
        for ns in made:
            ns.close()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    """A 4 MiB tmpfs to put a SQLite store on; unmounted afterwards."""
    require("mount")
    disk = SmallDisk(tmp_path)
    try:
        yield disk
    finally:
        disk.close()


@pytest.fixture
def lab_workers(tmp_path: Path, lab_pg: LabDatabase) -> Iterator[WorkerHarness]:
    """Starts workers (``program=lab_agent.LAB_AGENT``) on the ``lab_pg`` database; kills
    leftovers."""
    harness = WorkerHarness(tmp_path, lab_pg.url)
    try:
        yield harness
    finally:
        harness.close()
