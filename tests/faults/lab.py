"""The fault lab: real processes meeting real faults of the network, the database, the clock and
the disk. Reusable by any test (the scenarios in ``test_lab_*.py``, the chaos soak).

Everything here needs root (CI runs as root). :func:`require` skips a test with one line saying
what to install when a tool is missing, and fails it instead under ``CI=true``.

The API, by fault:

* **Network** — :class:`Namespace`: a network namespace with a veth pair to the host, addresses
  from a private /30 of :data:`LAB_NETWORK` (allocated under a file lock, so pytest-xdist workers
  never clash), names unique per process and test. ``ns.wrap`` is the command prefix that runs a
  program inside it (``WorkerHarness.start(wrap=ns.wrap)``); ``ns.url(server, db)`` is the URL a
  worker inside uses to reach the lab's PostgreSQL. ``ns.cut()`` drops every packet between the
  namespace and the host (``cut(reject=True)`` answers TCP resets instead), ``ns.degrade(delay_ms,
  loss)`` adds latency and loss (``tc netem``; on kernels without netem a delaying relay plus an
  ``iptables -m statistic`` rule, see ``lab_relay.py``), ``ns.heal()`` undoes both.
  ``ns.close()`` removes it all (the ``netns`` fixture does, even when the test fails).
* **Database** — :class:`~lab_postgres.PostgresServer` (re-exported): the lab's own server,
  ``start``/``stop``/``restart``; :func:`shared_postgres` is this process's one server; the
  ``lab_pg`` fixture gives each test a fresh database of it.
* **Processes** — :func:`pause` / :func:`resume`: SIGSTOP and SIGCONT (a worker paused past its
  lease).
* **Clock** — :func:`skewed_clock_env`: environment that runs a child under libfaketime with
  its wall clock moved by some seconds (``WorkerHarness.start(env=...)``).
* **Disk** — :class:`SmallDisk`: a size-limited tmpfs to put a SQLite store on; ``fill()``
  takes every free byte, ``free()`` gives them back.

Fixtures (``tests/faults/conftest.py``): ``lab_pg`` (a :class:`LabDatabase`: ``.url`` from the
host, ``.url_in(ns)`` from a namespace, ``.server`` to restart), ``netns`` (a factory:
``netns()`` makes a :class:`Namespace`), ``lab_workers`` (a ``WorkerHarness`` on ``lab_pg``;
start ``lab_agent.py`` workers with ``program=LAB_AGENT, wrap=ns.wrap, url=lab_pg.url_in(ns)``)
and ``small_disk``. Each cleans up after the test, failed or not; a lab namespace or server left
by a process killed hard is removed by the next one that starts.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from lab_postgres import LAB_NETWORK, PostgresServer, find_pg_bin, shared_postgres
from lab_relay import Relay

__all__ = [
    "FAKETIME_LIB",
    "LAB_NETWORK",
    "LabDatabase",
    "Namespace",
    "PostgresServer",
    "SmallDisk",
    "has_netem",
    "pause",
    "require",
    "resume",
    "shared_postgres",
    "skewed_clock_env",
]

FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
_LOCK_FILE = Path(tempfile.gettempdir()) / "stalwart-lab.lock"
_PREFIX = "swlab"


# -- what the lab needs ---------------------------------------------------------------------

_TOOLS = {
    "ip": "iproute2",
    "tc": "iproute2",
    "iptables": "iptables",
    "faketime": "faketime",
    "runuser": "util-linux",
    "mount": "mount",
}


def _faketime_lib() -> str | None:
    candidates = [FAKETIME_LIB, *Path("/usr/lib").glob("*/faketime/libfaketime.so.1")]
    return next((str(p) for p in candidates if Path(p).exists()), None)


def missing(*tools: str) -> str | None:
    """What is missing to run a lab test using ``tools`` (names of :data:`_TOOLS`, plus
    ``postgres`` for the lab's own server), as one line saying what to install; ``None`` when
    nothing is."""
    if os.geteuid() != 0:
        return "the fault lab needs root (network namespaces, iptables, tmpfs mounts): run as root"
    packages = sorted(
        {_TOOLS[tool] for tool in tools if tool in _TOOLS and shutil.which(tool) is None}
    )
    if "faketime" in tools and _faketime_lib() is None:
        packages = sorted({*packages, "faketime"})
    if "postgres" in tools and find_pg_bin() is None:
        packages.append("postgresql")
    if packages:
        return f"the fault lab needs {', '.join(packages)}: apt-get install -y {' '.join(packages)}"
    return None


def require(*tools: str) -> None:
    """Skip the calling test with one line naming what to install when a tool is missing;
    under ``CI=true`` fail instead (CI must run the lab, ``.ci/run`` installs it)."""
    reason = missing(*tools)
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def _sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


_NETEM: bool | None = None


def has_netem() -> bool:
    """Whether this kernel has ``tc``'s netem queueing discipline (probed once, on the
    loopback of a throwaway namespace)."""
    global _NETEM
    if _NETEM is None:
        name = f"{_PREFIX}-probe-{os.getpid()}"
        _sh("ip", "netns", "add", name)
        try:
            done = _sh(
                "ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "lo", "root", "netem",
                "delay", "1ms", check=False,
            )  # fmt: skip
            _NETEM = done.returncode == 0
        finally:
            _sh("ip", "netns", "del", name, check=False)
    return _NETEM


@dataclass
class LabDatabase:
    """A fresh database of this process's lab server (``lab.shared_postgres``)."""

    server: PostgresServer
    name: str

    @property
    def url(self) -> str:
        """The database's URL from the host (the test process)."""
        return self.server.url(self.name)

    def url_in(self, ns: Namespace) -> str:
        """The database's URL from inside ``ns``."""
        return ns.url(self.server, self.name)


