"""``app.subscribe`` and ``app.subscriptions``: a mixin of ``Stalwart``, like ``_reads``.

:class:`Ingress` is what an app keeps: its subscriptions by name (a webhook is one more
entry, ``kind="webhook"``, in the same namespace, since a started run's id is
``"<name>:<message id>"``), the delivery core, and the consumers a worker runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import _inputs
from .._declare import definition_of
from .._errors import RegistrationError, UsageError
from .consumer import Consumers
from .delivery import Delivery, Subscription, argument_check
from .source import Source

if TYPE_CHECKING:
    from .._runtime import Runtime

__all__ = ["Ingress", "Subscribing", "SubscriptionInfo", "ingress_of", "target_of"]


@dataclass(frozen=True)
class SubscriptionInfo:
    """A subscription (or webhook) and its fleet-wide counts, kept in the store."""

    name: str
    kind: str  # "rabbitmq", "nats", "redis", "webhook"
    target: str  # "starts agent", "event 'paid'"
    accepted: int  # messages that started a run or delivered an event
    rejected: int  # messages rejected for a body that does not fit


class Ingress:
    """An app's subscriptions and webhooks, and what delivers their messages."""

    def __init__(self, delivery: Delivery) -> None:
        self.delivery = delivery
        self.subscriptions: dict[str, Subscription] = {}

    def add(self, subscription: Subscription) -> None:
        """Register ``subscription``; ``RegistrationError`` for a name already taken."""
        if subscription.name in self.subscriptions:
            raise RegistrationError(
                f"a subscription or webhook named {subscription.name!r} is already declared; "
                "pass name= to tell them apart"
            )
        self.subscriptions[subscription.name] = subscription

    def companions(self) -> list[Consumers]:
        """What a worker runs beside its claim loop: the consumers of the broker
        subscriptions (none when there is none)."""
        brokers = [s for s in self.subscriptions.values() if s.source is not None]
        return [Consumers(self.delivery, brokers)] if brokers else []

    def listing(self) -> list[SubscriptionInfo]:
        """This app's subscriptions and webhooks, then any other the store counted, by name."""
        counted = {row.name: row for row in self.delivery.runtime.store.list_ingress()}
        infos = []
        for name in sorted({*self.subscriptions, *counted}):
            sub, row = self.subscriptions.get(name), counted.get(name)
            described = sub if sub is not None else row  # one of them names it
            assert described is not None
            infos.append(
                SubscriptionInfo(
                    name=name,
                    kind=described.kind,
                    target=described.target,
                    accepted=row.accepted if row else 0,
                    rejected=row.rejected if row else 0,
                )
            )
        return infos


def ingress_of(app: Any) -> Ingress:
    """The :class:`Ingress` of a ``Stalwart`` app (for the webhook routes and ``testing``)."""
    ingress: Ingress = app._ingress
    return ingress


def _check_source(source: Any) -> Source:
    if not isinstance(source, Source):
        raise TypeError(
            f"{source!r} is not a message source: pass stalwart.ingress.RabbitMQ(...), "
            "NATS(...) or RedisStream(...)"
        )
    return source


def _check_target(
    start: Any, event: Any, to: Any, call: str
) -> tuple[Any, str | None, Callable[[Any], str] | None]:
    if (start is None) == (event is None):
        raise UsageError(f"{call}: pass exactly one of start= (a workflow) and event= (a name)")
    if start is not None:
        if to is not None:
            raise UsageError(
                f"{call}: to= goes with event=; a started run's id comes from its message"
            )
        return start, None, None
    if not isinstance(event, str) or not event:
        raise UsageError(f"{call}: event={event!r}: pass the event's name (a non-empty str)")
    _inputs.name(event, "event", call)
    if to is None or not callable(to):
        raise UsageError(
            f"{call}: event= needs to=, a function of the decoded body that returns the "
            "workflow_id of the run to send it to"
        )
    return None, event, to


def subscription_of(
    runtime: Runtime,
    source: Any,
    *,
    start: Any,
    event: Any,
    to: Any,
    name: str | None,
    concurrency: int,
) -> Subscription:
    """The checked :class:`Subscription` that ``app.subscribe`` declares."""
    call = "app.subscribe"
    src = _check_source(source)
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise UsageError(f"{call}: concurrency={concurrency!r}: pass an int >= 1")
    return target_of(
        runtime,
        name if name is not None else src.default_name,
        kind=src.kind,
        start=start,
        event=event,
        to=to,
        call=call,
        source=src,
        concurrency=concurrency,
    )


def target_of(
    runtime: Runtime,
    name: Any,
    *,
    kind: str,
    start: Any,
    event: Any,
    to: Any,
    call: str,
    source: Source | None = None,
    concurrency: int = 16,
) -> Subscription:
    """A checked :class:`Subscription` named ``name``: exactly one of ``start`` (a workflow of
    this app taking the body as its one argument) and ``event`` (with ``to``). A webhook
    (``app.webhook``) builds its own with ``kind="webhook"``, no source, and ``call`` naming
    it in errors, then registers it with :meth:`Ingress.add`."""
    wf_ref, event_name, target = _check_target(start, event, to, call)
    if not isinstance(name, str) or not name:
        raise UsageError(f"{call}: name={name!r}: pass a non-empty str")
    _inputs.name(name, "name", call)
    wf = definition_of(runtime, wf_ref) if wf_ref is not None else None
    return Subscription(
        name=name,
        kind=kind,
        start=wf,
        event=event_name,
        to=target,
        concurrency=concurrency,
        source=source,
        check=argument_check(wf) if wf is not None else None,
    )


class Subscribing:
    """The ingress half of the facade (``Stalwart`` inherits it)."""

    _runtime: Runtime
    _ingress: Ingress

    def subscribe(
        self,
        source: Any,
        *,
        start: Any = None,
        event: str | None = None,
        to: Callable[[Any], str] | None = None,
        name: str | None = None,
        concurrency: int = 16,
    ) -> None:
        """Consume ``source`` in every worker of this app (docs/ingress.md): each message
        starts a run of ``start`` (a workflow, or its registered name: ``start="fulfil"``,
        declared on this app before) with the decoded JSON body as its one argument, id
        ``"<name>:<message id>"``, or is sent as event ``event`` (``dedup_key``: the message
        id) to the run ``to(body)`` names. A message is acknowledged after the commit; one
        whose body does not fit is rejected without requeue. ``name`` defaults to the queue,
        stream or subject; at most ``concurrency`` messages are in hand at once per worker."""
        self._ingress.add(
            subscription_of(
                self._runtime,
                source,
                start=start,
                event=event,
                to=to,
                name=name,
                concurrency=concurrency,
            )
        )

    def subscriptions(self) -> list[SubscriptionInfo]:
        """The subscriptions and webhooks, with the messages each accepted and rejected
        (fleet-wide counts kept in the store), by name."""
        return self._ingress.listing()
