"""``stalwart shared get|set|history`` and ``stalwart unschedule`` through the real command,
on SQLite and PostgreSQL: what they print, ``--json``, and exit 1 when a compare-and-set
lost or the schedule does not exist."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

import stalwart
from cli_process import stalwart as _stalwart

pytestmark = pytest.mark.timeout(120)


def _cli(url: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _stalwart("--url", url, *args, cwd=cwd, clean=True)


def test_shared_get_set_and_history(shared_url: str, tmp_path: Path) -> None:
    with stalwart.Stalwart(shared_url) as app:
        app.shared_set("plan", {"steps": 1}, by="alice")
    got = _cli(shared_url, "shared", "get", "plan", "--json", cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == {"key": "plan", "version": 1, "value": {"steps": 1}}
    written = _cli(
        shared_url, "shared", "set", "plan", '{"steps": 2}', "--if-version", "1",
        "--by", "bob", cwd=tmp_path,
    )  # fmt: skip
    assert written.returncode == 0 and written.stdout.strip() == "wrote plan version 2"
    moved = _cli(shared_url, "shared", "set", "plan", "3", "--if-version", "1", cwd=tmp_path)
    assert moved.returncode == 1 and moved.stdout == ""
    assert "error: 'plan' is at version 2, not 1" in moved.stderr
    assert "--if-version 2" in moved.stderr
    plain = _cli(shared_url, "shared", "set", "plan", '"done"', "--json", cwd=tmp_path)
    assert json.loads(plain.stdout) == {"key": "plan", "version": 3, "value": "done"}
    shown = _cli(shared_url, "shared", "get", "plan", cwd=tmp_path)
    assert shown.stdout.strip() == 'plan (version 3): "done"'
    history = _cli(shared_url, "shared", "history", "plan", "--json", cwd=tmp_path)
    lines = [json.loads(line) for line in history.stdout.splitlines()]
    assert [(w["version"], w["value"], w["by"]) for w in lines] == [
        (1, {"steps": 1}, "alice"),
        (2, {"steps": 2}, "bob"),
        (3, "done", lines[2]["by"]),
    ]
    assert all(w["key"] == "plan" and w["at"].endswith("+00:00") for w in lines)
    table = _cli(shared_url, "shared", "history", "plan", cwd=tmp_path)
    assert table.stdout.splitlines()[0].split() == ["VERSION", "BY", "AT", "VALUE"]
    assert "alice" in table.stdout and "bob" in table.stdout


def test_shared_on_a_key_never_written_and_bad_json(shared_url: str, tmp_path: Path) -> None:
    with stalwart.Stalwart(shared_url):
        pass  # the store exists
    got = _cli(shared_url, "shared", "get", "nothing", "--json", cwd=tmp_path)
    assert json.loads(got.stdout) == {"key": "nothing", "version": 0, "value": None}
    empty = _cli(shared_url, "shared", "history", "nothing", cwd=tmp_path)
    assert empty.returncode == 0 and "never written" in empty.stdout
    first = _cli(shared_url, "shared", "set", "fresh", "1", "--if-version", "0", cwd=tmp_path)
    assert first.returncode == 0 and first.stdout.strip() == "wrote fresh version 1"
    bad = _cli(shared_url, "shared", "set", "fresh", "{oops}", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ")
    negative = _cli(shared_url, "shared", "set", "fresh", "1", "--if-version", "-1", cwd=tmp_path)
    assert negative.returncode == 2 and "--if-version" in negative.stderr


def test_unschedule_removes_a_schedule_and_exits_1_for_an_unknown_one(
    shared_url: str, tmp_path: Path
) -> None:
    def declare() -> None:
        with stalwart.Stalwart(shared_url) as app:

            @app.workflow(name="nightly")
            def nightly() -> None:
                return None

            app.schedule(nightly, "0 3 * * *", name="nightly-report")

    declare()
    listed = _cli(shared_url, "schedules", "--json", cwd=tmp_path)
    assert [json.loads(line)["name"] for line in listed.stdout.splitlines()] == ["nightly-report"]
    removed = _cli(shared_url, "unschedule", "nightly-report", cwd=tmp_path)
    assert removed.returncode == 0 and removed.stdout.strip() == "removed schedule 'nightly-report'"
    assert _cli(shared_url, "schedules", "--json", cwd=tmp_path).stdout == ""
    declare()
    as_json = _cli(shared_url, "unschedule", "nightly-report", "--json", cwd=tmp_path)
    assert json.loads(as_json.stdout) == {"removed": "nightly-report"}
    again = _cli(shared_url, "unschedule", "nightly-report", cwd=tmp_path)
    assert again.returncode == 1
    assert again.stderr.splitlines()[-1].startswith("error: no schedule named 'nightly-report'")


def test_unschedule_on_a_store_that_is_not_there_creates_none(tmp_path: Path) -> None:
    typo = tmp_path / "typo.db"
    gone = _cli(f"sqlite:///{typo}", "unschedule", "x", cwd=tmp_path)
    assert gone.returncode == 1 and not typo.exists()
    assert gone.stderr.strip() == (
        f"error: no store at {typo} (from --url); give --url sqlite:///PATH of an existing store"
    )


def test_shared_alone_prints_its_help_and_an_empty_key_is_a_usage_error(tmp_path: Path) -> None:
    alone = _stalwart("shared", cwd=tmp_path, clean=True)
    assert alone.returncode == 2 and alone.stdout == ""
    assert alone.stderr.startswith("Usage: ") and "error:" not in alone.stderr
    assert alone.stderr.splitlines()[-3:][0].split()[0] == "get"
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    for args in (("set", "", "1"), ("get", ""), ("history", "")):
        empty = _cli(url, "shared", *args, cwd=tmp_path)
        assert empty.returncode == 2, empty.stderr
        assert empty.stderr.startswith("error: Invalid value for 'KEY': it is empty; give the")
        assert "app.shared" not in empty.stderr
    assert not (tmp_path / "shared.db").exists()
