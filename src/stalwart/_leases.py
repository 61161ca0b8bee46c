"""Lease holders: who holds a run, and whether that process still exists."""

from __future__ import annotations

import contextlib
import os
import socket
import uuid

__all__ = ["HOST", "holder_is_gone", "new_owner"]


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


def new_owner() -> str:
    """A lease owner id: ``host/pid/start/token``; the token tells apps in one process apart."""
    pid = os.getpid()
    return f"{HOST}/{pid}/{_start_ticks(pid) or '?'}/{uuid.uuid4().hex[:12]}"


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
