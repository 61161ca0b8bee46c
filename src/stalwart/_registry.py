"""Workflow and step definitions, looked up by their recorded names."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._errors import RegistrationError
from ._model import Breaker
from ._retry import Retry
from ._serde import restorer_for

__all__ = ["Registry", "StepDef", "WorkflowDef"]


def _return_annotation(fn: Callable[..., Any]) -> Any:
    try:
        return typing.get_type_hints(fn).get("return")
    except Exception:
        return None


class ArgumentCheck:
    """Raises ``TypeError`` as a call would for arguments the signature rejects.

    Calls with positional arguments only, within the function's positional range, are checked
    by counting; anything else goes through ``inspect.Signature.bind``.
    """

    def __init__(self, signature: inspect.Signature) -> None:
        self.signature = signature
        params = list(signature.parameters.values())
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self.most = None if any(p.kind is p.VAR_POSITIONAL for p in params) else len(positional)
        self.least = sum(1 for p in positional if p.default is p.empty)
        self.simple = not any(p.kind is p.KEYWORD_ONLY and p.default is p.empty for p in params)

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if (
            not kwargs
            and self.simple
            and self.least <= len(args)
            and (self.most is None or len(args) <= self.most)
        ):
            return
        self.signature.bind(*args, **kwargs)


@dataclass
class StepDef:
    """A declared step."""

    fn: Callable[..., Any]
    name: str
    retry: Retry
    timeout: float | None
    output: Callable[[Any], Any] | None
    is_async: bool
    irreversible: bool = False
    verify: Callable[..., Any] | None = None
    compensate: Callable[..., Any] | None = None
    undo_retry: Retry | None = None  # the declared policy, for the compensation
    breaker: Breaker | None = None
    signature: inspect.Signature = field(init=False)
    check_arguments: ArgumentCheck = field(init=False)
    restore: Callable[[Any], Any] | None = field(init=False)

    def __post_init__(self) -> None:
        self.signature = inspect.signature(self.fn)
        self.check_arguments = ArgumentCheck(self.signature)
        target = self.output if isinstance(self.output, type) else _return_annotation(self.fn)
        self.restore = restorer_for(target, f"step {self.name!r}")


@dataclass
class WorkflowDef:
    """A declared workflow."""

    fn: Callable[..., Any]
    name: str
    queue: str
    is_async: bool
    timeout: float | None = None
    budget: Any = None  # a stalwart.Budget: what a run may spend
    retention: float | None = None  # seconds its ended runs are kept (None: the app's)
    signature: inspect.Signature = field(init=False)
    check_arguments: ArgumentCheck = field(init=False)
    restore: Callable[[Any], Any] | None = field(init=False)

    def __post_init__(self) -> None:
        self.signature = inspect.signature(self.fn)
        self.check_arguments = ArgumentCheck(self.signature)
        self.restore = restorer_for(_return_annotation(self.fn), f"workflow {self.name!r}")


class Registry:
    """The workflows and steps one app knows, by name."""

    def __init__(self) -> None:
        self.workflows: dict[str, WorkflowDef] = {}
        self.steps: dict[str, StepDef] = {}
        # Steps run with stalwart.run_step in this process: name -> (function, options, step).
        self.unnamed: dict[str, tuple[Any, Any, StepDef]] = {}
        self.breakers: dict[str, Breaker] = {}

    def step(self, name: str) -> StepDef | None:
        """The step recorded as ``name``: declared, or run undecorated in this process."""
        declared = self.steps.get(name)
        if declared is not None:
            return declared
        unnamed = self.unnamed.get(name)
        return None if unnamed is None else unnamed[2]

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
        self.add_breaker(step.breaker)
        self.steps[step.name] = step

    def add_breaker(self, breaker: Breaker | None) -> None:
        """Know ``breaker``; another breaker under its name with other settings is an error
        (the fleet keeps one state per name)."""
        if breaker is None:
            return
        known = self.breakers.setdefault(breaker.name, breaker)
        if known != breaker:
            raise RegistrationError(
                f"breaker {breaker.name!r} is given as {breaker!r} here and as {known!r} "
                "elsewhere; share one stalwart.Breaker object, or give each its own name"
            )

    def workflow(self, name: str) -> WorkflowDef:
        """The workflow registered as ``name``."""
        try:
            return self.workflows[name]
        except KeyError:
            raise RegistrationError(
                f"no workflow named {name!r} is registered on this app; import the module that "
                "declares it before running this run"
            ) from None
