"""``stalwart demo``: a multi-step agent is SIGKILLed mid-run, then resumes where it stopped.

The agent runs in a child process (``python -m stalwart._demo agent DB WORKDIR``) so that the
kill is real. Each step appends a line to ``executions.log`` when it actually executes, so the
demo can show that the steps completed before the kill were not executed again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import stalwart

WORKFLOW_ID = "research-agent-1"
KILL_AT = "draft_section"

_SCRIPT = {  # a scripted stand-in for the LLM: deterministic, no network
    "plan": ["durable execution", "idempotency keys", "human approvals"],
    "summary": "Agents that journal every step survive crashes without redoing work.",
}


def build_app(db_url: str, workdir: Path) -> tuple[stalwart.Stalwart, Any]:
    """The demo's app and its research agent."""
    app = stalwart.Stalwart(db_url)
    log = workdir / "executions.log"

    def executed(step: str, detail: str) -> None:
        with log.open("a") as f:
            f.write(f"{step} {detail}\n")
            f.flush()
            os.fsync(f.fileno())

    @app.step(name="plan")
    def plan(question: str) -> list[str]:
        executed("plan", question)
        return list(_SCRIPT["plan"])

    @app.step(name="search")
    def search(topic: str) -> dict[str, str]:
        executed("search", topic)
        time.sleep(0.2)  # stands in for a slow tool call
        return {"topic": topic, "notes": f"three sources agree on {topic}"}

    @app.step(name="draft_section")
    def draft_section(note: dict[str, str]) -> str:
        executed("draft_section", note["topic"])
        marker = workdir / f"running-{note['topic'].replace(' ', '-')}"
        marker.touch()
        time.sleep(0.4)  # the LLM is thinking: the demo kills the process here
        return f"## {note['topic'].title()}\n{note['notes']}."

    @app.step(name="summarize")
    def summarize(sections: list[str]) -> str:
        executed("summarize", str(len(sections)))
        return str(_SCRIPT["summary"])

    @app.workflow(name="research_agent")
    def research_agent(question: str) -> dict[str, Any]:
        topics = plan(question)
        notes = [search(t) for t in topics]
        sections = [draft_section(n) for n in notes]
        return {"question": question, "summary": summarize(sections), "sections": len(sections)}

    return app, research_agent


def _agent_main(db_url: str, workdir: str) -> None:
    app, agent = build_app(db_url, Path(workdir))
    with app:
        result = app.run(agent, "How do agents survive crashes?", workflow_id=WORKFLOW_ID)
    print(f"   result: {result}", flush=True)


def _spawn(db_url: str, workdir: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "stalwart._demo", "agent", db_url, str(workdir)],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _executions(workdir: Path) -> list[str]:
    log = workdir / "executions.log"
    return log.read_text().splitlines() if log.exists() else []


def run_demo() -> None:
    """Run the crash-and-resume demo in a temporary folder and print what happens."""
    from ._cli import format_timeline

    with tempfile.TemporaryDirectory(prefix="stalwart-demo-") as tmp:
        workdir = Path(tmp)
        db_url = f"sqlite:///{workdir / 'demo.db'}"
        print("1. Starting the research agent in a worker process (store: embedded SQLite).")
        proc = _spawn(db_url, workdir)
        target = workdir / "running-idempotency-keys"
        deadline = time.monotonic() + 60
        while not target.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("demo: the agent did not reach the step to kill; aborting")
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        done = _executions(workdir)
        print(
            f"2. SIGKILL while it drafted the section on 'idempotency keys' "
            f"(after {len(done)} step executions):"
        )
        for line in done:
            print(f"   executed: {line}")
        print("3. Running the same workflow id again in a new process: it replays its journal.")
        before = len(done)
        proc = _spawn(db_url, workdir)
        if proc.wait() != 0:
            raise SystemExit("demo: the resumed agent failed")
        again = _executions(workdir)[before:]
        print("   steps executed after the restart:")
        for line in again:
            print(f"   executed: {line}")
        reran = [line for line in again if not line.startswith(("draft_section", "summarize"))]
        print(
            f"4. Steps that completed before the kill and ran again: {len(reran)} "
            "(the interrupted step ran once more, as it must)."
        )
        with stalwart.Stalwart(db_url) as app:
            entries = app.journal(WORKFLOW_ID)
            status = app.handle(WORKFLOW_ID).status()
        print(f"5. The run's journal (status: {status}):")
        for line in format_timeline(entries):
            print(f"   {line}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "agent":
        _agent_main(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit("usage: python -m stalwart._demo agent DB_URL WORKDIR")
