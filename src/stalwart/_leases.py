"""Lease holders: who holds a run, and whether that process still exists.

A process's owner id (one per app: what logs, ``app.workers()`` and the journal name) is
short and readable, ``host-pid-suffix`` (``web-3-8121-1f0c``). A lease holder written on a
run is longer, ``HOST/pid/start/owner#claim``: the machine (its name, boot and process-id
namespace) and the process's start time come first, so that a worker on the same machine can
tell that the holder process is gone, and the owner id last.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket

__all__ = ["HOST", "HOSTNAME", "holder_is_gone", "lease_prefix", "new_owner", "worker_of"]

HOSTNAME = socket.gethostname()


def _machine() -> str:
    """This host as process ids see it: its name, and which boot and pid namespace it is.

    Two containers can share a hostname (host networking, or a name set on purpose) but not a
    pid namespace: a holder's pid means something only to a process that sees the same ones.
    """
    parts = []
    with contextlib.suppress(OSError), open("/proc/sys/kernel/random/boot_id") as f:
        parts.append(f.read().strip()[:8])
    with contextlib.suppress(OSError):
        parts.append(str(os.stat("/proc/self/ns/pid").st_ino))
    name = socket.gethostname().replace("/", "_")
    return "~".join([name, *parts])


HOST = _machine()


def _stat(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` after the command name (Linux), or ``None``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2 :].split()


def _start_ticks(pid: int) -> str | None:
    """The start time of process ``pid``, which tells a reused pid apart."""
    fields = _stat(pid)
    if fields is None:
        return None
    return fields[19].decode() if len(fields) > 19 else "?"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_SHORT_HOST = re.sub(r"[^A-Za-z0-9_-]", "_", HOSTNAME.split(".")[0]) or "host"
_issued: set[str] = set()  # the owner ids this process made: two apps never share one


def new_owner() -> str:
    """An owner id, ``host-pid-suffix``: the short host name, this process's id and a random
    suffix (apps in one process, and a process that reuses a pid, get another)."""
    while True:
        owner = f"{_SHORT_HOST}-{os.getpid()}-{secrets.token_hex(2)}"
        if owner not in _issued:
            _issued.add(owner)
            return owner


def lease_prefix(owner: str) -> str:
    """What the lease holders of ``owner`` (made in this process) start with:
    ``HOST/pid/start/owner``; a claim adds ``#n``."""
    pid = os.getpid()
    return f"{HOST}/{pid}/{_start_ticks(pid) or '?'}/{owner}"


def worker_of(holder: str) -> str:
    """The owner id of a lease holder (``web-3-8121-1f0c``), as logs and ``app.workers()``
    name it."""
    return holder.rsplit("/", 1)[-1].split("#", 1)[0]


def holder_is_gone(owner: str) -> bool:
    """True only when ``owner`` is a process on this host that no longer exists."""
    try:
        host, pid_text, start, _token = owner.rsplit("/", 3)
        pid = int(pid_text)
    except ValueError:
        return False
    if host != HOST:
        return False
    if not _alive(pid):
        return True
    fields = _stat(pid)
    if fields and fields[0] in (b"Z", b"X"):  # killed, not yet reaped by its parent
        return True
    current = _start_ticks(pid)
    return start != "?" and current is not None and current != start
