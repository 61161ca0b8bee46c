"""stalwart: durable execution for long-running AI agents.

Declare workflows and steps on a :class:`Stalwart` app; every step's outcome is journaled in
the store, and a run interrupted by a crash replays its journal and resumes at the step where it
stopped. See the README and ``docs/`` for the tutorial and the replay rules.
"""

from ._app import Handle, Stalwart
from ._context import (
    attempt,
    heartbeat,
    idempotency_key,
    now,
    random,
    record_usage,
    request_approval,
    request_approval_async,
    sleep,
    sleep_async,
    uuid4,
    wait_for_event,
    wait_for_event_async,
    workflow_id,
)
from ._declare import run_step, run_step_async
from ._errors import (
    CorruptRecord,
    InvalidOperation,
    NeedsAttention,
    NonDeterminismError,
    NonRetryableError,
    NotDurableWarning,
    OutputInvalid,
    RegistrationError,
    RetryAfter,
    RunEnded,
    SerializationError,
    StalwartError,
    StepError,
    StepFailed,
    StepTimeout,
    StoreError,
    UnsafeFork,
    UsageError,
    WorkflowAlreadyExists,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowNotFound,
)
from ._model import Approval, ApprovalRequest, JournalEntry, Usage, WorkflowInfo
from ._retry import Retry

__version__ = "0.1.0"

__all__ = [
    "Approval",
    "ApprovalRequest",
    "CorruptRecord",
    "Handle",
    "InvalidOperation",
    "JournalEntry",
    "NeedsAttention",
    "NonDeterminismError",
    "NonRetryableError",
    "NotDurableWarning",
    "OutputInvalid",
    "RegistrationError",
    "Retry",
    "RetryAfter",
    "RunEnded",
    "SerializationError",
    "Stalwart",
    "StalwartError",
    "StepError",
    "StepFailed",
    "StepTimeout",
    "StoreError",
    "UnsafeFork",
    "Usage",
    "UsageError",
    "WorkflowAlreadyExists",
    "WorkflowCancelled",
    "WorkflowFailed",
    "WorkflowInfo",
    "WorkflowNotFound",
    "attempt",
    "heartbeat",
    "idempotency_key",
    "now",
    "random",
    "record_usage",
    "request_approval",
    "request_approval_async",
    "run_step",
    "run_step_async",
    "sleep",
    "sleep_async",
    "uuid4",
    "wait_for_event",
    "wait_for_event_async",
    "workflow_id",
]
