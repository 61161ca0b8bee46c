"""Deleting part of a thread: ``prune(strategy="keep_latest")`` and ``delete_for_runs``, then
the channel values no remaining checkpoint reaches (directly or as the base of a link).

It needs of the saver only how to read a checkpoint (its serializer) and the store's dialect,
so it takes those and the saver imports it, never the other way round."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from stalwart._extension import Transaction

from . import _schema as q
from ._values import unpack

__all__ = ["Pruner"]


@dataclass(frozen=True)
class Pruner:
    """Deletes checkpoints inside a transaction, reading them with ``serde`` (the saver's
    serializer as of the call) on a PostgreSQL store (``postgres``) or a SQLite one."""

    serde: SerializerProtocol
    postgres: bool

    def _versions(self, tx: Transaction, kind: str, data: bytes) -> dict[str, str]:
        checkpoint = self.serde.loads_typed((kind, unpack(tx.open(data) or b"")))
        return {channel: str(v) for channel, v in checkpoint["channel_versions"].items()}

    def _lineage(self, tx: Transaction, thread_id: str, ns: str) -> list[Any]:
        sql = q.LINEAGE_POSTGRES if self.postgres else q.LINEAGE_SQLITE
        return tx.fetchall(sql, {"thread_id": thread_id, "checkpoint_ns": ns})

    def collect(self, tx: Transaction, thread_id: str, ns: str) -> int:
        """Delete the values of ``(thread_id, ns)`` that no checkpoint left reaches; how many."""
        where = {"thread_id": thread_id, "checkpoint_ns": ns}
        wanted = [
            (channel, version)
            for _id, _parent, kind, data, _md in self._lineage(tx, thread_id, ns)
            for channel, version in self._versions(tx, kind, data).items()
        ]
        bases = {(c, v): b for c, v, b in tx.fetchall(q.BLOB_EDGES, where)}
        reached: set[tuple[str, str]] = set()
        for key in wanted:
            current: tuple[str, str] | None = key
            while current is not None and current in bases and current not in reached:
                reached.add(current)
                base = bases[current]
                current = None if base is None else (current[0], base)
        unreached = [key for key in bases if key not in reached]
        for channel, version in unreached:
            tx.execute(q.DELETE_BLOB, {**where, "channel": channel, "version": version})
        return len(unreached)

    def _kept(self, tx: Transaction, thread_id: str, ns: str, rows: list[Any]) -> set[str]:
        """The latest checkpoint of a namespace (``rows``, newest first) and, when its graph
        has DeltaChannels, its ancestors back to the nearest that stores each one's value:
        LangGraph rebuilds a delta channel from those ancestors' writes."""
        latest_id, _parent, _kind, _data, metadata = rows[0]
        kept = {latest_id}
        remaining = set(json.loads(metadata).get("counters_since_delta_snapshot") or {})
        by_id = {row[0]: row for row in rows}
        current = rows[0]
        where = {"thread_id": thread_id, "checkpoint_ns": ns}
        while remaining and current is not None:
            checkpoint_id, parent_id, kind, data, _md = current
            kept.add(checkpoint_id)
            versions = self._versions(tx, kind, data)
            for channel in list(remaining):
                if channel not in versions:
                    continue
                found = tx.fetchone(
                    q.BLOB_TYPE, {**where, "channel": channel, "version": versions[channel]}
                )
                if found is not None and found[0] != "empty":
                    remaining.discard(channel)
            current = by_id.get(parent_id) if parent_id else None
        return kept

    def keep_latest(self, tx: Transaction, *, thread_id: str) -> None:
        """Prune one thread to the latest checkpoint of each of its namespaces."""
        for (ns,) in tx.fetchall(q.NAMESPACES_OF, {"thread_id": thread_id}):
            rows = self._lineage(tx, thread_id, ns)
            if not rows:
                continue
            kept = self._kept(tx, thread_id, ns, rows)
            for row in rows:
                if row[0] not in kept:
                    params = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": row[0]}
                    for sql in q.DELETE_CHECKPOINT:
                        tx.execute(sql, params)
            self.collect(tx, thread_id, ns)

    def delete_runs(self, tx: Transaction, run_ids: list[str]) -> None:
        """Delete what the runs ``run_ids`` checkpointed, then the values left unreached."""
        touched: set[tuple[str, str]] = set()
        for run_id in run_ids:
            for thread_id, ns, checkpoint_id in tx.fetchall(
                q.CHECKPOINTS_OF_RUN, {"run_id": run_id}
            ):
                params = {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint_id,
                }
                for sql in q.DELETE_CHECKPOINT:
                    tx.execute(sql, params)
                touched.add((thread_id, ns))
        for thread_id, ns in sorted(touched):
            self.collect(tx, thread_id, ns)
