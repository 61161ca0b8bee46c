"""Webhook signatures as GitHub and Stripe send them, and the delivery id of each sender."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from stalwart._signatures import TOLERANCE, BadSignature, delivery_id, sign, verify

BODY = b'{"id": "evt_1", "action": "opened"}'
NOW = 1_700_000_000.0


def lower(headers: dict[str, str]) -> dict[str, str]:
    return {k.lower(): v for k, v in headers.items()}


def test_a_github_signature_is_the_hmac_of_the_body() -> None:
    digest = hmac.new(b"s3cret", BODY, hashlib.sha256).hexdigest()
    for header in ("X-Signature-256", "X-Hub-Signature-256"):
        verify("hmac-sha256", "s3cret", lower({header: f"sha256={digest}"}), BODY, now=NOW)
    assert sign("hmac-sha256", "s3cret", BODY, now=NOW) == {"X-Signature-256": f"sha256={digest}"}


@pytest.mark.parametrize(
    ("headers", "says"),
    [
        ({}, "no X-Signature-256"),
        ({"x-signature-256": "md5=abc"}, "sha256=<hex"),
        ({"x-signature-256": "sha256="}, "sha256=<hex"),
        ({"x-signature-256": "sha256=" + "0" * 64}, "does not match"),
    ],
)
def test_a_bad_github_signature_is_refused(headers: dict[str, str], says: str) -> None:
    with pytest.raises(BadSignature, match=says):
        verify("hmac-sha256", "s3cret", headers, BODY, now=NOW)


def test_a_signature_under_another_secret_or_of_another_body_is_refused() -> None:
    headers = lower(sign("hmac-sha256", "other", BODY, now=NOW))
    with pytest.raises(BadSignature):
        verify("hmac-sha256", "s3cret", headers, BODY, now=NOW)
    headers = lower(sign("hmac-sha256", "s3cret", BODY, now=NOW))
    with pytest.raises(BadSignature):
        verify("hmac-sha256", "s3cret", headers, BODY + b" ", now=NOW)


def test_a_stripe_signature_signs_the_timestamp_and_the_body() -> None:
    t = int(NOW) - 10
    v1 = hmac.new(b"whsec", f"{t}.".encode() + BODY, hashlib.sha256).hexdigest()
    header = {"stripe-signature": f"t={t},v1={'0' * 64},v1={v1},v0=ignored"}
    verify("stripe", "whsec", header, BODY, now=NOW)
    verify("stripe", "whsec", lower(sign("stripe", "whsec", BODY, now=NOW)), BODY, now=NOW)


def test_a_stale_stripe_timestamp_is_refused_even_when_signed() -> None:
    old = lower(sign("stripe", "whsec", BODY, now=NOW - TOLERANCE - 1))
    with pytest.raises(BadSignature, match="301 s old"):
        verify("stripe", "whsec", old, BODY, now=NOW)
    verify("stripe", "whsec", lower(sign("stripe", "whsec", BODY, now=NOW - 299)), BODY, now=NOW)


@pytest.mark.parametrize(
    "header", ["", "t=abc,v1=00", "v1=00", f"t={int(NOW)}", f"t={int(NOW)},v1=00"]
)
def test_a_malformed_stripe_header_is_refused(header: str) -> None:
    with pytest.raises(BadSignature):
        verify("stripe", "whsec", {"stripe-signature": header}, BODY, now=NOW)
    with pytest.raises(BadSignature, match="no Stripe-Signature"):
        verify("stripe", "whsec", {}, BODY, now=NOW)


def test_an_unsigned_hook_checks_nothing() -> None:
    verify("hmac-sha256", None, {}, BODY, now=NOW)


def test_the_delivery_id_comes_from_the_headers_then_the_stripe_event() -> None:
    assert (
        delivery_id("hmac-sha256", {"x-delivery-id": "d1", "x-github-delivery": "g"}, BODY) == "d1"
    )
    assert delivery_id("hmac-sha256", {"x-github-delivery": "g-1"}, BODY) == "g-1"
    assert delivery_id("stripe", {}, BODY) == "evt_1"
    body_hash = hashlib.sha256(BODY).hexdigest()
    assert delivery_id("hmac-sha256", {}, BODY) == body_hash
    assert delivery_id("stripe", {}, b"not json") == hashlib.sha256(b"not json").hexdigest()
    long = "x" * 500
    bounded = delivery_id("stripe", {}, json.dumps({"id": long}).encode())
    assert bounded.startswith("sha256-") and len(bounded) < 80
