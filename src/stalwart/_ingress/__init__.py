"""Ingress: brokers (and webhooks) start runs and deliver events (docs/ingress.md).

``source`` is the one shape a broker source has; ``delivery`` the core that puts one message
into the store exactly once (shared by the broker consumers and the webhook routes);
``consumer`` runs a worker's subscriptions; ``subscribing`` is ``app.subscribe``. The sources
themselves (``rabbitmq``, ``nats``, ``redis``) are public through ``stalwart.ingress``.
"""

from __future__ import annotations

from .delivery import Delivery, Outcome, Subscription, Verdict
from .source import Message, Source, message_id
from .subscribing import Ingress, Subscribing, SubscriptionInfo, ingress_of

__all__ = [
    "Delivery",
    "Ingress",
    "Message",
    "Outcome",
    "Source",
    "Subscribing",
    "Subscription",
    "SubscriptionInfo",
    "Verdict",
    "ingress_of",
    "message_id",
]
