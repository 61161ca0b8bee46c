"""The chaos soak's driver: 4 workers over PostgreSQL, a mixed workload, random faults, then the
history checker (``soak_checker``).

For ``seconds`` the driver starts runs of every workflow of ``soak_workload`` at random, keeps a
schedule ticking, answers approvals, increments the shared counters from outside too, publishes
messages to RabbitMQ when a :class:`Publisher` is given, samples the runs it sees ``running``
(holder and lease, from the database) and injects a fault every few seconds into a random
worker: SIGKILL (a replacement starts), SIGSTOP for longer than the lease then SIGCONT, and,
through a :class:`Lab`, a network partition of the worker from the database and restarts of the
database. Every call it makes and every acknowledgement it gets is a line of its
``EffectLog``. Then it heals everything, lets every run settle, reads the history and checks it.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from soak_checker import (
    COUNTER_KEYS,
    Fault,
    LeaseSample,
    Violation,
    check,
    read_history,
)
from soak_workload import AMQP_ENV, LEASE_S, QUEUE_ENV, EffectLog, declare, read_logs

import stalwart

__all__ = ["Lab", "Publisher", "SoakReport", "run_soak"]

WORKLOAD = Path(__file__).with_name("soak_workload.py")
WORKERS = 4
READY_S = 60.0
KINDS = ("pay", "notify", "review", "family", "count", "talk")
SCHEDULE = "soak-tick"


class Lab(Protocol):
    """The network and database faults of the fault lab, for the soak's workers."""

    def worker(self, index: int, amqp_url: str | None) -> tuple[str, list[str], str | None]:
        """The store URL worker ``index`` uses, the command prefix that runs it, and the URL
        it reaches the broker at ``amqp_url`` by."""
        ...

    def partition(self, index: int) -> None:
        """Cut worker ``index`` off from the database."""
        ...

    def heal(self, index: int) -> None:
        """Give worker ``index`` its link back."""
        ...

    def restart_database(self) -> None:
        """Restart the database (returns once it accepts connections again)."""
        ...


class Publisher(Protocol):
    """Publishes messages to the queue the workers subscribe to."""

    url: str  # the broker, from the driver's process
    queue: str

    def publish(self, message_id: str, body: dict[str, Any]) -> None:
        """Publish ``body`` with the AMQP ``message_id``; returns once the broker confirmed."""
        ...


@dataclass
class SoakReport:
    """What a soak did and what the checker found."""

    seconds: float
    faults: Counter[str]
    statuses: Counter[str]
    effects: Counter[str]
    violations: list[Violation]
    elapsed: float
    seed: int
    notes: Counter[str] = field(default_factory=Counter)
    evidence: str = ""  # the journals of the first runs a violation names

    def summary(self) -> str:
        def fmt(c: Counter[str]) -> str:
            return ", ".join(f"{k} {v}" for k, v in sorted(c.items())) or "none"

        lines = [
            f"chaos soak: {self.seconds:.0f} s of chaos, settled after {self.elapsed:.0f} s "
            f"(seed {self.seed})",
            f"  faults injected: {sum(self.faults.values())} ({fmt(self.faults)})",
            f"  runs: {sum(self.statuses.values())} ({fmt(self.statuses)})",
            f"  effects and acknowledgements: {fmt(self.effects)}",
            f"  what the faults did: {fmt(self.notes)}",
            f"  violations: {len(self.violations)}",
        ]
        lines += [f"    {v}" for v in self.violations[:30]]
        return "\n".join(lines) + self.evidence


@dataclass
class _Worker:
    index: int
    proc: subprocess.Popen[bytes]
    out: Path
    stopped_until: float | None = None
    partitioned_until: float | None = None
    replaced: bool = False


