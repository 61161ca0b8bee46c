"""Budgets and loop detection: before a step attempt starts, the run's spend so far is held
against its :class:`~stalwart.Budget`, so the attempt that would go past a limit, or the call
that repeats itself once too often, never happens. The spend is read once per invocation (only
for a workflow that declares a budget) from the run's running totals, one row the store keeps
in the transaction of each attempt it journals, and kept up to date in memory as attempts are
recorded. A budget that caps repeated calls (``max_repeats``) reads how often a call was made
with the same arguments from the store's count of them, once per call and invocation. Only a
run journaled before the store kept totals is counted from its journal."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from .._errors import BudgetExceeded, LoopDetected, NeedsAttention
from .._keyring import Keyring
from .._model import Budget, EntryKind, EntryStatus, Usage
from .._runtime import Runtime
from .._store.sealed import column_for
from .invocation import Invocation

__all__ = ["Spend", "spend_of"]

_ATTEMPTS = frozenset({EntryStatus.COMPLETED, EntryStatus.FAILED})
Recorded = Callable[[str, bytes], int]  # (step name, stored input) -> calls recorded
_ATTEMPTED = frozenset({EntryKind.STEP, EntryKind.COMPENSATION})  # kinds whose rows are attempts


class Spend:
    """What one run has used, as its budget counts it."""

    def __init__(self, budget: Budget, recorded: Recorded | None = None) -> None:
        self.budget = budget
        # what was used, as plain numbers: added to before every attempt's check
        self.tokens_in, self.tokens_out, self.cost, self.attempts = 0, 0, 0.0, 0
        self.calls: Counter[tuple[str, bytes | None]] = Counter()
        self.recorded = recorded  # reads how often a call was recorded, when first needed
        self.keyring: Keyring | None = None  # an encrypted store's, to find stored inputs

    @property
    def used(self) -> Usage:
        """What the run has used."""
        return Usage(self.tokens_in, self.tokens_out, self.cost, self.attempts)

    @used.setter
    def used(self, usage: Usage) -> None:
        self.tokens_in, self.tokens_out = usage.input_tokens, usage.output_tokens
        self.cost, self.attempts = usage.cost, usage.attempts

    @classmethod
    def of_run(cls, runtime: Runtime, workflow_id: str, declared: Budget) -> Spend:
        """The run's spend so far, under the budget an operator gave it last (else
        ``declared``)."""
        totals = runtime.store.run_spend(workflow_id)
        if totals is not None and not totals.since_start:
            return cls.of_journal(runtime, workflow_id, declared)
        store = runtime.store
        spend = cls(declared, lambda name, encoded: store.run_calls(workflow_id, name, encoded))
        spend.keyring = runtime.codec.keyring
        if totals is not None:
            spend.used = Usage(
                totals.input_tokens, totals.output_tokens, totals.cost, totals.attempts
            )
            if totals.budget_input is not None:
                spend.budget = _budget_in(runtime, totals.budget_input) or spend.budget
        counted = totals is not None and totals.counts_calls
        if spend.budget.max_repeats is not None and not counted:
            store.count_calls(workflow_id)  # once in the run's life
        return spend

    @classmethod
    def of_journal(cls, runtime: Runtime, workflow_id: str, declared: Budget) -> Spend:
        """The run's spend counted from its whole journal."""
        spend = cls(declared)
        seen: set[str] = set()
        for row in runtime.store.journal(workflow_id):
            if row.kind == EntryKind.OPERATOR and row.name == "retry" and row.input:
                spend.budget = _budget_in(runtime, row.input) or spend.budget
            if row.attempt == 0:
                continue  # a retry's marker that gives the step fresh attempts: no attempt
            if row.kind == EntryKind.STEP and row.status == EntryStatus.IN_DOUBT and row.usage:
                # what an attempt abandoned at its timeout used; it counts where it ends
                spend.used += replace(Usage.from_json(row.usage), attempts=0)
            if row.kind not in _ATTEMPTED or row.status not in _ATTEMPTS:
                continue
            spend.used += Usage.from_json(row.usage) if row.usage else Usage(attempts=1)
            if row.kind == EntryKind.STEP and row.position is not None and row.position not in seen:
                seen.add(row.position)
                spend.calls[(row.name, row.input)] += 1
        return spend

    def _repeats(self, name: str, encoded_input: bytes | None) -> int:
        key = (name, encoded_input)
        if key not in self.calls and self.recorded is not None:
            column = column_for(encoded_input or b"", self.keyring)
            self.calls[key] = self.recorded(name, column)
        return self.calls[key]

    def new_call(self, name: str, encoded_input: bytes | None) -> None:
        """A step is called anew (not retried): count it."""
        if self.budget.max_repeats is not None:
            self.calls[(name, encoded_input)] = self._repeats(name, encoded_input) + 1

    def add(self, usage: Usage | None) -> None:
        """An attempt was recorded, with what it used."""
        if usage is None:
            self.attempts += 1
        else:
            self.tokens_in += usage.input_tokens
            self.tokens_out += usage.output_tokens
            self.cost += usage.cost
            self.attempts += usage.attempts

    def refusal(self, workflow_id: str, name: str, encoded_input: bytes | None) -> Any:
        """Why the next attempt of step ``name`` may not start, as the error the run ends
        with; ``None`` when it may."""
        budget = self.budget
        if budget.max_repeats is not None:
            repeats = self._repeats(name, encoded_input)
            if repeats > budget.max_repeats:
                reason = (
                    f"call {repeats} of step {name!r} with the same arguments was refused "
                    f"(max_repeats={budget.max_repeats}): the run looks stuck in a loop"
                )
                return _stopped(LoopDetected, workflow_id, reason)
        tokens = self.tokens_in + self.tokens_out
        if budget.max_tokens is not None and tokens >= budget.max_tokens:
            return _over(workflow_id, name, "max_tokens", tokens, budget.max_tokens)
        if budget.max_cost is not None and self.cost >= budget.max_cost:
            return _over(workflow_id, name, "max_cost", self.cost, budget.max_cost)
        if budget.max_steps is not None and self.attempts >= budget.max_steps:
            return _over(workflow_id, name, "max_steps", self.attempts, budget.max_steps)
        return None


def _budget_in(runtime: Runtime, retry_input: bytes) -> Budget | None:
    """The budget an operator's retry gave the run, if its journaled input names one."""
    detail = runtime.codec.decode(retry_input)
    if isinstance(detail, dict) and isinstance(detail.get("budget"), dict):
        return Budget(**detail["budget"])
    return None


def _over(workflow_id: str, name: str, field: str, value: float, limit: float) -> NeedsAttention:
    reason = (
        f"the run reached {field}={limit:g} (used {value:g}) before an attempt of "
        f"step {name!r}; retry it with a larger budget to go on"
    )
    return _stopped(BudgetExceeded, workflow_id, reason)


def _stopped(kind: type[NeedsAttention], workflow_id: str, reason: str) -> NeedsAttention:
    return kind(reason, workflow_id=workflow_id, reason=reason)


def spend_of(inv: Invocation) -> Spend | None:
    """The run's spend, read once per invocation; ``None`` for a workflow with no budget."""
    budget = inv.wf.budget
    if budget is None:
        return None
    if inv.spend is None:
        inv.spend = Spend.of_run(inv.runtime, inv.workflow_id, budget)
    spend: Spend = inv.spend
    return spend
