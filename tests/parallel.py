"""How ``make test`` shares the suite between pytest-xdist workers (``-n 4``, ``--dist load`` or
``loadgroup``).

Tests are handed out one at a time, so every worker stays busy to the end, except that

- the tests sharing a module- or session-scoped fixture of this suite (a console fleet, the
  HTTP API's scene, a served schema) form one group, run by one worker, so the fixture is built
  once;
- the tests that start worker processes on the PostgreSQL server the suite shares form one
  group, ``postgres-workers``, run by one worker, one test at a time: each such process holds
  ``concurrency + 7`` connections (docs/fleet.md), and three of these tests at once (three
  worker processes each, as the fleet tests start) would near the server's 100 connections;
- the tests marked ``exclusive`` run last, on one worker, once every other worker has finished
  and shut down: a PostgreSQL restart (it would cut every other test's connections), and a
  test whose time bound a test beside it could break (the fleet's shared breaker).

Each worker writes the groups of its collection to a file the controller named; the scheduler
reads them from there. (xdist's own channel, a suffix on each test id, does nothing on pytest 9:
pytest-xdist issue 1386.)

The longest units go out first (longest-processing-time first), by the tests' times in
``tests/durations.json``, so the suite does not end on one worker running a two-minute test
after the other has finished; a test not listed there counts as quick and keeps its place.
Refresh the file after adding slow tests: run the suite with ``--junitxml=report.xml``, then
``python tests/parallel.py report.xml``. Without ``-n`` none of this applies: one process runs
every test in order. The hooks are imported by ``conftest.py``.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

EXCLUSIVE = "exclusive"
POSTGRES_WORKERS = "postgres-workers"
# The fixtures that start worker processes (tests/faults/fault_harness.py's WorkerHarness, the
# fleets of test_fleet_chaos.py and test_queue_limits.py) on their test's store; on PostgreSQL
# only when the test's params say "postgres", except pg_workers, which is PostgreSQL's alone.
_WORKER_FIXTURES = frozenset({"workers", "oa_workers", "agent_workers", "fleet", "pg_workers"})
_SHARED_SCOPES = frozenset({"module", "package", "session"})
_GROUPS_INPUT = "stalwart_groups_file"
_GROUPS_DIR = pytest.StashKey[Path]()
DURATIONS = Path(__file__).with_name("durations.json")
_LISTED_FROM_S = 1.0  # quicker tests are left out of DURATIONS: their order matters little


def expected_seconds() -> dict[str, float]:
    """``{test id: seconds}`` of the slow tests, as ``tests/durations.json`` last measured them."""
    try:
        times: dict[str, float] = json.loads(DURATIONS.read_text())
    except FileNotFoundError:
        return {}
    return times


def starts_postgres_workers(item: pytest.Item) -> bool:
    """Whether ``item`` starts worker processes on the PostgreSQL server the suite shares."""
    names = set(getattr(item, "fixturenames", ()))
    if names.isdisjoint(_WORKER_FIXTURES):
        return False
    callspec = getattr(item, "callspec", None)
    return "pg_workers" in names or (
        callspec is not None and "postgres" in callspec.params.values()
    )


def group_of(item: pytest.Item) -> str | None:
    """The group ``item`` must share a worker with: ``exclusive``, ``postgres-workers``, the
    suite's module-, package- or session-scoped fixtures it uses (e.g. ``tests/ui_api::ui``),
    or none."""
    if item.get_closest_marker(EXCLUSIVE) is not None:
        return EXCLUSIVE
    if starts_postgres_workers(item):
        return POSTGRES_WORKERS
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return None
    shared = set()
    for name in info.names_closure:
        for fixturedef in info.name2fixturedefs.get(name, ()):
            if fixturedef.scope in _SHARED_SCOPES and fixturedef.baseid.startswith("tests"):
                shared.add(f"{fixturedef.baseid}::{name}")
    return "+".join(sorted(shared)) or None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """(Controller) Tell each worker where to write the groups of its collection."""
    stash = node.config.stash
    if _GROUPS_DIR not in stash:
        stash[_GROUPS_DIR] = Path(tempfile.mkdtemp(prefix="stalwart-xdist-"))
    node.workerinput[_GROUPS_INPUT] = str(stash[_GROUPS_DIR] / f"{node.gateway.id}.json")


@pytest.hookimpl(tryfirst=True)  # before the worker reports its collection to the controller
def pytest_collection_finish(session: pytest.Session) -> None:
    """(Worker) Write ``{test id: group}`` for the grouped tests of the final collection."""
    target = getattr(session.config, "workerinput", {}).get(_GROUPS_INPUT)
    if target is None:
        return
    groups = {item.nodeid: group for item in session.items if (group := group_of(item))}
    Path(target).write_text(json.dumps(groups))


def pytest_unconfigure(config: pytest.Config) -> None:
    """(Controller) Remove the groups' files."""
    if _GROUPS_DIR in config.stash:
        shutil.rmtree(config.stash[_GROUPS_DIR], ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``-n N`` (whose default ``--dist load`` would run the ``exclusive`` tests beside others)
    or ``--dist loadgroup``: the groups above, the ``exclusive`` one last and alone; another
    ``--dist`` mode keeps xdist's own scheduler."""
    if config.getvalue("dist") not in ("load", "loadgroup"):
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ExclusiveLastScheduling(LoadGroupScheduling):  # type: ignore[misc]
        """Load scheduling by group; the ``exclusive`` group goes, after every other unit is
        done, to the one worker still up."""

        _groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._groups is None:
                self._groups = {}
                for path in sorted(config.stash[_GROUPS_DIR].glob("*.json")):
                    self._groups.update(json.loads(path.read_text()))
            return self._groups.get(nodeid, nodeid)

        _ordered = False

        def _longest_first(self) -> None:
            """Order the work queue (built whole before the first unit goes out) by each
            unit's expected time, longest first; a stable sort keeps the rest in order."""
            known = expected_seconds()
            cost = {
                scope: sum(known.get(nodeid, 0.0) for nodeid in unit)
                for scope, unit in self.workqueue.items()
            }
            ordered = sorted(self.workqueue.items(), key=lambda entry: -cost[entry[0]])
            self.workqueue.clear()
            self.workqueue.update(ordered)
            self._ordered = True

        def _assign_work_unit(self, node: Any) -> None:
            if not self._ordered:
                self._longest_first()
            ordinary = [scope for scope in self.workqueue if scope != EXCLUSIVE]
            if ordinary:
                scope = ordinary[0]
            elif all(other is node for other in self.assigned_work):
                scope = EXCLUSIVE
            else:
                return  # _reschedule shuts this node down, or waits for the others to stop
            work_unit = self.workqueue.pop(scope)
            self.assigned_work.setdefault(node, {})[scope] = work_unit
            collection = self.registered_collections[node]
            node.send_runtest_some(
                [collection.index(nodeid) for nodeid, done in work_unit.items() if not done]
            )

        def _reschedule(self, node: Any) -> None:
            if node.shutting_down or list(self.workqueue) != [EXCLUSIVE]:
                super()._reschedule(node)
                return
            # Only the exclusive group is left: one node runs it once the others are gone.
            others = [other for other in self.assigned_work if other is not node]
            if any(not other.shutting_down for other in others):
                node.shutdown()
            elif not others:
                self._assign_work_unit(node)
            # else remove_node() calls back here when the last other node is down

        def remove_node(self, node: Any) -> str | None:
            crashitem: str | None = super().remove_node(node)
            for other in list(self.assigned_work):
                self._reschedule(other)
            return crashitem

    return ExclusiveLastScheduling(config, log)


def record(junit_xml: Path) -> dict[str, float]:
    """The times of a run's tests (setup, call and teardown) from its ``--junitxml`` report, by
    test id; only those of at least a second."""
    times: dict[str, float] = {}
    root = Path(__file__).parent.parent
    for case in ElementTree.parse(junit_xml).iter("testcase"):
        # classname is the module's dotted path, then any class: find where the file ends
        parts = case.get("classname", "").split(".")
        for cut in range(len(parts), 0, -1):
            module = "/".join(parts[:cut]) + ".py"
            if (root / module).is_file():
                nodeid = "::".join([module, *parts[cut:], case.get("name", "")])
                times[nodeid] = times.get(nodeid, 0.0) + float(case.get("time", 0.0))
                break
    return {nodeid: round(t, 1) for nodeid, t in sorted(times.items()) if t >= _LISTED_FROM_S}


if __name__ == "__main__":
    DURATIONS.write_text(json.dumps(record(Path(sys.argv[1])), indent=0) + "\n")
