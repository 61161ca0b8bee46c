"""Webhook signatures and delivery ids: the pure half of ``app.webhook`` (docs/ingress.md).

Two schemes, as the senders sign:

- ``"hmac-sha256"`` (GitHub and most others): header ``X-Signature-256: sha256=<hex>``, the
  HMAC-SHA256 of the raw body under the secret (GitHub names it ``X-Hub-Signature-256``, which
  is read too).
- ``"stripe"``: header ``Stripe-Signature: t=<unix time>,v1=<hex>[,v1=...]``, the HMAC-SHA256 of
  ``"<t>.<body>"``; a timestamp older than :data:`TOLERANCE` seconds is refused, so a captured
  delivery cannot be replayed later.

Every comparison is :func:`hmac.compare_digest`. Headers are given with lower-case names.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping

__all__ = ["SCHEMES", "TOLERANCE", "BadSignature", "delivery_id", "sign", "verify"]

SCHEMES = ("hmac-sha256", "stripe")
TOLERANCE = 300.0  # seconds a Stripe signature's timestamp may be old
_HMAC_HEADERS = ("x-signature-256", "x-hub-signature-256")
_ID_HEADERS = ("x-delivery-id", "x-github-delivery")
MAX_ID = 200  # characters of a delivery id (a run's id is "<name>:<delivery id>")


class BadSignature(Exception):
    """A delivery whose signature is missing, malformed, stale or wrong (answered 401)."""


def _digest(secret: bytes, payload: bytes) -> str:
    return hmac.new(secret, payload, hashlib.sha256).hexdigest()


def sign(scheme: str, secret: str | bytes, body: bytes, *, now: float) -> dict[str, str]:
    """The header a sender of ``scheme`` signs ``body`` with at time ``now`` (for tests and
    for the docs' examples)."""
    key = secret.encode() if isinstance(secret, str) else secret
    if scheme == "stripe":
        t = int(now)
        return {"Stripe-Signature": f"t={t},v1={_digest(key, f'{t}.'.encode() + body)}"}
    return {"X-Signature-256": f"sha256={_digest(key, body)}"}


def _hmac_ok(key: bytes, headers: Mapping[str, str], body: bytes) -> None:
    given = next((headers[h] for h in _HMAC_HEADERS if h in headers), None)
    if given is None:
        raise BadSignature("no X-Signature-256 header: sign the body with the hook's secret")
    scheme, _, value = given.strip().partition("=")
    if scheme.lower() != "sha256" or not value:
        raise BadSignature("X-Signature-256 must be sha256=<hex of HMAC-SHA256(secret, body)>")
    if not hmac.compare_digest(value.strip().lower().encode(), _digest(key, body).encode()):
        raise BadSignature("the signature does not match the body under the hook's secret")


def _stripe_parts(header: str) -> tuple[int, list[str]]:
    stamp: int | None = None
    signatures: list[str] = []
    for item in header.split(","):
        key, _, value = item.strip().partition("=")
        if key == "t":
            try:
                stamp = int(value)
            except ValueError:
                raise BadSignature("Stripe-Signature's t= is not a Unix time") from None
        elif key == "v1" and value:
            signatures.append(value.strip().lower())
    if stamp is None or not signatures:
        raise BadSignature("Stripe-Signature must hold t=<time> and v1=<signature>")
    return stamp, signatures


def _stripe_ok(key: bytes, headers: Mapping[str, str], body: bytes, now: float) -> None:
    header = headers.get("stripe-signature")
    if header is None:
        raise BadSignature("no Stripe-Signature header: sign with the endpoint's secret")
    stamp, signatures = _stripe_parts(header)
    if stamp < now - TOLERANCE:
        raise BadSignature(
            f"the Stripe-Signature timestamp is {int(now - stamp)} s old (at most "
            f"{int(TOLERANCE)} s): a replayed delivery is refused"
        )
    expected = _digest(key, f"{stamp}.".encode() + body).encode()
    if not any(hmac.compare_digest(s.encode(), expected) for s in signatures):
        raise BadSignature("no v1 signature matches the body under the endpoint's secret")


def verify(
    scheme: str,
    secret: str | bytes | None,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: float,
) -> None:
    """Raise :class:`BadSignature` unless ``body`` is signed under ``secret`` as ``scheme``
    signs (a hook declared without a secret, ``allow_unsigned=True``, checks nothing)."""
    if secret is None:
        return
    key = secret.encode() if isinstance(secret, str) else secret
    if scheme == "stripe":
        _stripe_ok(key, headers, body, now)
    else:
        _hmac_ok(key, headers, body)


def _bounded(value: str) -> str:
    """``value``, or its SHA-256 when it is longer than a run id's part should be."""
    if len(value) <= MAX_ID:
        return value
    return "sha256-" + hashlib.sha256(value.encode()).hexdigest()


def delivery_id(scheme: str, headers: Mapping[str, str], body: bytes) -> str:
    """The delivery's id: ``X-Delivery-Id``, else ``X-GitHub-Delivery``, else (``stripe``) the
    event id in the body, else the SHA-256 of the body (as a broker message without an id)."""
    for header in _ID_HEADERS:
        value = headers.get(header, "").strip()
        if value:
            return _bounded(value)
    if scheme == "stripe":
        try:
            event = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            event = None
        found = event.get("id") if isinstance(event, dict) else None
        if isinstance(found, str) and found.strip():
            return _bounded(found.strip())
    return hashlib.sha256(body).hexdigest()
