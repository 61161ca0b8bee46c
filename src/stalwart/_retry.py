"""Retry policy: a frozen value with pure functions; it never sleeps and never touches a store."""

from __future__ import annotations

import random as _random
from dataclasses import dataclass, field

from ._errors import NonRetryableError, SerializationError, UsageError

__all__ = ["Retry"]


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

    def __post_init__(self) -> None:
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise UsageError(f"Retry(max_attempts={self.max_attempts!r}): must be an int >= 1")
        for name in ("initial_delay", "max_delay"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or value < 0:
                raise UsageError(f"Retry({name}={value!r}): must be a number >= 0")
        if not isinstance(self.backoff, int | float) or self.backoff < 1:
            raise UsageError(f"Retry(backoff={self.backoff!r}): must be a number >= 1")
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

    def delay(self, attempt: int, rng: _random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if attempt < 1:
            raise ValueError("attempt is 1-based")
        ceiling = min(self.max_delay, self.initial_delay * self.backoff ** (attempt - 1))
        if not self.jitter:
            return float(ceiling)
        return (rng or _random).uniform(0.0, ceiling)

    def is_retryable(self, exc: BaseException) -> bool:
        """Whether ``exc`` may be retried at all, whatever the attempt count."""
        if isinstance(exc, NonRetryableError | SerializationError):
            return False
        if self.non_retryable and isinstance(exc, self.non_retryable):
            return False
        return isinstance(exc, self.retry_on)

    def should_retry(self, exc: BaseException, attempt: int) -> bool:
        """Whether another attempt follows failed attempt number ``attempt``."""
        return attempt < self.max_attempts and self.is_retryable(exc)