# -- network namespaces ---------------------------------------------------------------------


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    with _LOCK_FILE.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _reap_stale() -> None:
    """Delete lab namespaces left by a process that no longer exists (a run killed hard)."""
    for line in _sh("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        parts = name.split("-")
        stale = len(parts) == 3 and parts[0] == _PREFIX and parts[1].isdigit()
        if stale and not Path(f"/proc/{parts[1]}").exists():
            _sh("ip", "netns", "del", name, check=False)


def _used_networks() -> set[ipaddress.IPv4Network]:
    out = _sh("ip", "-o", "-4", "addr", "show").stdout
    used = set()
    for line in out.splitlines():
        fields = line.split()
        if "inet" in fields:
            used.add(ipaddress.ip_interface(fields[fields.index("inet") + 1]).network)
    return used


_COUNTER = 0
_COUNTER_LOCK = threading.Lock()


class Namespace:
    """A network namespace linked to the host by a veth pair on a /30 of its own.

    ``host_addr`` is the host end's address (where the lab's server, or the relay, listens for
    this namespace), ``addr`` the namespace end's. Create with :meth:`create`.
    """

    def __init__(self, name: str, host_if: str, peer_if: str, net: ipaddress.IPv4Network) -> None:
        self.name = name
        self.host_if = host_if
        self.peer_if = peer_if
        hosts = list(net.hosts())
        self.host_addr, self.addr = str(hosts[0]), str(hosts[1])
        self._rules: list[list[str]] = []
        self._relays: dict[int, Relay] = {}
        self._netem = False
        self._delay = 0.0

    @classmethod
    def create(cls) -> Namespace:
        """A new namespace, its veth pair up and addressed, loopback up."""
        global _COUNTER
        with _COUNTER_LOCK:
            _COUNTER += 1
            n = _COUNTER
        pid = os.getpid()
        name = f"{_PREFIX}-{pid}-{n}"
        tag = f"{pid:x}{n:x}"[-10:]
        host_if, peer_if = f"swh{tag}", f"swp{tag}"
        with _locked():
            _reap_stale()
            used = _used_networks()
            net = next(
                s
                for s in ipaddress.ip_network(LAB_NETWORK).subnets(new_prefix=30)
                if not any(s.overlaps(u) for u in used)
            )
            ns = cls(name, host_if, peer_if, net)
            try:
                _sh("ip", "netns", "add", name)
                _sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", peer_if)
                _sh("ip", "link", "set", peer_if, "netns", name)
                _sh("ip", "addr", "add", f"{ns.host_addr}/30", "dev", host_if)
                _sh("ip", "link", "set", host_if, "up")
                ns.run("ip", "addr", "add", f"{ns.addr}/30", "dev", peer_if)
                ns.run("ip", "link", "set", peer_if, "up")
                ns.run("ip", "link", "set", "lo", "up")
            except BaseException:
                ns.close()
                raise
        return ns

    @property
    def wrap(self) -> list[str]:
        """The command prefix that runs a program inside this namespace (``ip netns exec``
        execs the program: its pid is the process's pid)."""
        return ["ip", "netns", "exec", self.name]

    def run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``cmd`` inside the namespace."""
        return _sh(*self.wrap, *cmd, check=check)

    def url(self, server: PostgresServer, database: str) -> str:
        """The URL a process inside reaches ``database`` of ``server`` by: the server's port on
        the veth's host address, or, on a kernel without netem, a relay there that
        :meth:`degrade` can slow down."""
        if has_netem():
            return server.url(database, host=self.host_addr)
        relay = self._relays.get(server.port)
        if relay is None:
            relay = self._relays[server.port] = Relay(self.host_addr, ("127.0.0.1", server.port))
            relay.delay = self._delay
        return server.url(database, host=self.host_addr, port=relay.port)

    # -- faults --------------------------------------------------------------------------

    def _add_rule(self, *rule: str) -> None:
        self.run("iptables", "-I", *rule)
        self._rules.append(list(rule))

    def cut(self, *, reject: bool = False) -> None:
        """Cut the link: every packet between the namespace and the host is dropped (with
        ``reject``, TCP is answered by a reset and the rest refused, so the cut is noticed at
        once)."""
        target = ["REJECT", "--reject-with", "tcp-reset"] if reject else ["DROP"]
        for chain, flag in (("OUTPUT", "-d"), ("INPUT", "-s")):
            if reject:
                self._add_rule(chain, flag, self.host_addr, "-p", "tcp", "-j", *target)
            else:
                self._add_rule(chain, flag, self.host_addr, "-j", *target)

    def drop_replies(self, containing: str) -> Callable[[], int]:
        """Drop every TCP packet from the host whose payload holds ``containing`` (the server's
        ``COMMIT`` tag: a commit happened and its acknowledgement never arrives), until
        :meth:`heal`. Returns a function that tells how many packets it dropped so far."""
        match = ["-m", "string", "--string", containing, "--algo", "bm"]
        self._add_rule("INPUT", "-s", self.host_addr, "-p", "tcp", *match, "-j", "DROP")

        def dropped() -> int:
            out = self.run("iptables", "-L", "INPUT", "-v", "-x", "-n", check=False).stdout
            lines = [line for line in out.splitlines() if f'"{containing}"' in line]
            return int(lines[0].split()[0]) if lines else 0

        return dropped

    def degrade(self, delay_ms: int = 200, loss: float = 0.05) -> None:
        """Delay what the namespace sends by ``delay_ms`` and drop a ``loss`` share of its
        packets, until :meth:`heal`."""
        if has_netem():
            self.run(
                "tc", "qdisc", "add", "dev", self.peer_if, "root", "netem",
                "delay", f"{delay_ms}ms", "loss", f"{loss * 100:g}%",
            )  # fmt: skip
            self._netem = True
            return
        self._delay = delay_ms / 1000
        for relay in self._relays.values():
            relay.delay = self._delay
        if loss > 0:
            self._add_rule(
                "OUTPUT", "-o", self.peer_if, "-m", "statistic", "--mode", "random",
                "--probability", f"{loss:g}", "-j", "DROP",
            )  # fmt: skip

    def heal(self) -> None:
        """Undo every :meth:`cut` and :meth:`degrade`."""
        while self._rules:
            self.run("iptables", "-D", *self._rules.pop(), check=False)
        if self._netem:
            self.run("tc", "qdisc", "del", "dev", self.peer_if, "root", check=False)
            self._netem = False
        self._delay = 0.0
        for relay in self._relays.values():
            relay.delay = 0.0

    def close(self) -> None:
        """Delete the namespace, its veth pair (deleting one end deletes both) and relays."""
        for relay in self._relays.values():
            relay.close()
        self._relays.clear()
        _sh("ip", "netns", "del", self.name, check=False)
        _sh("ip", "link", "del", self.host_if, check=False)


# -- processes and clocks -------------------------------------------------------------------


def pause(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    """Freeze ``proc`` (SIGSTOP): it holds its leases and connections but does nothing."""
    os.kill(proc.pid, signal.SIGSTOP)


def resume(proc: subprocess.Popen[bytes] | subprocess.Popen[str]) -> None:
    """Let a paused ``proc`` go on (SIGCONT) as if no time had passed, as far as it knows."""
    os.kill(proc.pid, signal.SIGCONT)


def skewed_clock_env(seconds: float) -> dict[str, str]:
    """Environment that runs a child under libfaketime with its wall clock ``seconds`` ahead
    (negative: behind): ``time.time`` and ``datetime.now`` read it. The monotonic clock is left
    alone, as on a real machine whose wall clock is off (libfaketime would shift it too, but it
    does not translate the deadlines of Python's timed waits, ``sem_clockwait`` on that clock,
    so every ``Event.wait(timeout)`` would sleep ``seconds`` longer, or forever); a Python
    child's ``time.sleep`` is mended by ``lab_faketime/sitecustomize.py``, which this puts
    first on ``PYTHONPATH``."""
    lib = _faketime_lib()
    if lib is None:
        raise RuntimeError("libfaketime not found: apt-get install -y faketime")
    shim = Path(__file__).with_name("lab_faketime")  # its sitecustomize mends time.sleep
    return {
        "PYTHONPATH": os.pathsep.join([str(shim), *(p for p in sys.path if p)]),
        "LD_PRELOAD": lib,
        "FAKETIME": f"{seconds:+g}s",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        "FAKETIME_NO_CACHE": "1",
    }


# -- disks ----------------------------------------------------------------------------------


class SmallDisk:
    """A tmpfs of ``size_kb`` KiB mounted on a fresh folder (``path``): a disk that fills up."""

    def __init__(self, root: Path, size_kb: int = 4096) -> None:
        self.path = root / "small-disk"
        self.path.mkdir()
        _sh("mount", "-t", "tmpfs", "-o", f"size={size_kb}k,mode=0755", "tmpfs", str(self.path))
        self._filler = self.path / ".filler"

    def free_bytes(self) -> int:
        """Bytes still free on it."""
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def fill(self, leave: int = 0) -> None:
        """Take every free byte but ``leave`` (rounded to a page) with a filler file."""
        with self._filler.open("ab") as filler:
            while self.free_bytes() > leave:
                block = min(65536, self.free_bytes() - leave)
                try:
                    filler.write(b"\0" * max(block, 4096))
                    filler.flush()
                except OSError:
                    break

    def free(self) -> None:
        """Give back what :meth:`fill` took."""
        self._filler.unlink(missing_ok=True)

    def close(self) -> None:
        """Unmount it (lazily: a process may still hold a file open)."""
        _sh("umount", "-l", str(self.path), check=False)
