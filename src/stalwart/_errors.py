"""The error tree of stalwart.

::

    StalwartError
    ├── RunEnded                   (how a run ended, raised to whoever waits on it)
    │   ├── WorkflowFailed
    │   ├── WorkflowCancelled
    │   └── NeedsAttention
    │       ├── BudgetExceeded
    │       └── LoopDetected
    ├── UsageError                 (also a ValueError: the caller asked for something wrong)
    │   ├── RegistrationError
    │   ├── SerializationError
    │   ├── UnsafeFork
    │   ├── InvalidOperation       (a refused operator action)
    │   └── WorkflowAlreadyExists
    ├── StepError                  (a step's failure, raised into workflow code)
    │   ├── StepFailed
    │   ├── StepTimeout
    │   └── OutputInvalid
    ├── StoreError
    │   ├── CorruptRecord
    │   └── EncryptionKeyMissing
    ├── NonRetryableError          (raise it in a step to stop retrying)
    ├── RetryAfter                 (raise it in a step to retry after a given delay)
    ├── NonDeterminismError
    └── WorkflowNotFound

    NotDurableWarning (a UserWarning)

Internal control-flow signals derive from ``BaseException`` (see ``_signals``) so that an
``except Exception:`` in user code cannot swallow them.
"""

from __future__ import annotations

import re

__all__ = [
    "BudgetExceeded",
    "CorruptRecord",
    "EncryptionKeyMissing",
    "InvalidOperation",
    "LoopDetected",
    "NeedsAttention",
    "NonDeterminismError",
    "NonRetryableError",
    "NotDurableWarning",
    "OutputInvalid",
    "RegistrationError",
    "RetryAfter",
    "RunEnded",
    "SerializationError",
    "StalwartError",
    "StepError",
    "StepFailed",
    "StepTimeout",
    "StoreError",
    "UnsafeFork",
    "UsageError",
    "WorkflowAlreadyExists",
    "WorkflowCancelled",
    "WorkflowFailed",
    "WorkflowNotFound",
    "WorkflowOnlyCall",
]


class StalwartError(Exception):
    """Base class of every error stalwart raises."""


class RunEnded(StalwartError):
    """A run ended (or stopped for an operator) in a way its caller is told about."""


class UsageError(StalwartError, ValueError):
    """The caller asked for something stalwart refuses; also a ``ValueError``, so existing
    ``except ValueError`` handlers keep working."""


class StepError(StalwartError):
    """A step's failure, as workflow code sees it."""


class StoreError(StalwartError):
    """The store cannot be used: bad URL, unreachable database, incompatible schema."""


class CorruptRecord(StoreError):
    """A stored record cannot be decoded; names the run and the journal position."""

    def __init__(self, message: str, *, workflow_id: str | None = None, seq: int | None = None):
        super().__init__(message)
        self.workflow_id = workflow_id
        self.seq = seq


class EncryptionKeyMissing(StoreError):
    """A payload is encrypted under a key the keyring lacks; names the key id, and the run
    and ``seq`` where there is one."""

    def __init__(
        self,
        key_id: str,
        *,
        workflow_id: str | None = None,
        seq: int | None = None,
        detail: str | None = None,
    ):
        where = ""
        if workflow_id is not None:
            where = f" (run {workflow_id!r}" + ("" if seq is None else f", seq {seq}") + ")"
        super().__init__(
            f"a payload{where} is encrypted under key {key_id!r}, which the keyring lacks: "
            + (detail or f"add key {key_id!r} to Keyring(...) or STALWART_ENCRYPTION_KEYS")
        )
        self.key_id = key_id
        self.workflow_id = workflow_id
        self.seq = seq
        self.detail = detail

    def at(self, workflow_id: str, seq: int | None) -> EncryptionKeyMissing:
        """The same error, naming the run and the ``seq`` it was met at."""
        return EncryptionKeyMissing(
            self.key_id, workflow_id=workflow_id, seq=seq, detail=self.detail
        )


class RegistrationError(UsageError):
    """A workflow or step was declared wrongly (for example twice under one name)."""


class NeedsAttention(RunEnded):
    """The run stopped in status ``needs_attention`` and waits for an operator."""

    def __init__(self, message: str, *, workflow_id: str, reason: str):
        super().__init__(message)
        self.workflow_id = workflow_id
        self.reason = reason


class BudgetExceeded(NeedsAttention):
    """The run reached a limit of its :class:`Budget` before a step attempt, which did not
    start; ``app.retry(workflow_id, budget=...)`` with a larger budget continues it."""


