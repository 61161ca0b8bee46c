"""The engine's shared state: what every layer below the app reads, and nothing that runs.

The app builds one :class:`Runtime`; the engine, the lease keeper, the operator verbs and the
worker take it (never the app). It starts no threads: the event loop it holds
(``_loop.AppLoop``) starts its thread on first use, and the lease keeper belongs to the
driver (``_engine.driver``).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import random
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._clock import Clock
from ._hooks import Observer
from ._leases import lease_prefix, new_owner
from ._loop import AppLoop
from ._registry import Registry
from ._serde import Codec
from ._store import Store
from ._store.base import READ_ONLY_DECLARATIONS, QueueLimits

__all__ = ["READ_ONLY_DECLARATIONS", "Runtime"]


@dataclass
class Runtime:
    """What the engine shares with the app: store, serializer, clock and policies."""

    url: str
    name: str  # the store as messages name it (``store_name``: absolute, password masked)
    store: Store
    codec: Codec
    clock: Clock
    lease_seconds: float
    max_recoveries: int
    registry: Registry
    loop: AppLoop  # every async run of this app in this process runs on it
    rng: random.Random = dataclasses.field(default_factory=random.Random)
    owner: str = dataclasses.field(default_factory=new_owner)
    queues: dict[str, QueueLimits] = dataclasses.field(default_factory=dict)
    prices: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)
    retention: float | None = None  # seconds an ended run is kept (None: forever)
    usage_warned: set[str] = dataclasses.field(default_factory=set)  # steps told of no usage
    observers: list[Observer] = dataclasses.field(default_factory=list)  # telemetry
    app: Callable[[], Any] = lambda: None  # a weak reference to the app that owns this runtime

    def __post_init__(self) -> None:
        self._claims = itertools.count(1)
        self.holder = lease_prefix(self.owner)  # what this app's lease holders start with
        runtime = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _call_if_alive(runtime, "_forked"))
        self.wakeup = threading.Event()  # set when this process changes something to claim
        self.settled = threading.Condition()  # notified when this process ends or parks a run
        self.settled_count = 0

    def _forked(self) -> None:
        """In a forked child: a process of its own, so an owner of its own."""
        self.owner = new_owner()
        self.holder = lease_prefix(self.owner)
        self._claims = itertools.count(1)
        self.loop.forget()

    def note_settled(self) -> None:
        """A run this process executed finished or suspended: wake callers waiting on it."""
        with self.settled:
            self.settled_count += 1
            self.settled.notify_all()
        self.store.changes.push()  # its own commits move no data_version
        streams = getattr(self.store, "stream_changes", self.store.changes)
        if streams is not self.store.changes:
            streams.push()  # a stream's reader here waits for its run's end

    def claim_owner(self) -> str:
        """A lease holder for one claim: this machine, process and app, and which claim it
        is, so that two claims of one run by the same app can never both write."""
        return f"{self.holder}#{next(self._claims)}"


def _call_if_alive(ref: weakref.ref[Any], method: str) -> None:
    target = ref()
    if target is not None:
        getattr(target, method)()
