"""The delivery core: one message (a broker's or a webhook's) into the store, exactly once.

Signature (what a broker consumer and a webhook route both call)::

    verdict = delivery.deliver(subscription, message_id, body)   # blocking; a thread's call
    verdict.outcome      # Outcome.ACCEPTED | Outcome.DUPLICATE | Outcome.REJECTED
    verdict.workflow_id  # the run started, or the run the event went to (None if rejected
                         # before one was known)
    verdict.reason       # why it was rejected (None otherwise)

``delivery`` is the app's :class:`Delivery` (``ingress_of(app).delivery``), ``subscription`` a
:class:`Subscription` (a webhook's: ``target_of(runtime, name, kind="webhook", start=...,
event=..., to=..., call="app.webhook")`` from ``_ingress.subscribing``, registered with
``ingress_of(app).add(...)`` so ``app.subscriptions()`` lists it), ``message_id`` the broker's
or the webhook's delivery id, ``body`` the raw bytes. It decodes the body as JSON,
checks it against the workflow's argument annotation (or asks ``to(body)`` for the run of an
event), then starts the run ``"<name>:<message id>"`` or sends the event with ``dedup_key`` =
message id: a repeat of a message id changes nothing (``DUPLICATE``). ACCEPTED is counted in
the store (``ingress_sources``, fleet-wide) in the transaction that writes the run or event,
so a crash never separates them; REJECTED is counted alone (nothing else is written); both in
the worker's Prometheus counters too. A rejection is logged at WARNING with its reason. A
store error is raised, never a verdict: the caller must not acknowledge the message (it is
delivered again).

A broker consumer hands the messages it has ready together::

    verdicts = delivery.deliver_all(subscription, [(message_id, body, problem), ...])

for a subscription that starts runs: the runs of the batch (each with its accepted count) are
written by one store call, in one transaction, the batch's rejections counted by one more; a
verdict per message, in order; a store error raised for the whole batch, none of which may then
be acknowledged.
"""

from __future__ import annotations

import enum
import inspect
import json
import logging
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._errors import InvalidOperation, UsageError, WorkflowNotFound
from .._model import run_id
from .._serde import UnsupportedValue
from .._store.ingress import IngressCount

if TYPE_CHECKING:
    from .._engine.driver import Driver
    from .._metrics import Metrics
    from .._operator import Operator
    from .._registry import WorkflowDef

__all__ = ["Delivery", "Outcome", "Subscription", "Verdict", "argument_check"]

log = logging.getLogger("stalwart")