class _Fleet:
    """The soak's worker processes."""

    def __init__(
        self, url: str, workdir: Path, lab: Lab | None, publisher: Publisher | None
    ) -> None:
        self.url = url
        self.workdir = workdir
        self.lab = lab
        self.publisher = publisher
        self.workers: list[_Worker] = []
        self.spawned = 0

    def spawn(self, index: int) -> _Worker:
        amqp = self.publisher.url if self.publisher else None
        url, wrap = self.url, list[str]()
        if self.lab is not None:
            url, wrap, amqp = self.lab.worker(index, amqp)
        cmd = [*wrap, sys.executable, str(WORKLOAD), url, str(self.workdir)]
        out = self.workdir / f"worker-{self.spawned}.out"
        self.spawned += 1
        env = dict(os.environ)
        env.pop("STALWART_URL", None)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        env["PYTHONUNBUFFERED"] = "1"
        if amqp and self.publisher is not None:
            env[AMQP_ENV], env[QUEUE_ENV] = amqp, self.publisher.queue
        with out.open("wb") as sink:
            proc = subprocess.Popen(
                cmd, stdout=sink, stderr=subprocess.STDOUT, cwd=self.workdir, env=env
            )
        worker = _Worker(index, proc, out)
        self.workers.append(worker)
        return worker

    def revive(self) -> int:
        """Start a replacement for each worker that exited before it was ready (the database
        was down as it opened the store: ``Stalwart()`` refuses an unreachable store); one that
        exits after it was ready fails the soak. Returns how many it replaced."""
        replaced = 0
        for worker in list(self.workers):
            if worker.replaced or worker.proc.poll() is None:
                continue
            if worker.proc.returncode == -signal.SIGKILL:
                continue
            if (self.workdir / f"ready-{self.pid(worker)}").exists():
                raise AssertionError(f"worker {worker.proc.pid} exited on its own\n{self.tail()}")
            worker.replaced = True
            self.spawn(worker.index)
            replaced += 1
        return replaced

    def live(self) -> list[_Worker]:
        return [w for w in self.workers if w.proc.poll() is None]

    def pid(self, worker: _Worker) -> int:
        """The pid that leases name: the worker's own, also under a wrapper (``ip netns exec``
        execs the program, so it keeps the pid)."""
        return worker.proc.pid

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_S
        for worker in self.live():
            while not (self.workdir / f"ready-{self.pid(worker)}").exists():
                if worker.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"worker {worker.proc.pid} never got ready\n{self.tail()}")
                time.sleep(0.05)

    def tail(self) -> str:
        return "\n".join(
            f"--- worker {w.proc.pid} (exit {w.proc.poll()})\n"
            + w.out.read_text(errors="replace")[-3000:]
            for w in self.workers
        )

    def close(self) -> None:
        for worker in self.workers:
            if worker.proc.poll() is None:
                os.kill(worker.proc.pid, signal.SIGCONT)
                os.kill(worker.proc.pid, signal.SIGKILL)
            worker.proc.wait()


def _retrying(what: Callable[[], Any], until: float) -> Any:
    """``what()``, retried while the store is out (a restart, say) until ``until``."""
    while True:
        try:
            return what()
        except stalwart.StoreError:
            if time.monotonic() > until:
                raise
            time.sleep(0.5)


