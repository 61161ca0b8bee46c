"""A trip agent run by ``DurableRunner`` in worker processes that are SIGKILLed mid-agent:
while one of two parallel tools runs, inside a model call, inside an irreversible tool after
its effect, and while the run waits for an approval. Each restart finishes the agent without
repeating a completed model call or tool (the side files count every execution)."""

from __future__ import annotations

from pathlib import Path

from fault_harness import WorkerHarness
from oa_scripted import Recorder
from oa_worker import declare

import stalwart
from stalwart.integrations.openai_agents import model_step_name, tool_step_name

AGENT = Path(__file__).with_name("oa_worker.py")
WID = "trip-1"
WAIT_S = 60.0


def _kill_at(workers: WorkerHarness, point: str) -> None:
    """Start a worker that hangs at ``point``, wait until it does, SIGKILL it."""
    proc = workers.start(program=AGENT, env={"OA_HANG": point})
    workers.wait_for(workers.marker(WID, point).exists, f"hung at {point}", WAIT_S, [proc])
    workers.kill(proc)


def _weather_done(app: stalwart.Stalwart, city: str) -> bool:
    name = tool_step_name("Assistant", "weather")
    return any(
        e.name == name and e.status == "completed" and e.input["kwargs"] == {"city": city}
        for e in app.journal(WID)
    )


def test_a_killed_agent_resumes_without_repeating_completed_calls(
    oa_workers: WorkerHarness,
) -> None:
    workers = oa_workers
    recorder = Recorder(workers.workdir)
    with stalwart.Stalwart(workers.url) as app:
        trip = declare(app, workers.workdir)  # to start runs; the workers execute them
        app.start(trip, "Plan a trip to Rome", workflow_id=WID)

        # 1. Paris's weather hangs while Rome's, run in parallel, completes.
        proc = workers.start(program=AGENT, env={"OA_HANG": "weather:Paris"})
        marker = workers.marker(WID, "weather:Paris")
        workers.wait_for(
            lambda: marker.exists() and _weather_done(app, "Rome"), "Rome done", WAIT_S, [proc]
        )
        workers.kill(proc)
        # 2. Inside the model call that follows the weather; 3. after the charge's effect.
        _kill_at(workers, "model:2")
        _kill_at(workers, "charge")
        # 4. The run waits for the booking's approval; its worker dies meanwhile.
        proc = workers.start(program=AGENT)
        workers.wait_for(lambda: bool(app.approvals()), "an approval is asked", WAIT_S, [proc])
        workers.kill(proc)
        (pending,) = app.approvals()
        assert pending.subject == tool_step_name("Assistant", "book")
        assert pending.details["arguments"] == {"city": "Rome"}
        app.approve(WID, by="ops", reason="within budget")  # no worker runs now

        proc = workers.start(program=AGENT)
        result = app.handle(WID).result(timeout=WAIT_S)

        assert result == ("done: sunny in Paris; sunny in Rome; charged 42 for o-1; booked Rome"), (
            workers.describe()
        )
        counts = recorder.counts(WID)
        assert counts == {
            "weather:Paris": 2,  # killed while it ran, then run again
            "weather:Rome": 1,
            "model:0": 1,
            "model:2": 2,  # killed while it ran, then run again
            "charge": 1,  # in doubt after the kill: verify found the charge
            "model:3": 1,
            "book": 1,
            "model:4": 1,
        }, counts
        assert len(recorder.charged()) == 1
        charge = [e for e in app.journal(WID) if e.name == tool_step_name("Assistant", "charge")]
        assert charge[-1].status == "completed" and charge[-1].by == "verify"
        models = [e for e in app.journal(WID) if e.name == model_step_name("Assistant")]
        assert [e.status for e in models if e.status == "completed"] == ["completed"] * 4
