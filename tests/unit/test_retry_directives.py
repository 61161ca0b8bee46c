"""Retries the provider directs, decided without any HTTP library: the policy reads the status
and the headers an exception carries by duck typing."""

from __future__ import annotations

import email.utils
from typing import Any

import pytest

import stalwart
from stalwart._retry import http_status, server_delay

NOW = 1_767_225_600.0


class Response:
    def __init__(self, status: int, headers: dict[str, str]) -> None:
        self.status_code = status
        self.headers = headers


class HTTPError(Exception):
    """Shaped like httpx.HTTPStatusError and openai.APIStatusError: ``response`` carries the
    status and the headers."""

    def __init__(self, status: int, **headers: str) -> None:
        super().__init__(f"HTTP {status}")
        self.response = Response(status, {k.replace("_", "-"): v for k, v in headers.items()})


class HeadersOnTheError(Exception):
    def __init__(self, headers: dict[str, Any]) -> None:
        super().__init__("throttled")
        self.headers = headers


def test_retry_after_in_seconds_sets_the_delay_without_jitter() -> None:
    decision = stalwart.Retry().decide(HTTPError(429, Retry_After="7"), 1, now=NOW)
    assert (decision.final, decision.delay, decision.directed) == (False, 7.0, "Retry-After: 7 s")


def test_retry_after_as_an_http_date_counts_from_now() -> None:
    when = email.utils.formatdate(NOW + 30, usegmt=True)
    assert server_delay(HTTPError(503, Retry_After=when), NOW) == (30.0, "Retry-After: 30 s")
    past = email.utils.formatdate(NOW - 30, usegmt=True)
    assert server_delay(HTTPError(503, Retry_After=past), NOW) == (0.0, "Retry-After: 0 s")


def test_retry_after_ms_wins_and_headers_are_found_in_any_case() -> None:
    exc = HeadersOnTheError({"Retry-After-Ms": "1500", "Retry-After": "9"})
    assert server_delay(exc, NOW) == (1.5, "retry-after-ms: 1500")
    assert server_delay(HeadersOnTheError({"RETRY-AFTER": "2"}), NOW) == (2.0, "Retry-After: 2 s")


@pytest.mark.parametrize("value", ["soon", "-3", "nan", "inf", ""])
def test_a_retry_after_that_is_not_a_delay_is_ignored(value: str) -> None:
    assert server_delay(HTTPError(429, Retry_After=value), NOW) is None
    decision = stalwart.Retry(jitter=False).decide(HTTPError(429, Retry_After=value), 1, now=NOW)
    assert (decision.delay, decision.directed) == (1.0, None)  # the policy's own backoff


def test_a_demand_longer_than_max_server_delay_fails_the_step() -> None:
    retry = stalwart.Retry(max_server_delay=60.0)
    decision = retry.decide(HTTPError(429, Retry_After="3600"), 1, now=NOW)
    assert decision.final and decision.directed == "Retry-After: 3600 s"
    assert decision.refused == "longer than max_server_delay=60 s"


def test_the_directed_delay_still_counts_an_attempt() -> None:
    retry = stalwart.Retry(max_attempts=2)
    assert not retry.decide(HTTPError(429, Retry_After="1"), 1, now=NOW).final
    assert retry.decide(HTTPError(429, Retry_After="1"), 2, now=NOW).final


def test_x_should_retry_decides_but_never_over_non_retryable() -> None:
    retry = stalwart.Retry(non_retryable=(KeyError,))
    told = retry.decide(HTTPError(500, x_should_retry="false"), 1, now=NOW)
    assert told.final and told.directed == "x-should-retry: false"
    assert not stalwart.Retry.llm().decide(HTTPError(400, x_should_retry="true"), 1, now=NOW).final

    refused = KeyError("gone")
    refused.headers = {"x-should-retry": "true"}  # type: ignore[attr-defined]
    assert retry.decide(refused, 1, now=NOW).final
    fatal = stalwart.NonRetryableError("no")
    fatal.headers = {"x-should-retry": "true"}  # type: ignore[attr-defined]
    assert retry.decide(fatal, 1, now=NOW).final


def test_raising_retry_after_in_a_step_says_the_same() -> None:
    decision = stalwart.Retry().decide(stalwart.RetryAfter(4), 1, now=NOW)
    assert (decision.final, decision.delay, decision.directed) == (False, 4.0, "RetryAfter: 4 s")
    with pytest.raises(stalwart.UsageError):
        stalwart.RetryAfter(-1)
    with pytest.raises(stalwart.UsageError):
        stalwart.RetryAfter(float("nan"))


@pytest.mark.parametrize(
    ("status", "retried"),
    [
        *[(status, False) for status in (400, 401, 403, 404, 422)],
        *[(status, True) for status in (408, 409, 429, 500, 502, 503)],
    ],
)
def test_retry_llm_fails_at_once_on_a_client_error(status: int, retried: bool) -> None:
    retry = stalwart.Retry.llm()
    assert retry.decide(HTTPError(status), 1, now=NOW).final is not retried
    assert stalwart.Retry().decide(HTTPError(status), 1, now=NOW).final is False


def test_retry_llm_retries_what_retry_retries_when_there_is_no_status() -> None:
    retry = stalwart.Retry.llm()
    assert (retry.max_attempts, retry.initial_delay, retry.max_delay) == (8, 1.0, 60.0)
    for exc in (TimeoutError(), ConnectionError(), stalwart.StepTimeout("slow")):
        assert not retry.decide(exc, 1, now=NOW).final
    assert repr(retry) == "Retry.llm(max_attempts=8, initial_delay=1.0, max_delay=60.0)"


def test_the_status_is_read_from_the_error_or_its_response() -> None:
    class StatusOnTheError(Exception):
        status_code = 401

    assert http_status(StatusOnTheError()) == 401
    assert http_status(HTTPError(503)) == 503
    assert http_status(ValueError()) is None


def test_delays_read_as_a_person_would_write_them() -> None:
    assert server_delay(HTTPError(429, Retry_After="2.605694"), NOW) == (
        2.605694,
        "Retry-After: 2.61 s",
    )
    assert server_delay(HTTPError(429, Retry_After="28952900.5"), NOW) == (
        28952900.5,
        "Retry-After: 28952900 s",
    )


def test_retry_after_is_retried_whatever_retry_on_says() -> None:
    decision = stalwart.Retry(retry_on=(TimeoutError,)).decide(stalwart.RetryAfter(3), 1, now=NOW)
    assert (decision.final, decision.delay) == (False, 3.0)
    assert (
        stalwart.Retry(non_retryable=(stalwart.RetryAfter,))
        .decide(stalwart.RetryAfter(3), 1, now=NOW)
        .final
    )