class _Driver:
    def __init__(
        self,
        app: stalwart.Stalwart,
        workflows: dict[str, Any],
        fleet: _Fleet,
        rng: random.Random,
        publisher: Publisher | None,
    ) -> None:
        self.app = app
        self.wf = workflows
        self.fleet = fleet
        self.rng = rng
        self.publisher = publisher
        self.log = EffectLog(fleet.workdir)
        self.faults: list[Fault] = []
        self.fault_counts: Counter[str] = Counter()
        self.events: Counter[str] = Counter()  # what happened besides the faults
        self.samples: list[LeaseSample] = []
        self.n = 0
        # Held while the fleet's workers or the faults change: the healer's thread ends the
        # faults that are due beside the driver's own loop.
        self.lock = threading.Lock()

    # -- the workload ---------------------------------------------------------------------

    def start_one(self) -> None:
        self.n += 1
        kind = self.rng.choice(KINDS)
        wid = f"soak-{kind}-{self.n:05d}"
        args: tuple[Any, ...] = (COUNTER_KEYS[self.n % len(COUNTER_KEYS)],)
        if kind != "count":
            args = (self.n,)
        self.log.write("start", wid=wid, workflow=kind)
        self.app.start(self.wf[kind], *args, workflow_id=wid)
        self.log.write("started", wid=wid, workflow=kind)

    def publish_one(self) -> None:
        if self.publisher is None:
            return
        self.n += 1
        message_id = f"m{self.n:05d}"
        self.log.write("publish", id=message_id)
        self.publisher.publish(message_id, {"n": self.n})
        self.log.write("published", id=message_id)

    def increment(self) -> None:
        key = self.rng.choice(COUNTER_KEYS)
        current = self.app.shared_get(key)
        self.log.write("inc", key=key, version=current.version + 1)
        written = self.app.shared_set(
            key, (current.value or 0) + 1, if_version=current.version, by="driver"
        )
        if written is not None:
            self.log.write("inc_ack", wid="driver", key=key, version=written.version)

    def answer_approvals(self) -> None:
        for request in self.app.approvals():
            approve = self.rng.random() < 0.8
            self.log.write("decide", wid=request.workflow_id, approve=approve)
            try:
                if approve:
                    self.app.approve(request.workflow_id, by="soak")
                else:
                    self.app.reject(request.workflow_id, by="soak", reason="soak says no")
            except stalwart.InvalidOperation:
                continue  # decided meanwhile (a retry of a call whose answer was lost)
            self.log.write("decided", wid=request.workflow_id, approve=approve)

    def sample_leases(self) -> None:
        for wid, owner, expires, now in self.app_rows():
            pid = _holder_pid(owner)
            self.samples.append(LeaseSample(float(now), wid, pid, float(expires or 0.0)))

    def app_rows(self) -> list[tuple[str, str | None, float | None, float]]:
        import psycopg

        libpq, _, schema = self.fleet.url.partition("?schema=")
        options = f"-c search_path={schema}" if schema else ""
        with psycopg.connect(libpq, options=options, connect_timeout=5) as conn:
            rows = conn.execute(
                "SELECT workflow_id, lease_owner, lease_expires_at,"
                " EXTRACT(EPOCH FROM clock_timestamp()) FROM runs WHERE status = 'running'"
            ).fetchall()
        return [(str(w), o, e, float(n)) for w, o, e, n in rows]

    # -- faults ---------------------------------------------------------------------------

    def inject(self, kinds: tuple[str, ...]) -> None:
        now = time.time()
        healthy = [
            w for w in self.fleet.live() if w.stopped_until is None and w.partitioned_until is None
        ]
        if len(healthy) < 2:
            return
        kind = self.rng.choice(kinds)
        victim = self.rng.choice(healthy)
        pid = self.fleet.pid(victim)
        if kind == "kill":
            os.kill(victim.proc.pid, signal.SIGKILL)
            victim.proc.wait()
            victim.replaced = True
            self.faults.append(Fault("kill", pid, now, None))
            self.fleet.spawn(victim.index)
        elif kind == "stop":
            os.kill(victim.proc.pid, signal.SIGSTOP)
            victim.stopped_until = now + LEASE_S + self.rng.uniform(1.0, 4.0)
            self.faults.append(Fault("stop", pid, now, victim.stopped_until))
        elif kind == "partition" and self.fleet.lab is not None:
            self.fleet.lab.partition(victim.index)
            victim.partitioned_until = now + LEASE_S + self.rng.uniform(1.0, 6.0)
            self.faults.append(Fault("partition", pid, now, victim.partitioned_until))
        self.fault_counts[kind] += 1

    def restart_database(self) -> None:
        if self.fleet.lab is None:
            return
        began = time.time()
        self.fleet.lab.restart_database()
        self.faults.append(Fault("db_restart", 0, began, time.time()))
        self.fault_counts["db_restart"] += 1

    def heal_due(self, everything: bool = False) -> None:
        now = time.time()
        for w in self.fleet.workers:
            if w.stopped_until is not None and (everything or now >= w.stopped_until):
                if w.proc.poll() is None:
                    os.kill(w.proc.pid, signal.SIGCONT)
                self._end_fault("stop", self.fleet.pid(w), now)
                w.stopped_until = None
            if w.partitioned_until is not None and (everything or now >= w.partitioned_until):
                assert self.fleet.lab is not None
                self.fleet.lab.heal(w.index)
                self._end_fault("partition", self.fleet.pid(w), now)
                w.partitioned_until = None

    def _end_fault(self, kind: str, pid: int, now: float) -> None:
        for i, fault in enumerate(self.faults):
            if (
                fault.kind == kind
                and fault.pid == pid
                and fault.end is not None
                and fault.end > now
            ):
                self.faults[i] = Fault(kind, pid, fault.start, now)


class _Healer:
    """Ends the stops and partitions that are due, on a thread of its own. The driver's calls
    can wait on a row lock that a stopped or cut-off worker took mid-transaction (the driver's
    ``shared_set`` of a counter whose row a stopped worker's step locked), and only the fault's
    end releases it: ended from the driver's loop, that wait never ended."""

    def __init__(self, driver: _Driver) -> None:
        self._driver = driver
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-healer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            with self._driver.lock:
                self._driver.heal_due()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def _holder_pid(owner: str | None) -> int | None:
    """The pid in a lease holder ``HOST/pid/start/owner#claim``."""
    if not owner:
        return None
    try:
        return int(owner.rsplit("/", 3)[1])
    except (IndexError, ValueError):
        return None


