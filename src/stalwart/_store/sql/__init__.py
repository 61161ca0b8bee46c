"""The verbs every SQL backend shares; backends supply connections, transactions, retries and
the named queries (``sql/queries.sql``, with each dialect's own text of the few that differ
in ``sql/<backend>/queries.sql``: same names in every dialect).

``SQLStore`` is composed of one mixin per store role (``runs``, ``leases``, ``journal``,
``waits``, ``admin``, ``breakers``, ``reads``, ``children``, ``shared``, ``schedules``,
``spend``, ``snapshots``, ``versions``, ``streams``, ``prune``, ``ingress``) over the
plumbing in ``_base``.

Writers that touch a run begin by locking its row (``_lock_run``): on PostgreSQL that
serializes them per run as SQLite's ``BEGIN IMMEDIATE`` serializes every writer, so each verb
reads what the previous one committed and decides on it alone.
"""

from __future__ import annotations

from .admin import AdminVerbs
from .approvals import ApprovalVerbs
from .breakers import BreakerVerbs
from .children import ChildVerbs
from .ingress import IngressVerbs
from .journal import JournalVerbs
from .keys import KeyVerbs
from .leases import LeaseVerbs
from .messages import MessageVerbs
from .prune import PruneVerbs
from .reads import ReadVerbs
from .runs import RunVerbs
from .schedules import ScheduleVerbs
from .shared import SharedVerbs
from .snapshots import SnapshotVerbs
from .spend import SpendVerbs
from .streams import StreamVerbs
from .versions import VersionVerbs
from .waits import WaitVerbs

__all__ = ["SQLStore"]


class SQLStore(
    RunVerbs,
    LeaseVerbs,
    JournalVerbs,
    MessageVerbs,
    WaitVerbs,
    ApprovalVerbs,
    AdminVerbs,
    BreakerVerbs,
    ReadVerbs,
    SharedVerbs,
    ChildVerbs,
    ScheduleVerbs,
    SpendVerbs,
    SnapshotVerbs,
    VersionVerbs,
    KeyVerbs,
    StreamVerbs,
    PruneVerbs,
    IngressVerbs,
):
    """Store verbs over a DB-API-like connection; subclasses provide the plumbing."""
