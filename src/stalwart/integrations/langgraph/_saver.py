"""``StalwartSaver``: LangGraph's checkpoints in the app's store, through the extension port."""

from __future__ import annotations

import functools
import json
import logging
import random
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

import stalwart
from stalwart._extension import ExtensionStore, Transaction

from . import _schema as q
from ._async import ThreadedAsyncSaver
from ._prune import Pruner
from ._values import (
    LIST_TYPE,
    MAX_DEPTH,
    Element,
    digest,
    frame,
    link,
    list_digest,
    pack,
    rebuild,
    unpack,
)

__all__ = ["StalwartSaver"]

log = logging.getLogger("stalwart.integrations.langgraph")

_EMPTY = "empty"  # the type of a channel that has a version but no value
_CACHED_LISTS = 1024  # list versions remembered per saver, to extend them without a read


class _Blob(NamedTuple):
    """One channel version to store: a value whole (``elements`` is None) or a list."""

    channel: str
    version: str
    type: str
    data: bytes | None
    elements: list[Element] | None
    digests: list[bytes]


class _Lists:
    """The last list version this process stored or read per (thread, namespace, channel),
    with its elements' digests, so the next version can be stored as a link on top of it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: OrderedDict[tuple[str, str, str], tuple[str, list[bytes]]] = OrderedDict()

    def get(self, key: tuple[str, str, str]) -> tuple[str, list[bytes]] | None:
        with self._lock:
            return self._known.get(key)

    def remember(self, key: tuple[str, str, str], version: str, digests: list[bytes]) -> None:
        with self._lock:
            self._known[key] = (version, digests)
            self._known.move_to_end(key)
            while len(self._known) > _CACHED_LISTS:
                self._known.popitem(last=False)

    def forget(self, key: tuple[str, str, str]) -> None:
        with self._lock:
            self._known.pop(key, None)


def _where(config: RunnableConfig) -> tuple[str, str, str | None]:
    conf = config["configurable"]
    return str(conf["thread_id"]), str(conf.get("checkpoint_ns") or ""), get_checkpoint_id(config)


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint_id,
        }
    }


def _to_blob(
    serde: SerializerProtocol, channel: str, version: str, values: dict[str, Any]
) -> _Blob:
    """What to store for one channel version."""
    if channel not in values:
        return _Blob(channel, version, _EMPTY, None, None, [])
    value = values[channel]
    if type(value) is list and value:
        elements = [serde.dumps_typed(item) for item in value]
        return _Blob(channel, version, LIST_TYPE, None, elements, [digest(e) for e in elements])
    kind, data = serde.dumps_typed(value)
    return _Blob(channel, version, kind, pack(data), None, [])


def _some(data: bytes | None) -> bytes:
    if data is None:
        raise stalwart.StoreError("a LangGraph checkpoint row has no data")
    return data


def _put_blob(
    tx: Transaction,
    thread_id: str,
    ns: str,
    blob: _Blob,
    base: tuple[str, Sequence[bytes]] | None,
) -> bool:
    """Insert one channel version; whether it was new."""
    params: dict[str, Any] = {
        "thread_id": thread_id,
        "checkpoint_ns": ns,
        "channel": blob.channel,
        "version": blob.version,
        "type": blob.type,
        "base_version": None,
        "keep": 0,
        "depth": 0,
        "digest": None,
        "data": tx.seal(blob.data),
    }
    if blob.elements is not None:
        tail: Sequence[Element] = blob.elements
        step = link(*base, blob.elements) if base is not None else None
        if step is not None and step.base is not None:
            found = tx.fetchone(
                q.BLOB_BASE,
                {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "channel": blob.channel,
                    "version": step.base,
                },
            )
            # The base must still be there and hold what this process remembers of it.
            if (
                found is not None
                and found[1] is not None
                and bytes(found[1]) == list_digest(base[1] if base else [])
                and int(found[0]) + 1 < MAX_DEPTH
            ):
                tail = step.tail
                params.update(base_version=step.base, keep=step.keep, depth=int(found[0]) + 1)
        params["digest"] = list_digest(blob.digests)
        params["data"] = tx.seal(pack(frame(tail)))
    return tx.execute(q.PUT_BLOB, params) == 1


def _elements(
    chain: list[tuple[Any, ...]], thread_id: str, channel: str, version: str
) -> list[Element]:
    """A list version's elements from its chain of links ``(type, keep, data)``, root first."""
    if chain[0][1] != 0:  # the walk did not reach a root: a base row is missing
        raise stalwart.StoreError(
            f"LangGraph thread {thread_id!r}: the value of channel {channel!r} at version "
            f"{version} cannot be rebuilt (a version it extends is missing)"
        )
    return rebuild((int(keep), bytes(data)) for _kind, keep, data in chain)


