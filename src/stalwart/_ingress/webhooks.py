"""``app.webhook``: a mixin of ``Stalwart``, like ``subscribing``.

A webhook is one more subscription (``kind="webhook"``, in the subscriptions' one namespace, so
it is listed and counted with them), whose messages arrive over HTTP at ``POST
/api/v1/hooks/{name}`` (``_ui.hooks_route``) instead of from a broker, plus what that route
checks first: the signing secret and its scheme (``_signatures``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import _inputs
from .._errors import UsageError
from .._signatures import SCHEMES
from .delivery import Subscription
from .subscribing import Ingress, Subscribing, target_of

if TYPE_CHECKING:
    from .._engine.driver import Driver
    from .._runtime import Runtime
    from .._worker import Companion

__all__ = ["Webhook", "Webhooks", "webhook_of"]

KIND = "webhook"


@dataclass(frozen=True)
class Webhook:
    """A declared webhook: its subscription, and how its deliveries are signed."""

    subscription: Subscription
    scheme: str
    secret: bytes | None = field(repr=False)


def webhook_of(app: Any, name: str) -> Webhook | None:
    """The webhook ``name`` of a ``Stalwart`` app (for the route), or ``None``."""
    hooks: dict[str, Webhook] = app._webhooks
    return hooks.get(name)


def _secret(secret: Any, allow_unsigned: bool, call: str) -> bytes | None:
    if secret is None:
        if not allow_unsigned:
            raise UsageError(
                f"{call}: a webhook is authenticated by its signature: pass secret= (the "
                "signing secret the sender uses), or allow_unsigned=True for a hook anyone "
                "who can reach it may call"
            )
        return None
    if isinstance(secret, str):
        secret = secret.encode()
    if not isinstance(secret, bytes) or not secret:
        raise UsageError(f"{call}: secret=: pass the signing secret as a non-empty str or bytes")
    return secret


def webhook_declared(
    runtime: Runtime,
    name: Any,
    *,
    start: Any,
    event: Any,
    to: Any,
    secret: Any,
    scheme: Any,
    allow_unsigned: Any,
) -> Webhook:
    """The checked :class:`Webhook` that ``app.webhook`` declares."""
    call = f"app.webhook({name!r})"
    if not isinstance(name, str) or not name:
        raise UsageError(f"app.webhook: name={name!r}: pass a non-empty str")
    _inputs.name(name, "name", "app.webhook")
    if "/" in name:
        raise UsageError(f"{call}: a webhook's name is one segment of its URL: drop the '/'")
    if scheme not in SCHEMES:
        raise UsageError(f"{call}: scheme={scheme!r}: pass one of {', '.join(SCHEMES)}")
    if not isinstance(allow_unsigned, bool):
        raise UsageError(f"{call}: allow_unsigned={allow_unsigned!r}: pass True or False")
    key = _secret(secret, allow_unsigned, call)
    subscription = target_of(runtime, name, kind=KIND, start=start, event=event, to=to, call=call)
    return Webhook(subscription, scheme, key)


class Webhooks(Subscribing):
    """The ingress half of the facade (``Stalwart`` inherits it): ``app.subscribe`` and
    ``app.subscriptions`` (:class:`Subscribing`), and ``app.webhook``."""

    _runtime: Runtime
    _driver: Driver
    _ingress: Ingress

    @property
    def _webhooks(self) -> dict[str, Webhook]:
        """The declared webhooks, by name (the table is made on first use)."""
        table: dict[str, Webhook] | None = self.__dict__.get("_webhook_table")
        if table is None:
            table = self.__dict__["_webhook_table"] = {}
        return table

    def webhook(
        self,
        name: str,
        *,
        start: Any = None,
        event: str | None = None,
        to: Callable[[Any], str] | None = None,
        secret: str | bytes | None = None,
        scheme: str = "hmac-sha256",
        allow_unsigned: bool = False,
    ) -> None:
        """Receive deliveries at ``POST /api/v1/hooks/{name}`` (``stalwart ui --app`` and
        ``stalwart worker --http-port``; docs/ingress.md, "Webhooks"): each starts a run of
        ``start`` with the decoded JSON body as its one argument, id ``"<name>:<delivery
        id>"``, or is sent as event ``event`` (``dedup_key``: the delivery id) to the run
        ``to(body)`` names. ``scheme`` is ``"hmac-sha256"`` (``X-Signature-256``, as GitHub
        signs) or ``"stripe"`` (``Stripe-Signature``, at most 300 s old); a hook without
        ``secret`` is refused unless ``allow_unsigned=True``."""
        hook = webhook_declared(
            self._runtime,
            name,
            start=start,
            event=event,
            to=to,
            secret=secret,
            scheme=scheme,
            allow_unsigned=allow_unsigned,
        )
        self._ingress.add(hook.subscription)
        self._webhooks[name] = hook

    def _serve_beside(
        self,
        server: Companion,
        concurrency: int | None,
        queues: list[str] | None,
        metrics_port: int | None,
        metrics_host: str,
        *,
        metrics_on_server: bool,
    ) -> None:
        """``stalwart worker --http-port``: ``app.serve`` with ``server`` (the worker's HTTP
        server) beside the claim loop, serving the metrics too when ``metrics_on_server``."""
        from .._worker import serve

        serve(
            self._driver,
            concurrency,
            queues,
            metrics_port,
            metrics_host,
            companions=[*self._ingress.companions(), server],
            metrics_server=not metrics_on_server,
        )
