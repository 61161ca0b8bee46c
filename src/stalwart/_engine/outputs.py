"""A step's result as it is journaled: checked by the step's ``output=`` and encoded."""

from __future__ import annotations

from typing import Any

from .._errors import OutputInvalid, SerializationError
from .._registry import StepDef
from .._serde import UnsupportedValue
from .invocation import Invocation

__all__ = ["validate_and_encode"]


def validate_and_encode(inv: Invocation, step: StepDef, raw: Any) -> bytes:
    """A step's result, checked by its ``output=`` and encoded (the errors name the step)."""
    check = step.output
    if check is not None:
        validate = getattr(check, "model_validate", None)
        if callable(validate) and isinstance(raw, str | bytes | bytearray):
            validate = getattr(check, "model_validate_json", validate)  # an LLM's JSON
        try:
            raw = validate(raw) if callable(validate) else check(raw)
        except Exception as exc:
            raise OutputInvalid(
                f"step {step.name!r} returned a value its output= check rejected: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    try:
        return inv.runtime.codec.encode(raw)
    except UnsupportedValue as exc:
        raise SerializationError(
            f"workflow {inv.wf.name!r} (run {inv.workflow_id!r}), step "
            f"{step.name!r}: cannot serialize its result, a value of type "
            f"{exc.type_name} at {exc.path.replace('value', 'result', 1)}; return "
            "JSON-compatible values (or opt in with serializer='pickle')"
        ) from None
