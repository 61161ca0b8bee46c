"""The fault lab's own PostgreSQL server: a test may stop, kill or restart it mid-load.

``initdb`` and ``pg_ctl`` (from ``PATH``, ``/usr/local/bin`` or ``/usr/lib/postgresql/*/bin``)
build a cluster in a temporary folder owned by the ``postgres`` OS user (the server refuses to
run as root, so every command runs through ``runuser -u postgres --`` when this process is
root). It listens on a free port on every address (``listen_addresses = '*'``) so that the host
end of each lab namespace's veth pair reaches it, while ``pg_hba.conf`` admits only 127.0.0.1 and
the lab's private network (:data:`LAB_NETWORK`). ``fsync`` is off: the lab tests faults of the
network and of processes, not of the machine's power.

One server serves every lab test of a process (:func:`shared_postgres`, stopped when the process
exits); each test takes a fresh database of it (:meth:`PostgresServer.create_database`).
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

__all__ = ["LAB_NETWORK", "PostgresServer", "find_pg_bin", "shared_postgres"]

LAB_NETWORK = "10.213.0.0/16"  # every lab namespace's /30 is carved out of it
START_TIMEOUT_S = 60


def find_pg_bin() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``, or ``None`` when PostgreSQL's server
    programs are not installed."""
    found = shutil.which("initdb")
    candidates = [Path(found).resolve().parent] if found else []
    candidates.append(Path("/usr/local/bin"))
    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]
    for folder in candidates:
        if (folder / "initdb").exists() and (folder / "pg_ctl").exists():
            return folder
    return None


_PREFIX = "stalwart-lab-pg-"


def _reap_orphans() -> None:
    """Stop and delete the lab servers of test processes that no longer exist (killed hard,
    so their ``atexit`` never ran)."""
    for root in Path(tempfile.gettempdir()).glob(f"{_PREFIX}*"):
        try:
            owner = int((root / "owner").read_text())
        except (OSError, ValueError):
            continue
        if Path(f"/proc/{owner}").exists():
            continue
        pid_file = root / "data" / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError, IndexError):
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGQUIT)  # immediate stop
        shutil.rmtree(root, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    """A PostgreSQL cluster of the lab's own, in a temporary folder, on a free port.

    ``start``/``stop``/``restart``/``kill`` act on it alone; ``url`` names one of its databases
    as reached from the host (127.0.0.1) or from a namespace (the veth's host address).
    """

    def __init__(self, root: Path | None = None) -> None:
        bin_dir = find_pg_bin()
        if bin_dir is None:
            raise RuntimeError("initdb not found: apt-get install postgresql")
        self.bin = bin_dir
        _reap_orphans()
        self.root = Path(root or tempfile.mkdtemp(prefix=_PREFIX))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = _free_port()
        self._as_postgres = os.geteuid() == 0
        self._initdb()
        (self.root / "owner").write_text(str(os.getpid()))

    # -- commands ------------------------------------------------------------------------

    def _run(self, *args: str, timeout: float = START_TIMEOUT_S) -> None:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise RuntimeError(
                f"{' '.join(args[:1])} failed ({done.returncode}): {done.stderr.strip()}\n{tail}"
            )

    def _initdb(self) -> None:
        if self._as_postgres:
            shutil.chown(self.root, "postgres", "postgres")
        self.root.chmod(0o755)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync")
        settings = {
            "listen_addresses": "'*'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.root}'",
            "fsync": "off",
            "full_page_writes": "off",
            "synchronous_commit": "off",
            "max_connections": "300",
            "shared_buffers": "32MB",
            "log_min_messages": "warning",
        }
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())
        (self.data / "pg_hba.conf").write_text(
            "local all all trust\n"
            "host all all 127.0.0.1/32 trust\n"
            f"host all all {LAB_NETWORK} trust\n"
        )

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``mode``: ``smart``, ``fast`` or ``immediate``, as ``pg_ctl``);
        every connection is cut."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "60", "-m", mode, "stop")

    def restart(self, mode: str = "fast") -> float:
        """Stop and start the server (cutting every connection); returns how long it took."""
        began = time.monotonic()
        self.stop(mode)
        self.start()
        return time.monotonic() - began

    def running(self) -> bool:
        """Whether the server answers on its port."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def close(self) -> None:
        """Stop the server (if it runs) and delete its folder."""
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    # -- databases -----------------------------------------------------------------------

    def url(
        self, database: str = "postgres", host: str = "127.0.0.1", port: int | None = None
    ) -> str:
        """A URL of ``database`` reached at ``host`` (and ``port``, by default the server's)."""
        return f"postgresql://postgres@{host}:{port or self.port}/{database}"

    def create_database(self) -> str:
        """Create a fresh database; returns its name."""
        import psycopg

        name = f"lab_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True, connect_timeout=10) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return name

    def terminate(self, database: str) -> int:
        """Close every server connection to ``database`` from the server's side (as a restart
        would, for that database alone); returns how many it closed."""
        import psycopg

        query = (
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()"
        )
        with psycopg.connect(self.url(), autocommit=True, connect_timeout=10) as conn:
            row = conn.execute(query, (database,)).fetchone()
        return int(row[0]) if row else 0

    def drop_database(self, name: str) -> None:
        """Drop ``name``, cutting its remaining connections (the server may be down: then it
        is started first)."""
        import psycopg

        if not self.running():
            self.start()
        with psycopg.connect(self.url(), autocommit=True, connect_timeout=10) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


_SHARED: PostgresServer | None = None
_SHARED_LOCK = threading.Lock()


def shared_postgres() -> PostgresServer:
    """This process's lab server, started on first use and stopped when the process exits
    (one per pytest-xdist worker; deliberately not a session fixture, which would put every
    lab test on one xdist worker, see ``tests/parallel.py``). A test that stopped it gets it
    started again."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            server = PostgresServer()
            atexit.register(server.close)
            server.start()
            _SHARED = server
        elif not _SHARED.running():
            _SHARED.start()
        return _SHARED