def run_soak(
    url: str,
    workdir: Path,
    seconds: float,
    *,
    lab: Lab | None = None,
    publisher: Publisher | None = None,
    fault_every: float = 4.0,
    settle_timeout: float = 240.0,
    seed: int | None = None,
) -> SoakReport:
    """Run the soak for ``seconds`` on the store ``url`` (see the module docstring)."""
    seed = random.randrange(1 << 30) if seed is None else seed
    rng = random.Random(seed)
    kinds: tuple[str, ...] = ("kill", "stop", "partition") if lab else ("kill", "stop")
    fleet = _Fleet(url, workdir, lab, publisher)
    app = stalwart.Stalwart(url, lease_seconds=LEASE_S)
    healer: _Healer | None = None
    try:
        driver = _Driver(app, declare(app, workdir), fleet, rng, publisher)
        for i in range(WORKERS):
            fleet.spawn(i)
        fleet.wait_ready()
        app.schedule(driver.wf["tick"], "* * * * * */5", name=SCHEDULE)
        healer = _Healer(driver)
        began = time.monotonic()
        restarts = [began + seconds * f for f in (0.35, 0.7)] if lab else []
        next_fault = began + fault_every
        next_sample = next_start = began
        while (now := time.monotonic()) < began + seconds:
            until = now + 60.0
            if now >= next_start:
                next_start = now + 0.2
                _retrying(driver.start_one, until)
                if rng.random() < 0.2:
                    _retrying(driver.increment, until)
                if rng.random() < 0.3:
                    driver.publish_one()
                _retrying(driver.answer_approvals, until)
            if now >= next_sample:
                next_sample = now + 1.0
                _retrying(driver.sample_leases, until)
            with driver.lock:
                if revived := fleet.revive():
                    driver.events["workers that could not open the store, replaced"] += revived
                if now >= next_fault:
                    next_fault = now + fault_every * rng.uniform(0.5, 1.5)
                    driver.inject(kinds)
            if restarts and now >= restarts[0]:
                restarts.pop(0)
                driver.restart_database()
            time.sleep(0.05)
        chaos = time.monotonic() - began
        healer.close()
        driver.heal_due(everything=True)
        _retrying(lambda: app.unschedule(SCHEDULE), time.monotonic() + 60)
        _settle(driver, settle_timeout)
        history = read_history(
            app,
            workdir,
            samples=driver.samples,
            faults=driver.faults,
            grace=3 * LEASE_S + 5,
            queue=publisher.queue if publisher else "",
        )
        violations = check(history)
        driver.events["running runs sampled"] = len(driver.samples)
        evidence = "".join(
            f"\n--- journal of {wid}\n" + "\n".join(map(str, app.journal(wid)))
            for wid in list(
                dict.fromkeys(v.subject for v in violations if v.subject in history.runs)
            )[:3]
        )
        effects = Counter(
            line["op"] for line in history.log if line["op"] not in ("start", "decide", "inc")
        )
        return SoakReport(
            seconds=chaos,
            faults=driver.fault_counts,
            statuses=Counter(run.status for run in history.runs.values()),
            effects=effects,
            violations=violations,
            elapsed=time.monotonic() - began,
            seed=seed,
            notes=history.notes + driver.events,
            evidence=evidence,
        )
    finally:
        if healer is not None:
            healer.close()
        fleet.close()
        app.close()


def _settle(driver: _Driver, timeout: float) -> None:
    """Answer approvals and sample leases until every run is terminal or needs attention."""
    deadline = time.monotonic() + timeout
    while True:
        until = time.monotonic() + 60
        _retrying(driver.answer_approvals, until)
        _retrying(driver.sample_leases, until)
        busy: dict[str, int] = {}
        # the messages first: a run a message starts after the statuses were counted would
        # pass for settled (the checker then found it pending or running)
        published = sum(line["op"] == "published" for line in read_logs(driver.fleet.workdir))
        if driver.publisher is not None:
            ingested = _retrying(lambda: driver.app.count_workflows(name="ingested"), until)
            busy["messages not yet consumed"] = max(0, published - ingested)
        for status in ("pending", "running", "suspended"):
            busy[status] = _retrying(partial(driver.app.count_workflows, status=status), until)
        if not any(busy.values()):
            return
        driver.fleet.revive()
        if time.monotonic() > deadline:  # the checker reports the runs left over
            print(f"runs not settled after {timeout} s: {busy}", file=sys.stderr)
            for worker in driver.fleet.live():
                os.kill(worker.proc.pid, signal.SIGUSR1)
            time.sleep(0.5)
            return
        time.sleep(0.5)
