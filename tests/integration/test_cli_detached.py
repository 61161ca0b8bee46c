"""``stalwart show`` marks a detached child (docs/coordinating-agents.md): its row in the
parent's timeline stays ``scheduled`` in the journal, since the parent never waits on it, so
the CLI says ``detached`` there and in the header's children line; an attached child is not
marked. The real command, on SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest

import stalwart
from cli_process import stalwart as _stalwart

pytestmark = pytest.mark.timeout(120)


def test_show_marks_a_detached_child(shared_url: str, tmp_path: Path) -> None:
    with stalwart.Stalwart(shared_url) as app:

        @app.workflow(name="audit")
        def audit(order: str) -> str:
            return f"audited {order}"

        @app.workflow(name="checkout")
        def checkout(order: str) -> str:
            stalwart.start_child(audit, order, workflow_id="audit-9", detached=True)
            stalwart.start_child(audit, order, workflow_id="audit-9b")
            raise stalwart.NonRetryableError("card declined")

        with pytest.raises(stalwart.WorkflowFailed):
            app.run(checkout, "order-9", workflow_id="checkout-9")
    shown = _stalwart("--url", shared_url, "show", "checkout-9", cwd=tmp_path, clean=True)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    children = next(line for line in lines if line.strip().startswith("children"))
    assert "audit-9 (pending, detached)" in children
    assert "audit-9b (" in children and "audit-9b (pending, detached)" not in children
    rows = [line.split() for line in lines if line.split()[1:2] == ["child"]]
    assert [row[3] for row in rows] == ["detached", "scheduled"], rows
    assert "audit-9: its parent's end, cancel and retry leave it alone" in shown.stdout
