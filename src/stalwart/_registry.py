"""Workflow and step definitions, looked up by their recorded names."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._errors import RegistrationError
from ._retry import Retry
from ._serde import restorer_for

__all__ = ["Registry", "StepDef", "WorkflowDef"]


def _return_annotation(fn: Callable[..., Any]) -> Any:
    try:
        return typing.get_type_hints(fn).get("return")
    except Exception:
        return None


@dataclass
class StepDef:
    """A declared step."""

    fn: Callable[..., Any]
    name: str
    retry: Retry
    timeout: float | None
    output: Callable[[Any], Any] | None
    is_async: bool
    signature: inspect.Signature = field(init=False)
    restore: Callable[[Any], Any] | None = field(init=False)

    def __post_init__(self) -> None:
        self.signature = inspect.signature(self.fn)
        target = self.output if isinstance(self.output, type) else _return_annotation(self.fn)
        self.restore = restorer_for(target)


@dataclass
class WorkflowDef:
    """A declared workflow."""

    fn: Callable[..., Any]
    name: str
    queue: str
    is_async: bool
    signature: inspect.Signature = field(init=False)
    restore: Callable[[Any], Any] | None = field(init=False)

    def __post_init__(self) -> None:
        self.signature = inspect.signature(self.fn)
        self.restore = restorer_for(_return_annotation(self.fn))


class Registry:
    """The workflows and steps one app knows, by name."""

    def __init__(self) -> None:
        self.workflows: dict[str, WorkflowDef] = {}
        self.steps: dict[str, StepDef] = {}

    def add_workflow(self, wf: WorkflowDef) -> None:
        """Register ``wf``; a second workflow under the same name is an error."""
        if wf.name in self.workflows:
            raise RegistrationError(
                f"a workflow named {wf.name!r} is already registered on this app; give one of "
                "them another name with @app.workflow(name=...)"
            )
        self.workflows[wf.name] = wf

    def add_step(self, step: StepDef) -> None:
        """Register ``step``; a second step under the same name is an error."""
        if step.name in self.steps:
            raise RegistrationError(
                f"a step named {step.name!r} is already registered on this app; give one of "
                "them another name with @app.step(name=...)"
            )
        self.steps[step.name] = step

    def workflow(self, name: str) -> WorkflowDef:
        """The workflow registered as ``name``."""
        try:
            return self.workflows[name]
        except KeyError:
            raise RegistrationError(
                f"no workflow named {name!r} is registered on this app; import the module that "
                "declares it before running this run"
            ) from None
