"""Retry policy: a frozen value with pure functions; it never sleeps and never touches a store.

A provider can direct the retry: an exception that carries an HTTP response (``exc.headers``
or ``exc.response.headers``, as httpx, requests, openai and anthropic errors do) with
``Retry-After`` (seconds or an HTTP date) or ``retry-after-ms`` sets the next attempt's delay,
and ``x-should-retry`` says whether to retry at all. Everything is read by duck typing, so no
HTTP library is imported here.
"""

from __future__ import annotations

import email.utils
import math
import random as _random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from . import _inputs
from ._errors import NonRetryableError, RetryAfter, SerializationError, UsageError

__all__ = ["LONGEST_DELAY", "Decision", "Retry", "http_status", "server_delay"]

# The longest delay before another attempt: with no cap on the delay (max_delay=inf), a long
# backoff or a far Retry-After still names a time a datetime holds.
LONGEST_DELAY = _inputs.CENTURY

# A provider's 4xx that may succeed when tried again: timeout, conflict, rate limit.
RETRYABLE_4XX = frozenset({408, 409, 429})


def _headers(exc: BaseException) -> Any:
    headers = getattr(exc, "headers", None)
    if headers is None:
        headers = getattr(getattr(exc, "response", None), "headers", None)
    return headers


def _header(headers: Any, name: str) -> str | None:
    """A header's value, looked up without regard to case (httpx and requests mappings do
    that themselves; a plain dict is searched)."""
    if headers is None:
        return None
    try:
        value = headers.get(name)
    except Exception:
        return None
    if value is None and isinstance(headers, Mapping):
        value = next((v for k, v in headers.items() if str(k).lower() == name), None)
    return None if value is None else str(value).strip()


def http_status(exc: BaseException) -> int | None:
    """The HTTP status an exception carries (``exc.status_code`` or
    ``exc.response.status_code``), if any."""
    for holder in (exc, getattr(exc, "response", None)):
        status = getattr(holder, "status_code", None)
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    return None


