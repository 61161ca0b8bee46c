"""Retry is a pure value: truth tables with a seeded RNG."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

import stalwart
from stalwart import NonRetryableError, OutputInvalid, Retry, SerializationError, StepTimeout
from stalwart._retry import LONGEST_DELAY


@pytest.mark.parametrize(
    ("attempt", "expected"), [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (7, 60.0), (30, 60.0)]
)
def test_delay_formula_without_jitter(attempt: int, expected: float) -> None:
    assert Retry(jitter=False).delay(attempt) == expected


def test_full_jitter_is_uniform_below_the_ceiling() -> None:
    policy = Retry(initial_delay=2.0, backoff=3.0, max_delay=10.0)
    rng = random.Random(7)
    draws = [policy.delay(2, rng) for _ in range(2000)]
    assert all(0.0 <= d <= 6.0 for d in draws)
    assert max(draws) > 5.5 and min(draws) < 0.5
    assert [policy.delay(2, random.Random(1)) for _ in range(3)] == [
        policy.delay(2, random.Random(1)) for _ in range(3)
    ]
    capped = [policy.delay(5, rng) for _ in range(500)]
    assert max(capped) <= 10.0


def test_max_attempts_counts_attempts() -> None:
    policy = Retry(max_attempts=3)
    err = ValueError("x")
    assert [policy.should_retry(err, n) for n in (1, 2, 3)] == [True, True, False]
    assert Retry.never().max_attempts == 1
    assert not Retry.never().should_retry(err, 1)


def test_what_stops_retrying() -> None:
    policy = Retry(retry_on=(ConnectionError, StepTimeout), non_retryable=(PermissionError,))
    assert policy.should_retry(ConnectionError(), 1)
    assert policy.should_retry(StepTimeout(), 1)
    assert not policy.should_retry(ValueError(), 1)  # not in retry_on
    assert not Retry(non_retryable=(KeyError,)).should_retry(KeyError(), 1)
    assert not Retry().should_retry(NonRetryableError("stop"), 1)
    assert not Retry().should_retry(SerializationError("bad"), 1)
    assert Retry().should_retry(OutputInvalid("malformed JSON"), 1)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_attempts": 0},
        {"max_attempts": 1.5},
        {"initial_delay": -1},
        {"max_delay": -0.1},
        {"backoff": 0.5},
        {"max_attempts": True},
        {"initial_delay": float("nan")},
        {"initial_delay": float("inf")},  # a first delay is a length of time, never "no limit"
        {"max_delay": float("nan")},
        {"max_server_delay": float("nan")},
        {"max_server_delay": -1},
        {"backoff": float("nan")},
        {"backoff": float("inf")},
        {"initial_delay": "1"},
    ],
)
def test_bad_values_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(stalwart.UsageError, match="Retry") as info:
        Retry(**kwargs)  # type: ignore[arg-type]
    ((field, value),) = kwargs.items()
    assert str(info.value).startswith(f"Retry({field}={value!r}): pass ")  # given, accepted


def test_no_cap_on_the_delay_is_inf_and_every_delay_is_still_a_time() -> None:
    policy = Retry(max_delay=float("inf"), max_server_delay=float("inf"), jitter=False)
    assert policy.delay(3) == 4.0
    assert policy.delay(5000) == LONGEST_DELAY  # 2.0 ** 4999 overflows a float
    far = stalwart.RetryAfter(1e300)
    assert policy.decide(far, 1, now=0.0).delay == LONGEST_DELAY
    forever = stalwart.RetryAfter(float("inf"))
    assert Retry().decide(forever, 1, now=0.0).final  # past max_server_delay: not waited for
    assert Retry(initial_delay=timedelta(seconds=2), jitter=False).delay(1) == 2.0


def test_exception_classes_are_checked() -> None:
    with pytest.raises(TypeError):
        Retry(retry_on=("ValueError",))  # type: ignore[arg-type]
    assert Retry(retry_on=ValueError).retry_on == (ValueError,)  # type: ignore[arg-type]


def test_retry_is_frozen() -> None:
    with pytest.raises(AttributeError):
        Retry().max_attempts = 5  # type: ignore[misc]


def test_retry_rejects_or_accepts_a_list_of_exception_classes() -> None:
    try:
        policy = stalwart.Retry(retry_on=[ValueError])  # type: ignore[arg-type]
    except TypeError:
        return
    assert policy.is_retryable(ValueError("x"))
