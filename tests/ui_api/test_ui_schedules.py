"""``GET /api/v1/schedules`` against a live ``stalwart ui``: the schedules kept in the store."""

from __future__ import annotations

from ui_harness import Scene


def test_schedules_are_listed_with_their_next_tick(ui: Scene) -> None:
    client = ui.reader()
    assert client.get("/api/v1/schedules").json() == {"schedules": []}
    # Once a year: the scene's worker starts no run of it while the other tests read counts.
    ui.app.schedule("ask", "0 0 1 1 *", name="yearly", args=("yearly review",))
    try:
        (listed,) = client.get("/api/v1/schedules").json()["schedules"]
        assert {k: v for k, v in listed.items() if k != "next_tick"} == {
            "name": "yearly",
            "workflow": "ask",
            "cron": "0 0 1 1 *",
            "timezone": "UTC",
            "catch_up": "latest",
        }
        assert listed["next_tick"].endswith("-01-01T00:00:00+00:00")
    finally:
        ui.app.unschedule("yearly")