def _seconds(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def server_delay(exc: BaseException, now: float) -> tuple[float, str] | None:
    """The delay the server (or the step, with :class:`RetryAfter`) asked for, in seconds,
    and where it came from; ``None`` when it did not say."""
    if isinstance(exc, RetryAfter):
        return exc.seconds, f"RetryAfter: {_seconds(exc.seconds)} s"
    headers = _headers(exc)
    millis = _header(headers, "retry-after-ms")
    if millis is not None:
        try:
            value = float(millis) / 1000.0
        except ValueError:
            value = math.nan
        if value >= 0 and math.isfinite(value):
            return value, f"retry-after-ms: {millis}"
    after = _header(headers, "retry-after")
    if after is None:
        return None
    try:
        seconds = float(after)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(after)
        except (TypeError, ValueError, IndexError):
            return None
        seconds = max(0.0, when.timestamp() - now)
    if not (seconds >= 0 and math.isfinite(seconds)):
        return None
    return seconds, f"Retry-After: {_seconds(seconds)} s"


def _should_retry_header(exc: BaseException) -> bool | None:
    value = _header(_headers(exc), "x-should-retry")
    if value is None:
        return None
    return {"true": True, "false": False}.get(value.lower())


@dataclass(frozen=True, slots=True)
class Decision:
    """What follows a failed attempt: another one after ``delay`` seconds, or none
    (``final``). ``directed`` says who chose the delay when the server or the step did, e.g.
    ``"Retry-After: 7 s"``; ``refused`` says why a directed delay was not waited for."""

    final: bool
    delay: float = 0.0
    directed: str | None = None
    refused: str | None = None


@dataclass(frozen=True)
class Retry:
    """How often and how patiently a step is attempted.

    The delay before attempt ``n + 1`` is ``min(max_delay, initial_delay * backoff ** (n - 1))``,
    drawn uniformly from ``[0, delay]`` when ``jitter`` is true (full jitter). ``max_attempts``
    counts attempts, not retries. An exception matching ``non_retryable``, any
    :class:`NonRetryableError`, or one not matching ``retry_on`` stops retrying at once.
    """

    max_attempts: int = 3
    initial_delay: float = 1.0
    backoff: float = 2.0
    max_delay: float = 60.0
    jitter: bool = True
    retry_on: tuple[type[BaseException], ...] = field(default=(Exception,))
    non_retryable: tuple[type[BaseException], ...] = field(default=())
    max_server_delay: float = 600.0
    provider_calls: ClassVar[bool] = False  # ``Retry.llm()``'s steps call a model

    def __post_init__(self) -> None:
        attempts = self.max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise UsageError(f"Retry(max_attempts={attempts!r}): pass an int >= 1")
        # The first delay is a length of time; the caps are limits (inf: none).
        delays = {
            "initial_delay": _inputs.seconds(self.initial_delay, "initial_delay", "Retry"),
            "max_delay": _inputs.seconds(self.max_delay, "max_delay", "Retry", unlimited=True),
            "max_server_delay": _inputs.seconds(
                self.max_server_delay, "max_server_delay", "Retry", unlimited=True
            ),
        }
        for field_name, seconds in delays.items():
            object.__setattr__(self, field_name, seconds)
        backoff = self.backoff
        if (
            isinstance(backoff, bool)
            or not isinstance(backoff, int | float)
            or not 1 <= backoff < math.inf
        ):
            raise UsageError(f"Retry(backoff={backoff!r}): pass a finite number >= 1")
        for name in ("retry_on", "non_retryable"):
            value = getattr(self, name)
            if isinstance(value, type):
                value = (value,)
            elif isinstance(value, list | set | frozenset):
                value = tuple(value)
            object.__setattr__(self, name, value)
            if not all(isinstance(t, type) and issubclass(t, BaseException) for t in value):
                raise TypeError(f"Retry({name}=...): must be a tuple of exception classes")

    @classmethod
    def never(cls) -> Retry:
        """A policy of exactly one attempt."""
        return cls(max_attempts=1)

    @classmethod
    def llm(
        cls, max_attempts: int = 8, initial_delay: float = 1.0, max_delay: float = 60.0
    ) -> Retry:
        """The policy for LLM provider calls: it retries what ``Retry()`` retries (timeouts,
        connection errors, ``OutputInvalid``, 5xx, 408, 409, 429), but an error whose HTTP
        status is another 4xx (a bad request, a bad key) fails at once."""
        return _ProviderRetry(
            max_attempts=max_attempts, initial_delay=initial_delay, max_delay=max_delay
        )

    def delay(self, attempt: int, rng: _random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if attempt < 1:
            raise ValueError("attempt is 1-based")
        try:
            grown = self.initial_delay * self.backoff ** (attempt - 1)
        except OverflowError:
            grown = math.inf
        ceiling = min(self.max_delay, grown, LONGEST_DELAY)
        if not self.jitter:
            return float(ceiling)
        return (rng or _random).uniform(0.0, ceiling)

    def is_retryable(self, exc: BaseException) -> bool:
        """Whether ``exc`` may be retried at all, whatever the attempt count."""
        if isinstance(exc, NonRetryableError | SerializationError):
            return False
        if self.non_retryable and isinstance(exc, self.non_retryable):
            return False
        if isinstance(exc, RetryAfter):  # the step said when, so it is to be retried
            return True
        directed = _should_retry_header(exc)
        if directed is not None:
            return directed
        return isinstance(exc, self.retry_on) and self._status_allows(exc)

    def _status_allows(self, exc: BaseException) -> bool:
        return True

    def should_retry(self, exc: BaseException, attempt: int) -> bool:
        """Whether another attempt follows failed attempt number ``attempt``."""
        return attempt < self.max_attempts and self.is_retryable(exc)

    def decide(
        self, exc: BaseException, attempt: int, *, now: float, rng: _random.Random | None = None
    ) -> Decision:
        """What follows failed attempt number ``attempt`` at time ``now``: the server's (or
        :class:`RetryAfter`'s) delay when it gave one, without jitter, else the backoff. A
        directed delay over ``max_server_delay`` fails the step instead."""
        if not self.should_retry(exc, attempt):
            told = _should_retry_header(exc) is False and attempt < self.max_attempts
            return Decision(final=True, directed="x-should-retry: false" if told else None)
        directed = server_delay(exc, now)
        if directed is None:
            return Decision(final=False, delay=self.delay(attempt, rng))
        seconds, source = directed
        if seconds > self.max_server_delay:
            return Decision(
                final=True,
                directed=source,
                refused=f"longer than max_server_delay={_seconds(self.max_server_delay)} s",
            )
        return Decision(final=False, delay=min(seconds, LONGEST_DELAY), directed=source)


@dataclass(frozen=True)
class _ProviderRetry(Retry):
    """``Retry.llm()``: a client error other than a timeout, a conflict or a rate limit is
    not worth another attempt."""

    provider_calls = True  # its steps call a model: one that records no usage is warned of

    def _status_allows(self, exc: BaseException) -> bool:
        status = http_status(exc)
        return status is None or not 400 <= status < 500 or status in RETRYABLE_4XX

    def __repr__(self) -> str:
        return (
            f"Retry.llm(max_attempts={self.max_attempts}, initial_delay={self.initial_delay}, "
            f"max_delay={self.max_delay})"
        )
