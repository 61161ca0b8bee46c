"""A run's running totals: what its attempts used, kept with the run by a trigger on the
journal (migration 0019), so reading them costs one row whatever the journal's length."""

from __future__ import annotations

from typing import Any

from ..rows import SpendRow
from ._base import SQLBase

__all__ = ["SpendVerbs"]


class SpendVerbs(SQLBase):
    """The ``run_spend`` read over SQL."""

    def run_spend(self, workflow_id: str) -> SpendRow | None:
        """The run's running totals, the budget an operator's retry gave it resolved; ``None``
        for a run that has journaled no attempt yet."""
        query = self._q["run_spend"]

        def work(conn: Any) -> SpendRow | None:
            row = conn.execute(query, {"workflow_id": workflow_id}).fetchone()
            if row is None:
                return None
            tokens_in, tokens_out, cost, attempts, partial, budget, since_start = row
            (budget_input,) = self._load_all(conn, [None if budget is None else bytes(budget)])
            return SpendRow(
                input_tokens=int(tokens_in),
                output_tokens=int(tokens_out),
                cost=float(cost),
                attempts=int(attempts),
                partial=bool(partial),
                budget_input=budget_input,
                since_start=bool(since_start),
            )

        return self._run(work)