class Outcome(enum.StrEnum):
    """What became of a message."""

    ACCEPTED = "accepted"  # a run started, or an event delivered
    DUPLICATE = "duplicate"  # its id was seen before: nothing written
    REJECTED = "rejected"  # its body does not fit: nothing written, never to be retried


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of one delivery."""

    outcome: Outcome
    workflow_id: str | None
    reason: str | None = None


@dataclass(frozen=True)
class Subscription:
    """Where messages go: each starts a run of ``start``, or is sent as event ``event`` to the
    run ``to(body)`` names. ``source`` is a broker source (``None`` for a webhook)."""

    name: str
    kind: str
    start: WorkflowDef | None = None
    event: str | None = None
    to: Callable[[Any], str] | None = None
    concurrency: int = 16
    source: Any = None
    check: Callable[[Any], None] | None = None  # raises when a body does not fit ``start``

    @property
    def target(self) -> str:
        """What a message does, for listings: ``starts agent`` or ``event 'paid'``."""
        if self.start is not None:
            return f"starts {self.start.name}"
        return f"event {self.event!r}"


def _count(sub: Subscription) -> IngressCount:
    return IngressCount(sub.name, sub.kind, sub.target)


class _Rejected(Exception):
    """A body that does not fit: the message is rejected with this reason."""


def _problems(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return f"{type(exc).__name__}: {exc}"
    return "; ".join(
        f"{'.'.join(str(p) for p in e.get('loc', ())) or 'body'}: {e.get('msg', '')}"
        for e in errors()[:3]
    )


def _shown(annotation: Any) -> str:
    """``dict[str, int]`` as written, a plain class by its name."""
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return annotation.__qualname__
    return repr(annotation).replace("typing.", "")


def argument_check(wf: WorkflowDef) -> Callable[[Any], None] | None:
    """What checks a body against ``wf``'s one argument's annotation (``None``: none to check,
    any JSON value fits). ``UsageError`` when ``wf`` cannot take one positional argument."""
    try:
        wf.signature.bind(None)
    except TypeError:
        raise UsageError(
            f"workflow {wf.name!r} cannot be started by messages: it must take the decoded "
            "body as its one argument (def agent(body: dict) -> ...)"
        ) from None
    params = list(wf.signature.parameters.values())
    first = params[0] if params else None
    if first is None or first.kind is inspect.Parameter.VAR_POSITIONAL:
        return None
    try:
        annotation = typing.get_type_hints(wf.fn).get(first.name)
    except Exception:
        return None
    if annotation is None or annotation is Any or annotation is object:
        return None
    from pydantic import TypeAdapter

    try:
        adapter = TypeAdapter(annotation)
    except Exception:
        return None
    shown = _shown(annotation)

    def check(value: Any) -> None:
        try:
            adapter.validate_python(value)
        except Exception as exc:
            raise _Rejected(f"the body does not validate as {shown}: {_problems(exc)}") from None

    return check


def _decode(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _Rejected(f"the body is not JSON: {exc}") from None


class Delivery:
    """Delivers messages of any subscription into the store (see the module docstring)."""

    def __init__(self, driver: Driver, operator: Operator) -> None:
        self.driver = driver
        self.operator = operator
        self.runtime = driver.runtime
        self.metrics: Metrics | None = None  # the serving worker's, while one serves

    def deliver(
        self, subscription: Subscription, message_id: str, body: bytes, problem: str | None = None
    ) -> Verdict:
        """Start the message's run or send its event, once; count and log what happened.
        ``problem``: the source already knows the message cannot fit (it is rejected so)."""
        if subscription.start is not None:
            return self.deliver_all(subscription, [(message_id, body, problem)])[0]
        wid: str | None = None
        try:
            if problem is not None:
                raise _Rejected(problem)
            value = _decode(body)
            wid = self._target(subscription, value)
            created = self._send(subscription, wid, message_id, value)
        except _Rejected as exc:
            self._count_rejected(subscription, 1)
            return self._rejected(subscription, message_id, wid, str(exc))
        return self._accepted(subscription, wid, created)

    def deliver_all(
        self, subscription: Subscription, messages: Sequence[tuple[str, bytes, str | None]]
    ) -> list[Verdict]:
        """``deliver`` of each ``(message id, body, problem)`` of ``messages`` of a
        subscription that starts runs: the runs in one store call (one transaction, each
        message's accepted count in it), the rejections counted in one more; a verdict per
        message, in order. A store error is raised: no message of them may be acknowledged."""
        wf = subscription.start
        assert wf is not None
        decided: list[tuple[str, Verdict | None]] = []  # a rejection's verdict, else None
        runs: list[tuple[str, bytes]] = []
        for message_id, body, problem in messages:
            wid = f"{subscription.name}:{message_id}"
            try:
                runs.append((wid, self._payload(subscription, wid, body, problem)))
                decided.append((wid, None))
            except _Rejected as exc:
                decided.append((wid, self._rejected(subscription, message_id, wid, str(exc))))
        created = iter(self.driver.start_all(wf, runs, count=_count(subscription)))
        if len(runs) < len(messages):
            self._count_rejected(subscription, len(messages) - len(runs))
        return [
            verdict or self._accepted(subscription, wid, next(created)) for wid, verdict in decided
        ]

    def _accepted(self, sub: Subscription, wid: str, created: bool) -> Verdict:
        if not created:
            return Verdict(Outcome.DUPLICATE, wid)
        if self.metrics is not None:
            self.metrics.ingress_messages.labels(sub.name).inc()
        return Verdict(Outcome.ACCEPTED, wid)

    def _payload(self, sub: Subscription, wid: str, body: bytes, problem: str | None) -> bytes:
        """The encoded arguments of the run a message starts (``_Rejected`` if it cannot)."""
        if problem is not None:
            raise _Rejected(problem)
        value = _decode(body)
        if sub.check is not None:
            sub.check(value)
        try:
            run_id(wid)
        except UsageError as exc:
            raise _Rejected(str(exc)) from None
        try:
            return self.runtime.codec.encode({"args": [value], "kwargs": {}})
        except UnsupportedValue as exc:  # JSON decodes to what the codec takes; a guard only
            raise _Rejected(f"the body cannot be stored: {exc.type_name}") from None

    def _target(self, sub: Subscription, value: Any) -> str:
        assert sub.to is not None
        try:
            wid = sub.to(value)
        except Exception as exc:
            raise _Rejected(f"to() raised {type(exc).__name__}: {exc}") from None
        if not isinstance(wid, str) or not wid:
            raise _Rejected(f"to() returned {wid!r}, not a workflow id")
        return wid

    def _send(self, sub: Subscription, wid: str, message_id: str, value: Any) -> bool:
        assert sub.event is not None
        try:
            return self.operator.send_event(
                wid,
                sub.event,
                value,
                dedup_key=message_id,
                by=f"ingress:{sub.name}",
                count=_count(sub),
            )
        except WorkflowNotFound:
            raise _Rejected(f"to() names the unknown run {wid!r}") from None
        except (InvalidOperation, UsageError) as exc:  # an ended run, a bad id
            raise _Rejected(str(exc)) from None

    def _rejected(
        self, sub: Subscription, message_id: str, wid: str | None, reason: str
    ) -> Verdict:
        """Log and meter a rejection (the store counts it: ``_count_rejected``)."""
        log.warning(
            "ingress %s: message %s rejected: %s",
            sub.name,
            message_id,
            reason,
            extra={"subscription": sub.name, "message_id": message_id},
        )
        if self.metrics is not None:
            self.metrics.ingress_rejected.labels(sub.name).inc()
        return Verdict(Outcome.REJECTED, wid, reason)

    def _count_rejected(self, sub: Subscription, rejected: int) -> None:
        self.runtime.store.count_ingress(
            sub.name,
            kind=sub.kind,
            target=sub.target,
            accepted=0,
            rejected=rejected,
            now=self.runtime.clock.time(),
        )