class LoopDetected(NeedsAttention):
    """The run called one step with the same arguments more often than its budget's
    ``max_repeats`` allows; the call did not happen."""


class SerializationError(UsageError):
    """A value cannot be stored by the app's serializer."""


class NonRetryableError(StalwartError):
    """Raise inside a step to fail it at once, without further attempts."""


class WorkflowOnlyCall(NonRetryableError, RuntimeError):
    """A call that belongs in workflow code (a wait, a child run, a patch point) was made
    inside a step: the step fails at once, since another attempt would make it again."""


class RetryAfter(StalwartError):
    """Raise inside a step to say when the next attempt may start: ``seconds`` from now,
    instead of the policy's backoff (as a provider's ``Retry-After`` header does). The attempt
    still counts against ``max_attempts``."""

    def __init__(self, seconds: float, message: str = "") -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
            raise UsageError(f"RetryAfter({seconds!r}): pass seconds, a number >= 0")
        super().__init__(message or f"retry after {seconds:g} s")
        self.seconds = float(seconds)


class StepFailed(StepError):
    """A step failed for good: its retries are exhausted or its error is not retryable."""

    def __init__(self, step: str, attempts: int, cause_type: str, cause_message: str):
        super().__init__(
            f"step {step!r} failed after {attempts} attempt(s): {cause_type}: {cause_message}"
        )
        self.step = step
        self.attempts = attempts
        self.cause_type = cause_type
        self.cause_message = cause_message

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.step, self.attempts, self.cause_type, self.cause_message))


class StepTimeout(StepError):
    """A step attempt ran longer than its ``timeout``; retryable like any other error."""


class OutputInvalid(StepError):
    """A step's result failed its ``output=`` validation; retryable."""


class NonDeterminismError(StalwartError):
    """Replay asked for a different step than the journal recorded at that position."""

    def __init__(self, message: str, *, seq: int, recorded: str, requested: str | None):
        super().__init__(message)
        self.seq = seq
        self.recorded = recorded
        self.requested = requested


class WorkflowNotFound(StalwartError):
    """No run with that workflow id exists in the store."""


class WorkflowFailed(RunEnded):
    """The run ended in status ``failed``."""

    def __init__(self, workflow_id: str, cause_type: str, cause_message: str):
        super().__init__(f"workflow {workflow_id!r} failed: {cause_type}: {cause_message}")
        self.workflow_id = workflow_id
        self.cause_type = cause_type
        self.cause_message = cause_message

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.workflow_id, self.cause_type, self.cause_message))


class WorkflowCancelled(RunEnded):
    """The run was cancelled (or, inside a step, its lease was lost)."""


class UnsafeFork(UsageError):
    """A fork would re-execute an irreversible step that completed or is in doubt."""


class InvalidOperation(UsageError):
    """An operator action the run's state or journal does not allow (say, a fork from a seq
    past the end of the journal); also a ``ValueError``."""


class WorkflowAlreadyExists(UsageError):
    """The id asked for belongs to another run that cannot be reused for this one."""


class EngineError(StalwartError):
    """stalwart's own bookkeeping failed while it executed a run (a bug, not the workflow's
    failure and not a worker crash): the run waits in ``needs_attention``; ``retry`` tries
    again. It is the reason type, not an exception user code sees."""


class NotDurableWarning(UserWarning):
    """The store keeps nothing across processes (``memory://``)."""


_PASSWORD = re.compile(r"(://[^:/@]*:)([^@]*)(@)")


def mask_url(url: str) -> str:
    """Return ``url`` with any password replaced by ``***``."""
    return _PASSWORD.sub(r"\1***\3", url)


def install_hint(extra: str) -> str:
    """How to install the extra ``extra``, in a form that works where this stalwart came from:
    ``pip install -e '.[EXTRA]'`` in the source tree an editable install runs from, else
    ``pip install 'stalwart[EXTRA]'`` and the source-tree form next to it."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    project = root / "pyproject.toml"
    try:
        ours = project.is_file() and 'name = "stalwart"' in project.read_text(encoding="utf-8")
    except OSError:
        ours = False
    if ours and (root / "src" / "stalwart").is_dir():
        return f"pip install -e '.[{extra}]' in {root} (this stalwart's source tree)"
    return (
        f"pip install 'stalwart[{extra}]' (in stalwart's source tree: pip install -e '.[{extra}]')"
    )
