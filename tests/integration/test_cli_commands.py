"""The command line of 0.2, run as the real ``stalwart`` command in a subprocess: where the
store comes from, one-line errors with hints, paging, a run's header and timeline, bulk
operator actions."""

from __future__ import annotations

import json
import subprocess
import textwrap
import threading
import time
from pathlib import Path

import pytest

import stalwart
from cli_process import stalwart as _stalwart


def _cli(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return _stalwart(*args, cwd=cwd, stdin=stdin, clean=True)


@pytest.fixture
def store(tmp_path: Path) -> str:
    """A SQLite store with runs: six completed, two failed, one waiting on an event."""
    url = f"sqlite:///{tmp_path / 'ops.db'}"
    with stalwart.Stalwart(url) as app:

        @app.step(name="add", retry=stalwart.Retry.never())
        def add(x: int) -> int:
            if x < 0:
                raise ValueError(f"negative: {x}")
            return x + 1

        @app.workflow(name="count")
        def count(x: int) -> int:
            return add(x)

        @app.workflow(name="inbox")
        def inbox() -> object:
            return stalwart.wait_for_event("ping", timeout=3600)

        for i in range(6):
            app.run(count, i, workflow_id=f"ok-{i}")
        for i in range(2):
            with pytest.raises(stalwart.WorkflowFailed):
                app.run(count, -1 - i, workflow_id=f"bad-{i}")
    return url


def test_url_goes_before_or_after_the_command_and_version_prints(
    store: str, tmp_path: Path
) -> None:
    before = _cli("--url", store, "ls", "--json", cwd=tmp_path)
    after = _cli("ls", "--json", "--url", store, cwd=tmp_path)
    assert before.returncode == after.returncode == 0, after.stderr
    assert before.stdout == after.stdout and len(before.stdout.splitlines()) == 8
    version = _cli("--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.strip() == f"stalwart {stalwart.__version__}"


def test_errors_are_one_line_with_a_hint(store: str, tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(
        "import stalwart\napp = stalwart.Stalwart('sqlite:///a.db')\n"
    )
    file_name = _cli("worker", "agent.py:app", cwd=tmp_path)
    assert file_name.returncode == 1
    assert file_name.stderr.splitlines() == [
        "error: 'agent.py:app': name the module, not the file: agent:app"
    ]
    empty = _cli("worker", "agent:app", cwd=tmp_path)
    assert empty.returncode == 1 and len(empty.stderr.splitlines()) == 1
    assert empty.stderr.startswith("error: this app declares no workflows")
    result = _cli("--url", store, "resolve", "bad-0", "1", "--result", "ch_1", cwd=tmp_path)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1
    assert "'\"ch_1\"'" in result.stderr
    unknown = _cli("--url", store, "ls", "--bogus", cwd=tmp_path)
    assert unknown.returncode == 2 and unknown.stderr.startswith("error: No such option")
    assert "Traceback" not in unknown.stderr + result.stderr + empty.stderr


def test_a_worker_refuses_a_url_that_is_not_its_apps_store(tmp_path: Path) -> None:
    (tmp_path / "fleet_app.py").write_text(
        textwrap.dedent(
            """
            import stalwart
            app = stalwart.Stalwart("sqlite:///own.db")

            @app.workflow(name="job")
            def job() -> int:
                return 1
            """
        )
    )
    other = f"sqlite:///{tmp_path / 'other.db'}"
    refused = _cli("worker", "fleet_app:app", "--url", other, cwd=tmp_path)
    assert refused.returncode == 1 and len(refused.stderr.splitlines()) == 1
    assert "uses the store sqlite:///own.db, not --url" in refused.stderr
    assert not (tmp_path / "other.db").exists()


def test_ls_pages_and_says_how_many_more_match(store: str, tmp_path: Path) -> None:
    first = _cli("--url", store, "ls", "--limit", "3", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    header, *rows = first.stdout.splitlines()
    assert header.split()[:5] == ["WORKFLOW", "ID", "NAME", "STATUS", "QUEUE"]
    assert "WAITING FOR" in header and len(rows) == 3
    hint = first.stderr.splitlines()[-1]
    assert hint.startswith("5 more: add --before ")
    page = _cli("--url", store, "ls", "--limit", "3", "--json", cwd=tmp_path)
    assert [json.loads(line)["workflow_id"] for line in page.stdout.splitlines()] == [
        "bad-1",
        "bad-0",
        "ok-5",
    ]
    assert page.stderr.splitlines()[-1].startswith("5 more: ")  # JSON Lines stay clean
    since = _cli("--url", store, "ls", "--since", "1h", "--status", "failed", cwd=tmp_path)
    assert len(since.stdout.splitlines()) == 3  # the header and two failed runs
    assert "ValueError: negative" in since.stdout
    future = _cli("--url", store, "ls", "--before", "2000-01-01T00:00", cwd=tmp_path)
    assert future.returncode == 0 and "no runs match" in future.stdout
    wrong = _cli("--url", store, "ls", "--since", "yesterday", cwd=tmp_path)
    assert wrong.returncode == 2 and "15m, 2h, 7d" in wrong.stderr


def test_show_has_a_header_a_duration_column_and_one_entry_whole(
    store: str, tmp_path: Path
) -> None:
    shown = _cli("--url", store, "show", "bad-0", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == "run bad-0"
    fields = {line.split()[0]: line for line in lines[1:8]}
    assert fields["workflow"].split()[1] == "count"
    assert "failed" in fields["status"] and "default" in fields["queue"]
    assert "1 step attempt(s)" in fields["usage"] and fields["duration"].split()[1][-1] == "s"
    table = lines[lines.index("") + 1 :]
    assert table[0].split() == [
        "SEQ", "KIND", "NAME", "STATUS", "TRY", "FINISHED", "DURATION", "KEY", "DETAIL"
    ]  # fmt: skip
    assert "started" in table[1] and "executing" not in table[1]
    assert any("ValueError: negative: -1" in row for row in table)
    one = _cli("--url", store, "show", "bad-0", "--seq", "1", cwd=tmp_path)
    (entry,) = json.loads(one.stdout)  # one entry per attempt, as a JSON array
    assert entry["name"] == "add" and entry["error"].startswith("ValueError")
    (ended,) = [row for row in table if row.split()[:2] == ["run", "finished"]]
    assert ended.split()[2] == "failed" and "StepFailed" in ended
    follow = _cli("--url", store, "show", "ok-1", "--follow", cwd=tmp_path)
    assert follow.returncode == 0 and follow.stdout.splitlines()[-1] == "run ok-1: completed"


def test_bulk_retry_asks_unless_yes_and_exits_1_if_any_is_refused(
    store: str, tmp_path: Path
) -> None:
    piped = _cli("--url", store, "retry", "--status", "failed", cwd=tmp_path, stdin="")
    assert piped.returncode == 2 and "add --yes" in piped.stderr
    done = _cli("--url", store, "retry", "--status", "failed", "--yes", "--by", "ana", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == ["retried bad-0: pending", "retried bad-1: pending"]
    mixed = _cli("--url", store, "cancel", "bad-0", "ok-0", cwd=tmp_path)
    assert mixed.returncode == 1
    assert "cancel requested for bad-0" in mixed.stdout
    assert "error: ok-0: " in mixed.stderr
    neither = _cli("--url", store, "retry", cwd=tmp_path)
    assert neither.returncode == 2 and "give run IDs, or --status" in neither.stderr


def test_send_event_says_when_it_was_a_duplicate(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'events.db'}"
    with stalwart.Stalwart(url) as app:

        @app.workflow(name="inbox")
        def inbox() -> object:
            return stalwart.wait_for_event("ping")

        app.start(inbox, workflow_id="i1")
        assert app.send_event("i1", "ping", 1, dedup_key="k") is True
        assert app.send_event("i1", "ping", 1, dedup_key="k") is False
    again = _cli("--url", url, "send-event", "i1", "ping", "1", "--dedup-key", "k", cwd=tmp_path)
    assert again.returncode == 0 and again.stdout.startswith("duplicate: ")
    fresh = _cli("--url", url, "send-event", "i1", "ping", "2", "--dedup-key", "n", cwd=tmp_path)
    assert fresh.stdout.startswith("sent 'ping' to i1")


def test_a_newcomer_looking_for_the_demos_run_is_told_where_it_is(tmp_path: Path) -> None:
    demo = tmp_path / ".stalwart" / "demo.db"
    demo.parent.mkdir()
    stalwart.Stalwart(f"sqlite:///{demo}").close()
    env_free = _cli("ls", cwd=tmp_path)  # no --url: the default store, which does not exist
    assert env_free.returncode == 1
    assert "add --url sqlite:///.stalwart/demo.db" in env_free.stderr
    stalwart.Stalwart(f"sqlite:///{tmp_path / '.stalwart' / 'stalwart.db'}").close()
    missing = _cli("show", "refund-T-1042", cwd=tmp_path)
    assert missing.returncode == 1 and len(missing.stderr.splitlines()) == 2  # store, error
    assert "stalwart --url sqlite:///.stalwart/demo.db show refund-T-1042" in missing.stderr


def test_show_counts_the_attempt_under_way_of_a_running_step(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'busy.db'}"
    entered, release = threading.Event(), threading.Event()
    with stalwart.Stalwart(url, lease_seconds=1.0) as app:  # its keeper publishes the step

        @app.step(name="slow")
        def slow() -> int:
            entered.set()
            release.wait(60)
            return 1

        @app.workflow(name="busy")
        def busy() -> int:
            return slow()

        runner = threading.Thread(target=app.run, args=(busy,), kwargs={"workflow_id": "busy-1"})
        runner.start()
        try:
            assert entered.wait(60)
            deadline = time.monotonic() + 60
            shown = _cli("--url", url, "show", "busy-1", cwd=tmp_path)
            while "  now " not in shown.stdout and time.monotonic() < deadline:
                shown = _cli("--url", url, "show", "busy-1", cwd=tmp_path)
        finally:
            release.set()
            runner.join(60)
    assert shown.returncode == 0, shown.stderr
    (usage,) = [line for line in shown.stdout.splitlines() if line.startswith("  usage ")]
    assert usage.endswith("0 step attempt(s) finished, 1 under way"), usage
