"""A run's running totals: what its attempts used, kept with the run by a trigger on the
journal (migration 0018), so reading them costs one row whatever the journal's length."""

from __future__ import annotations

from typing import Any

from ..rows import SpendRow
from ._base import SQLBase

__all__ = ["SpendVerbs"]


class SpendVerbs(SQLBase):
    """A run's running totals and its counted calls over SQL."""

    def run_spend(self, workflow_id: str) -> SpendRow | None:
        """The run's running totals, the budget an operator's retry gave it resolved; ``None``
        for a run that has journaled no attempt yet."""
        query = self._q["run_spend"]

        def work(conn: Any) -> SpendRow | None:
            row = conn.execute(query, {"workflow_id": workflow_id}).fetchone()
            if row is None:
                return None
            tokens_in, tokens_out, cost, attempts, partial, budget, since_start, calls = row
            (budget_input,) = self._load_all(conn, [None if budget is None else bytes(budget)])
            return SpendRow(
                input_tokens=int(tokens_in),
                output_tokens=int(tokens_out),
                cost=float(cost),
                attempts=int(attempts),
                partial=bool(partial),
                budget_input=budget_input,
                since_start=bool(since_start),
                counts_calls=bool(calls),
            )

        return self._run(work)

    def run_calls(self, workflow_id: str, name: str, input: bytes) -> int:
        """How many calls of step ``name`` with the stored input ``input`` the run recorded
        (a range of one index, as long as the calls of one step with the same arguments)."""
        params = {"workflow_id": workflow_id, "name": name, "input": input}
        return int(self._rows("run_calls", params)[0][0])

    def count_calls(self, workflow_id: str) -> None:
        """From now on count the run's calls, the ones it journaled before included."""
        key = {"workflow_id": workflow_id}

        def work(conn: Any) -> None:
            self._lock_run(conn, workflow_id)
            conn.execute(self._q["count_calls"], key)
            conn.execute(self._q["copy_calls"], key)

        self._write(work)
