"""The public namespace is exactly the contract's."""

from __future__ import annotations

import importlib.metadata
import inspect

import stalwart

CONTRACT = {
    "Stalwart",
    "Retry",
    "Handle",
    "WorkflowInfo",
    "JournalEntry",
    "ApprovalRequest",
    "Approval",
    "workflow_id",
    "sleep",
    "wait_for_event",
    "request_approval",
    "now",
    "uuid4",
    "random",
    "record_usage",  # 0.2: usage
    "Usage",
    "Budget",  # 0.2: budgets and loops
    "BudgetExceeded",
    "LoopDetected",
    "Breaker",  # 0.2: circuit breakers shared by the fleet
    "BreakerState",
    "RunDetail",  # 0.2: read models
    "CurrentStep",
    "QueueInfo",
    "WorkerInfo",
    "sleep_async",
    "wait_for_event_async",
    "request_approval_async",
    "send_event",  # 0.3: messages between runs
    "run_step",  # 0.2: steps without a decorator
    "run_step_async",
    "idempotency_key",
    "attempt",
    "heartbeat",
    "StalwartError",
    "StoreError",
    "CorruptRecord",
    "EncryptionKeyMissing",
    "Keyring",
    "RegistrationError",
    "NeedsAttention",
    "SerializationError",
    "NonRetryableError",
    "RetryAfter",  # 0.2: retries the provider directs
    "StepFailed",
    "StepTimeout",
    "OutputInvalid",
    "NonDeterminismError",
    "WorkflowNotFound",
    "WorkflowFailed",
    "WorkflowCancelled",
    "UnsafeFork",
    "InvalidOperation",
    "RunEnded",
    "StepError",
    "UsageError",
    "WorkflowAlreadyExists",
    "NotDurableWarning",
    # Multi-agent coordination: child runs
    "ChildHandle",
    "start_child",
    "start_child_async",
    "run_child",
    "run_child_async",
    "shared_get",  # 0.2: shared context
    "shared_set",
    "Versioned",
    "SharedWrite",
    "Schedule",  # 0.2: schedules
    "patched",  # 0.2: safe evolution
    "CheckResult",
    "request_headers",  # 0.3: provider calls
    "snapshot",  # 0.3: workspace snapshots
    "restore",
    "SnapshotRef",
    "emit",  # 0.3: durable streams
    "StreamChunk",
    "stream_text",
}


def test_all_is_the_contract() -> None:
    assert set(stalwart.__all__) == CONTRACT
    for name in stalwart.__all__:
        assert getattr(stalwart, name).__doc__, f"{name} has no docstring"


def test_errors_derive_from_one_base() -> None:
    for name in CONTRACT:
        obj = getattr(stalwart, name)
        if (
            inspect.isclass(obj)
            and issubclass(obj, Exception)
            and name not in ("StalwartError", "NotDurableWarning")
        ):
            assert issubclass(obj, stalwart.StalwartError), name
    assert issubclass(stalwart.CorruptRecord, stalwart.StoreError)
    assert issubclass(stalwart.InvalidOperation, ValueError)
    groups = {
        stalwart.RunEnded: (
            stalwart.WorkflowFailed,
            stalwart.WorkflowCancelled,
            stalwart.NeedsAttention,
        ),
        stalwart.UsageError: (
            stalwart.RegistrationError,
            stalwart.SerializationError,
            stalwart.UnsafeFork,
            stalwart.InvalidOperation,
            stalwart.WorkflowAlreadyExists,
        ),
        stalwart.StepError: (stalwart.StepFailed, stalwart.StepTimeout, stalwart.OutputInvalid),
        stalwart.StoreError: (stalwart.CorruptRecord,),
    }
    for group, members in groups.items():
        assert issubclass(group, stalwart.StalwartError)
        for member in members:
            assert issubclass(member, group), (member, group)
    assert issubclass(stalwart.UsageError, ValueError)
    assert issubclass(stalwart.NotDurableWarning, UserWarning)


def test_constructor_signature_matches_contract() -> None:
    params = inspect.signature(stalwart.Stalwart).parameters
    assert list(params) == [
        "url",
        "durability",
        "lease_seconds",
        "max_recoveries",
        "serializer",
        "clock",
        "prices",  # 0.2: usage
        "encryption",  # 0.3: encryption at rest
        "retention",  # 0.3: data lifecycle
    ]
    assert params["durability"].default == "process"
    assert params["lease_seconds"].default == 30.0
    assert params["serializer"].default == "json"


def test_the_version_is_written_once_and_is_the_installed_one() -> None:
    # pyproject.toml reads the version from stalwart/__init__.py, so the two cannot differ.
    assert stalwart.__version__ == importlib.metadata.version("stalwart") == "0.3.0"
