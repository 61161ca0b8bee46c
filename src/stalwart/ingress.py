"""Message sources for ``app.subscribe`` (docs/ingress.md): each message of a queue, stream or
subject starts a run or delivers an event, exactly once into the store.

- :class:`RabbitMQ` (``pip install 'stalwart[rabbitmq]'``, aio-pika)
- :class:`NATS` (``pip install 'stalwart[nats]'``, nats-py; JetStream when ``stream`` is given)
- :class:`RedisStream` (``pip install 'stalwart[redis]'``, redis-py; consumer groups)

A source is one small shape (:class:`Source`: an async iterator of :class:`Message`, each with
an ``id``, a ``body``, ``ack()`` and ``reject(reason)``); everything else is written once above
it, so another broker is one more class of that shape.
"""

from __future__ import annotations

from ._ingress import Message, Outcome, Source, SubscriptionInfo, Verdict
from ._ingress.amqp import RabbitMQ
from ._ingress.jetstream import NATS
from ._ingress.redis_streams import RedisStream

__all__ = [
    "NATS",
    "Message",
    "Outcome",
    "RabbitMQ",
    "RedisStream",
    "Source",
    "SubscriptionInfo",
    "Verdict",
]
