"""The shared context as the engine serves it: versioned keys read and written by
compare-and-set.

In workflow code both calls are journaled (kind ``shared``, name ``"get <key>"`` or ``"set
<key>"``) through the replay cursor, so a replay gets the answers the first execution got; a
write is journaled in the transaction that makes it, so a crash can never leave a write
without its entry (which a replay would make again). Anywhere else (in a step, from a client)
they are plain store calls. A recorded answer is ``{"version": n, "value": v}``, or ``None``
for a compare-and-set that lost.
"""

from __future__ import annotations

import datetime as _dt
import getpass
from typing import Any

from .. import _inputs
from .._errors import CorruptRecord, SerializationError, UsageError
from .._model import EntryKind, EntryStatus, SharedWrite, Versioned
from .._runtime import Runtime
from .._serde import UnsupportedValue
from .._signals import LeaseLost
from .._store import Entry
from .._store.rows import SharedRow
from .invocation import Invocation, Recorded, guarded

__all__ = [
    "check_if_version",
    "check_key",
    "encode_value",
    "history",
    "read",
    "read_journaled",
    "who",
    "write",
    "write_journaled",
]


def check_key(key: Any, call: str) -> str:
    """``key`` checked as a shared key: a non-empty str."""
    if not isinstance(key, str) or not key:
        raise UsageError(f"{call}(key={key!r}): a shared key is a non-empty str")
    return _inputs.name(key, "key", call)


def check_if_version(if_version: Any, call: str) -> int | None:
    """``if_version`` checked: ``None`` or a version, an int >= 0."""
    if if_version is None:
        return None
    if isinstance(if_version, bool) or not isinstance(if_version, int) or if_version < 0:
        raise UsageError(
            f"{call}(if_version={if_version!r}): pass the version you read (an int >= 0, "
            "0 for a key never written), or None to write whatever the version is"
        )
    return if_version


def who(by: Any, call: str) -> str:
    """Who writes from outside a run: ``by``, else this process's user."""
    if by is not None:
        if not isinstance(by, str) or not by:
            raise UsageError(f"{call}(by={by!r}): pass who writes as a non-empty str, or None")
        return _inputs.name(by, "by", call)
    try:
        return getpass.getuser()
    except Exception:
        return "unknown"


def encode_value(runtime: Runtime, key: str, value: Any, call: str) -> bytes:
    """``value`` as stored; :class:`SerializationError` naming the call and the key when it
    cannot be."""
    try:
        return runtime.codec.encode(value)
    except UnsupportedValue as exc:
        raise SerializationError(
            f"{call}({key!r}): cannot serialize a value of type {exc.type_name} at "
            f"{exc.path}; write JSON-compatible values (or open the app with "
            "serializer='pickle')"
        ) from None


def _decoded(runtime: Runtime, row: SharedRow) -> Any:
    try:
        return runtime.codec.decode(row.value)
    except ValueError as exc:
        raise CorruptRecord(
            f"shared key {row.key!r}, version {row.version}: the stored value cannot be decoded "
            f"({exc}); restore the shared_writes table from a backup"
        ) from exc


# -- outside workflow code: plain store calls ----------------------------------------------


def read(runtime: Runtime, key: str) -> Versioned:
    """The key's value and version (``Versioned(None, 0)`` when never written)."""
    row = runtime.store.read_shared(key)
    if row is None:
        return Versioned(None, 0)
    return Versioned(_decoded(runtime, row), row.version)


def write(
    runtime: Runtime, key: str, payload: bytes, if_version: int | None, by: str
) -> Versioned | None:
    """Write the encoded ``payload`` as the key's next version (only if still ``if_version``)."""
    outcome = runtime.store.write_shared(
        key, payload, if_version=if_version, by=by, now=runtime.clock.time()
    )
    if outcome.version is None:
        return None
    return Versioned(runtime.codec.decode(payload), outcome.version)


def history(runtime: Runtime, key: str) -> list[SharedWrite]:
    """Every write of the key, oldest first."""
    return [
        SharedWrite(
            row.key,
            row.version,
            _decoded(runtime, row),
            row.by,
            _dt.datetime.fromtimestamp(row.at, _dt.UTC),
        )
        for row in runtime.store.shared_history(key)
    ]


# -- workflow code: through the replay cursor ----------------------------------------------


def _answer(inv: Invocation, rec: Recorded, *, lost_ok: bool) -> Versioned | None:
    """The recorded answer of ``rec``; a row that is not one aborts with ``CorruptRecord``."""
    value = inv.load_value(rec)
    if value is None and lost_ok:
        return None
    if isinstance(value, dict) and set(value) == {"version", "value"}:
        version = value["version"]
        if type(version) is int and version >= 0:
            return Versioned(value["value"], version)
    raise inv.corrupt(rec, f"the recorded answer {value!r} is not a versioned value")


def _entry(inv: Invocation, name: str, position: str, output: bytes | None, now: float) -> Entry:
    return Entry(
        kind=EntryKind.SHARED,
        name=name,
        status=EntryStatus.COMPLETED,
        seq=inv.alloc_seq(),
        position=position,
        attempt=1,
        started_at=now,
        finished_at=now,
        output=output,
    )


@guarded
def read_journaled(inv: Invocation, key: str) -> Versioned:
    """``shared_get`` in workflow code: read once, journaled, replayed identically."""
    inv.check_alive()
    position, name = inv.next_position(), f"get {key}"
    rec = inv.lookup(position, EntryKind.SHARED, name)
    if rec is not None:
        answer = _answer(inv, rec, lost_ok=False)
        assert answer is not None
        return answer
    inv.recovering = False
    runtime = inv.runtime
    with inv.journaling():
        current = read(runtime, key)
    payload = runtime.codec.encode({"version": current.version, "value": current.value})
    inv.append(_entry(inv, name, position, payload, runtime.clock.time()))
    return current


@guarded
def write_journaled(
    inv: Invocation, key: str, payload: bytes, if_version: int | None
) -> Versioned | None:
    """``shared_set`` in workflow code: the write and its journal entry in one transaction,
    fenced by the run's lease; a replay returns what the write decided."""
    inv.check_alive()
    position, name = inv.next_position(), f"set {key}"
    rec = inv.lookup(position, EntryKind.SHARED, name)
    if rec is not None:
        return _answer(inv, rec, lost_ok=True)
    inv.recovering = False
    runtime = inv.runtime
    value = runtime.codec.decode(payload)

    def encode_result(version: int | None) -> bytes:
        answer = None if version is None else {"version": version, "value": value}
        return runtime.codec.encode(answer)

    now = runtime.clock.time()
    entry = _entry(inv, name, position, None, now)
    with inv.journaling():
        outcome = runtime.store.write_shared(
            key,
            payload,
            if_version=if_version,
            by=inv.workflow_id,
            now=now,
            workflow_id=inv.workflow_id,
            owner=inv.owner,
            entry=entry,
            encode_result=encode_result,
        )
    if not outcome.held:
        inv.lease_lost.set()
        raise LeaseLost()
    return None if outcome.version is None else Versioned(value, outcome.version)