def _opened(tx: Transaction, chain: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """A chain of links ``(type, keep, data)`` with each link's data opened (see
    ``Transaction.open``)."""
    return [(kind, keep, tx.open(data)) for kind, keep, data in chain]


class StalwartSaver(ThreadedAsyncSaver):
    """A LangGraph checkpoint saver on a stalwart app's store (SQLite or PostgreSQL)::

        graph = builder.compile(checkpointer=StalwartSaver(app))

    Checkpoints, their channel values and pending writes live in the store's
    ``ext_langgraph_*`` tables, in transactions on the app's own connections. A channel value
    is stored once per version; a list value (a conversation) is stored as what each version
    adds to the one before, so a thread grows with its state, not with its square.
    ``delete_thread``, ``delete_for_runs``, ``copy_thread`` and ``prune`` are implemented,
    each with its ``a*`` twin; every method may be called from any thread.
    """

    def __init__(self, app: stalwart.Stalwart, *, serde: SerializerProtocol | None = None) -> None:
        super().__init__(serde=serde)
        self._ext = ExtensionStore(app, q.NAMESPACE, q.MIGRATIONS)
        self._pg = self._ext.dialect == "postgres"
        self._lists = _Lists()

    # -- reading --------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names, or its thread's latest in its namespace."""
        thread_id, ns, checkpoint_id = _where(config)
        columns = q.COLUMNS_POSTGRES if self._pg else q.COLUMNS_SQLITE
        sql = f"{columns} WHERE {q.BY_THREAD} AND {q.BY_NS}"
        params: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
        if checkpoint_id:
            sql += f" AND {q.BY_ID}"
            params["checkpoint_id"] = checkpoint_id
        sql += q.NEWEST_FIRST + " LIMIT 1"

        def read(tx: Transaction) -> CheckpointTuple | None:
            row = tx.fetchone(sql, params)
            return None if row is None else self._assemble(tx, row)

        return self._ext.run(read)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first: of ``config``'s thread (and namespace, and id, when it
        names them), whose metadata has ``filter``'s values, older than ``before``."""
        sql, params = q.search(config, filter, before, limit, postgres=self._pg)

        def read(tx: Transaction) -> list[CheckpointTuple]:
            return [self._assemble(tx, row) for row in tx.fetchall(sql, params)]

        return iter(self._ext.run(read))

    def _assemble(self, tx: Transaction, row: tuple[Any, ...]) -> CheckpointTuple:
        thread_id, ns, checkpoint_id, parent_id, type_, data, metadata = row
        checkpoint = cast(
            Checkpoint,
            {**self.serde.loads_typed((type_, unpack(_some(tx.open(data))))), "id": checkpoint_id},
        )
        values = {}
        for channel, version in checkpoint["channel_versions"].items():
            found, value = self._value(tx, thread_id, ns, channel, str(version))
            if found:
                values[channel] = value
        writes = tx.fetchall(
            q.WRITES_OF,
            {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id},
        )
        writes.sort(key=lambda w: writes_sort_key(w[4], w[0], w[5]))
        pending: list[PendingWrite] = [
            (task_id, channel, self._loads(kind, tx.open(value)))
            for task_id, channel, kind, value, _path, _idx in writes
        ]
        return CheckpointTuple(
            config=_config(thread_id, ns, checkpoint_id),
            checkpoint={**checkpoint, "channel_values": values},
            metadata=cast(CheckpointMetadata, json.loads(metadata)),
            parent_config=_config(thread_id, ns, parent_id) if parent_id else None,
            pending_writes=pending,
        )

    def _value(
        self, tx: Transaction, thread_id: str, ns: str, channel: str, version: str
    ) -> tuple[bool, Any]:
        """``(True, value)`` of one channel version, ``(False, None)`` when it has none."""
        chain = tx.fetchall(
            q.BLOB_CHAIN,
            {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "channel": channel,
                "version": version,
                "max_depth": MAX_DEPTH,
            },
        )
        if not chain or chain[-1][0] == _EMPTY:
            return False, None
        chain = _opened(tx, chain)
        kind, _keep, data = chain[-1]
        if kind != LIST_TYPE:
            return True, self._loads(kind, data)
        elements = _elements(chain, thread_id, channel, version)
        self._lists.remember((thread_id, ns, channel), version, [digest(e) for e in elements])
        return True, [self.serde.loads_typed(e) for e in elements]

    def _loads(self, kind: str, stored: bytes | None) -> Any:
        return self.serde.loads_typed((kind, b"" if stored is None else unpack(bytes(stored))))

    # -- writing --------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store ``checkpoint``: the values of the channels in ``new_versions``, once per
        version, and the checkpoint's row (replacing a row of the same id)."""
        thread_id, ns, parent_id = _where(config)
        stored = dict(checkpoint)
        values = cast(dict[str, Any], stored.pop("channel_values", {}))
        del stored["id"]  # the row's key
        blobs = [
            _to_blob(self.serde, channel, str(version), values)
            for channel, version in new_versions.items()
        ]
        kind, data = self.serde.dumps_typed(stored)
        md = get_checkpoint_metadata(config, metadata)
        row = {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": checkpoint["id"],
            "parent_checkpoint_id": parent_id,
            "run_id": None if md.get("run_id") is None else str(md.get("run_id")),
            "type": kind,
            "checkpoint": pack(data),
            "metadata": json.dumps(md, ensure_ascii=False, default=str),
        }
        bases = {b.channel: self._lists.get((thread_id, ns, b.channel)) for b in blobs}

        def write(tx: Transaction) -> list[bool]:
            added = [_put_blob(tx, thread_id, ns, blob, bases[blob.channel]) for blob in blobs]
            sealed = {**row, "checkpoint": tx.seal(cast(bytes, row["checkpoint"]))}
            tx.execute(q.PUT_CHECKPOINT_POSTGRES if self._pg else q.PUT_CHECKPOINT_SQLITE, sealed)
            return added

        for blob, added in zip(blobs, self._ext.run(write), strict=True):
            if blob.elements is not None:
                key = (thread_id, ns, blob.channel)
                if added:
                    self._lists.remember(key, blob.version, blob.digests)
                else:  # that version was stored before, maybe with other elements
                    self._lists.forget(key)
        return _config(thread_id, ns, checkpoint["id"])

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes to the checkpoint ``config`` names. A write already stored
        under the same task and index is kept, except the special ones (errors, interrupts,
        resumes), which replace theirs."""
        thread_id, ns, checkpoint_id = _where(config)
        replace = all(channel in WRITES_IDX_MAP for channel, _ in writes)
        rows = []
        for i, (channel, value) in enumerate(writes):
            kind, data = self.serde.dumps_typed(value)
            rows.append(
                {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint_id,
                    "task_id": task_id,
                    "idx": WRITES_IDX_MAP.get(channel, i),
                    "channel": channel,
                    "type": kind,
                    "value": pack(data),
                    "task_path": task_path,
                }
            )
        sql = q.SET_WRITE if replace else q.ADD_WRITE

        def write(tx: Transaction) -> None:
            for row in rows:
                tx.execute(sql, {**row, "value": tx.seal(cast(bytes, row["value"]))})

        self._ext.run(write)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The next version of a channel: increasing, with a random part, so that two forks of
        one thread never give one version two values."""
        number = 0 if current is None else int(str(current).split(".")[0])
        return f"{number + 1:012}.{random.getrandbits(40):010x}"

    # -- deleting and copying -------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, value and write of a thread."""
        params = {"thread_id": str(thread_id)}

        def delete(tx: Transaction) -> None:
            for sql in q.DELETE_THREAD:
                tx.execute(sql, params)

        self._ext.run(delete)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) that the given runs wrote, and the
        values no other checkpoint uses."""
        pruner = self._pruner()
        self._ext.run(lambda tx: pruner.delete_runs(tx, [str(r) for r in run_ids]))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint, value and write of one thread to another."""
        params = {"source": str(source_thread_id), "target": str(target_thread_id)}

        def copy(tx: Transaction) -> None:
            for sql in q.COPY_THREAD:
                tx.execute(sql, params)

        self._ext.run(copy)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``"keep_latest"``: keep each namespace's latest checkpoint of each thread (and, for
        a thread with DeltaChannels, the ancestors its delta values are rebuilt from), delete
        the rest and the values only they used. ``"delete"``: delete the threads."""
        if strategy == "delete":
            for thread_id in thread_ids:
                self.delete_thread(thread_id)
            return
        if strategy != "keep_latest":
            raise ValueError(f"prune strategy {strategy!r}: use 'keep_latest' or 'delete'")
        pruner = self._pruner()
        for thread_id in thread_ids:
            self._ext.run(functools.partial(pruner.keep_latest, thread_id=str(thread_id)))

    def _pruner(self) -> Pruner:
        """The pruning of this saver, with its serializer as it is now (``with_allowlist``
        gives a copy of the saver another one)."""
        return Pruner(self.serde, postgres=self._pg)
