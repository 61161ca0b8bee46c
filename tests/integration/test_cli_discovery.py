"""Where the ``stalwart`` command finds its store (docs/cli.md, "Which store"): ``--url``, then
``--app`` or ``$STALWART_APP``, then ``[tool.stalwart]`` in the nearest ``pyproject.toml``,
then ``$STALWART_URL``, then the default; an error about a missing store names where its URL
came from. Run as the real command in a subprocess."""

from __future__ import annotations

import sqlite3
import subprocess
import textwrap
from pathlib import Path

import pytest

import stalwart
from cli_process import stalwart as _stalwart
from stalwart._errors import mask_url
from stalwart._store.base import SCHEMA_VERSION

AGENT = """
import stalwart
app = stalwart.Stalwart("sqlite:///agent.db")

@app.workflow(name="job")
def job() -> int:
    return 1
"""


def _cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return _stalwart(*args, cwd=cwd, env=env, clean=True)


def _store_with_a_run(path: Path, workflow_id: str) -> str:
    url = f"sqlite:///{path}"
    with stalwart.Stalwart(url) as app:

        @app.workflow(name="job")
        def job() -> int:
            return 1

        app.run(job, workflow_id=workflow_id)
    return url


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder whose pyproject.toml names its app, whose store has run 'in-app'."""
    root = tmp_path / "proj"
    (root / "src" / "deep").mkdir(parents=True)
    (root / "agent.py").write_text(AGENT)
    (root / "pyproject.toml").write_text(
        '[project]\nname = "p"\n\n[tool.stalwart]\napp = "agent:app"\n'
    )
    _store_with_a_run(root / "agent.db", "in-app")
    return root


def test_the_pyproject_app_is_found_from_a_subfolder_before_stalwart_url(
    project: Path, tmp_path: Path
) -> None:
    other = _store_with_a_run(tmp_path / "other.db", "in-other")
    listed = _cli("ls", cwd=project / "src" / "deep", STALWART_URL=other)
    assert listed.returncode == 0, listed.stderr
    assert "in-app" in listed.stdout and "in-other" not in listed.stdout
    assert listed.stderr.splitlines()[0] == (
        f"store: sqlite:///{project / 'agent.db'} "
        f"(from pyproject.toml at {project / 'pyproject.toml'}: app agent:app)"
    )
    assert not (project / "src" / "deep" / "agent.db").exists()
    shown = _cli("show", "in-app", cwd=project / "src")
    assert shown.returncode == 0 and shown.stdout.startswith("run in-app"), shown.stderr
    approvals = _cli("approvals", cwd=project)
    assert approvals.returncode == 0 and "no approval waits" in approvals.stdout

    explicit = _cli("ls", "--url", other, cwd=project)  # --url comes first
    assert "in-other" in explicit.stdout and "in-app" not in explicit.stdout
    assert explicit.stderr.splitlines()[0] == f"store: {other} (from --url)"


def test_app_option_and_stalwart_app_come_before_the_pyproject(
    project: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "mine.py").write_text(AGENT.replace("agent.db", "mine.db"))
    _store_with_a_run(elsewhere / "mine.db", "in-mine")
    env = {"PYTHONPATH": str(elsewhere)}
    by_option = _cli("ls", "--app", "mine:app", cwd=project, **env)
    assert by_option.returncode == 1  # mine.db relative to the working directory: not there
    assert f"error: no store at {project / 'mine.db'} (from --app mine:app)" in by_option.stderr
    assert not (project / "mine.db").exists()
    by_option = _cli("--app", "mine:app", "ls", cwd=elsewhere)
    assert "in-mine" in by_option.stdout and "(from --app mine:app)" in by_option.stderr
    by_env = _cli("ls", cwd=elsewhere, STALWART_APP="mine:app")
    assert "in-mine" in by_env.stdout and "(from STALWART_APP=mine:app)" in by_env.stderr
    wrong = _cli("ls", "--app", "mine.py:app", cwd=elsewhere)
    assert wrong.returncode == 1
    assert wrong.stderr.splitlines() == [
        "error: 'mine.py:app': name the module, not the file: mine:app"
    ]


def test_a_pyproject_url_is_relative_to_its_folder(tmp_path: Path) -> None:
    root = tmp_path / "svc"
    (root / "data").mkdir(parents=True)
    (root / "lib").mkdir()
    (root / "pyproject.toml").write_text('[tool.stalwart]\nurl = "sqlite:///data/runs.db"\n')
    missing = _cli("ls", cwd=root / "lib")
    assert missing.returncode == 1
    assert missing.stderr.splitlines() == [
        f"error: no store at {root / 'data' / 'runs.db'} (from pyproject.toml at "
        f"{root / 'pyproject.toml'}); fix url in its [tool.stalwart], or give --url "
        "sqlite:///PATH of an existing store"
    ]
    _store_with_a_run(root / "data" / "runs.db", "in-svc")
    listed = _cli("ls", "--json", cwd=root / "lib")
    assert listed.returncode == 0 and '"in-svc"' in listed.stdout, listed.stderr


def test_a_missing_store_names_where_its_url_came_from(tmp_path: Path) -> None:
    default = _cli("ls", cwd=tmp_path)
    assert default.returncode == 1 and "STALWART_URL /" not in default.stderr
    assert default.stderr.startswith(
        f"error: no store at {tmp_path / '.stalwart' / 'stalwart.db'} (the default store: no "
        "--url, --app, STALWART_APP, [tool.stalwart] or STALWART_URL); give --url "
        "sqlite:///PATH of an existing store, or --app MODULE:APP to use your app's store"
    )
    from_env = _cli("approvals", cwd=tmp_path, STALWART_URL="sqlite:///gone.db")
    assert from_env.returncode == 1
    assert f"no store at {tmp_path / 'gone.db'} (from STALWART_URL); set STALWART_URL to an " in (
        from_env.stderr
    )
    from_url = _cli("breakers", "--url", "sqlite:///typo.db", cwd=tmp_path)
    assert f"no store at {tmp_path / 'typo.db'} (from --url)" in from_url.stderr
    memory = _cli("schedules", cwd=tmp_path, STALWART_URL="memory://")
    assert memory.returncode == 1
    assert memory.stderr.startswith("error: memory:// (from STALWART_URL): a memory store")
    for result in (default, from_env, from_url, memory):
        assert len(result.stderr.splitlines()) == 1, result.stderr
    assert not list(tmp_path.glob("*.db"))


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('[tool.stalwart]\nURL = "sqlite:///x.db"\n', "unknown key 'URL'"),
        ('[tool.stalwart]\napp = "a:app"\nurl = "sqlite:///x.db"\n', "one of them"),
        ("[tool.stalwart]\napp = 3\n", "app must be a non-empty string"),
        ("[tool.stalwart\n", "cannot read"),
    ],
)
def test_a_wrong_tool_stalwart_table_is_one_error_naming_the_file(
    tmp_path: Path, table: str, message: str
) -> None:
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent(table))
    wrong = _cli("ls", cwd=tmp_path)
    assert wrong.returncode == 1
    [line] = wrong.stderr.splitlines()
    assert (
        line.startswith("error: ") and message in line and str(tmp_path / "pyproject.toml") in line
    )


def test_check_and_worker_take_the_app_the_discovery_finds(project: Path, tmp_path: Path) -> None:
    checked = _cli("check", cwd=project / "src")
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.splitlines()[-1] == "0 run(s) checked: every one replays on this code"
    assert checked.stderr.startswith(f"store: sqlite:///{project / 'agent.db'}")
    for command in ("check", "worker"):
        none = _cli(command, cwd=tmp_path)
        assert none.returncode == 2
        [line] = none.stderr.splitlines()
        assert line.startswith(
            "error: which app? give MODULE:APP, --app MODULE:APP, $STALWART_APP, or "
            '[tool.stalwart] app = "MODULE:APP" in pyproject.toml (see: '
        )
    both = _cli("check", "agent:app", "--app", "other:app", cwd=project)
    assert both.returncode == 2 and "name one app" in both.stderr


DECLARING = (
    AGENT
    + """
app.queue("refunds", concurrency=2)
app.schedule(job, "0 3 * * *", name="nightly")
"""
)


def _rows(db: Path, table: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute(f"SELECT * FROM {table}"))


def test_a_read_command_on_a_pyproject_app_creates_and_writes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "declaring"
    root.mkdir()
    (root / "agent.py").write_text(DECLARING)
    (root / "pyproject.toml").write_text('[tool.stalwart]\napp = "agent:app"\n')
    missing = _cli("ls", cwd=root)
    assert missing.returncode == 1
    assert missing.stderr.splitlines() == [
        f"error: no store at {root / 'agent.db'} (from pyproject.toml at "
        f"{root / 'pyproject.toml'}: app agent:app); start a worker of agent:app to create its "
        "store, or give --url sqlite:///PATH of an existing store"
    ]
    assert not list(root.glob("agent.db*"))
    _store_with_a_run(root / "agent.db", "before")
    tables = ("schedules", "queues")
    before = {table: _rows(root / "agent.db", table) for table in tables}
    assert before == {"schedules": [], "queues": []}
    for command in (("ls",), ("schedules",), ("show", "before")):
        done = _cli(*command, cwd=root)
        assert done.returncode == 0, done.stderr
    assert {table: _rows(root / "agent.db", table) for table in tables} == before


DEFAULT_AGENT = """
import stalwart
app = stalwart.Stalwart()

@app.workflow(name="job")
def job() -> int:
    return 1
"""


def _default_project(tmp_path: Path) -> Path:
    """A project whose app takes Stalwart()'s store: $STALWART_URL, else the default."""
    root = tmp_path / "myagent"
    (root / "sub").mkdir(parents=True)
    (root / "agent.py").write_text(DEFAULT_AGENT)
    (root / "pyproject.toml").write_text('[tool.stalwart]\napp = "agent:app"\n')
    return root


def test_messages_name_a_relative_sqlite_store_absolutely_from_a_subfolder(
    tmp_path: Path,
) -> None:
    root = _default_project(tmp_path)
    db = root / ".stalwart" / "stalwart.db"
    _store_with_a_run(db, "done")
    shown = _cli("show", "nope", cwd=root / "sub")
    assert shown.returncode == 1
    assert shown.stderr.splitlines()[-1].startswith(
        f"error: no run with workflow_id 'nope' in sqlite:///{db}"
    ), shown.stderr


def test_a_store_reached_through_dotdot_is_named_by_its_own_path(tmp_path: Path) -> None:
    root = _default_project(tmp_path)
    db = root / ".stalwart" / "stalwart.db"
    _store_with_a_run(db, "done")
    (root / "sub" / "deeper").mkdir(parents=True, exist_ok=True)
    listed = _cli(
        "ls", "--url", "sqlite:///../../.stalwart/stalwart.db", cwd=root / "sub" / "deeper"
    )
    assert listed.returncode == 0, listed.stderr
    assert f"store: sqlite:///{db} (from --url)" in listed.stderr, listed.stderr


def test_a_store_from_an_app_says_the_app_and_where_its_url_came_from(tmp_path: Path) -> None:
    root = _default_project(tmp_path)
    pyproject = root / "pyproject.toml"
    missing = _cli("ls", cwd=root, STALWART_URL="sqlite:///other.db")
    assert missing.returncode == 1
    assert missing.stderr.startswith(
        f"error: no store at {root / 'other.db'} (from pyproject.toml at {pyproject}: app "
        "agent:app, whose store comes from STALWART_URL); "
    ), missing.stderr
    memory = _cli("ls", cwd=root, STALWART_URL="memory://")
    assert (
        f"error: memory:// (from pyproject.toml at {pyproject}: app agent:app, whose store "
        "comes from STALWART_URL): a memory store lives in one process"
    ) in memory.stderr, memory.stderr
    default = _cli("ls", cwd=root / "sub")
    assert default.stderr.startswith(
        f"error: no store at {root / '.stalwart' / 'stalwart.db'} (from pyproject.toml at "
        f"{pyproject}: app agent:app, whose store is the default); "
    ), default.stderr
    other = _store_with_a_run(root / "other.db", "there")
    listed = _cli(
        "ls", cwd=root / "sub", STALWART_APP="agent:app", STALWART_URL=other, PYTHONPATH=str(root)
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr.splitlines()[0] == (
        f"store: {other} (from STALWART_APP=agent:app, whose store comes from STALWART_URL)"
    )
    named = _cli("ls", "--app", "agent:app", cwd=root, STALWART_URL="sqlite:///other.db")
    assert named.stderr.splitlines()[0] == (
        f"store: {other} (from --app agent:app, whose store comes from STALWART_URL)"
    ), named.stderr
    (root / "fixed.py").write_text(DEFAULT_AGENT.replace("Stalwart()", f"Stalwart({other!r})"))
    fixed = _cli("ls", cwd=root, STALWART_APP="fixed:app")
    assert fixed.stderr.splitlines()[0] == f"store: {other} (from STALWART_APP=fixed:app)"


def _downgrade(url: str) -> int:
    """Make the store look as the release before left it; its schema version now."""
    with stalwart.Stalwart(url) as app:
        store = stalwart.testing.store_of(app)
        stalwart.testing.execute_sql(
            store, "DELETE FROM stalwart_schema WHERE version = :v", {"v": SCHEMA_VERSION}
        )
        (row,) = stalwart.testing.execute_sql(store, "SELECT max(version) FROM stalwart_schema")
    return int(row[0])


def _version(url: str) -> int:
    import psycopg

    if url.startswith("sqlite:///"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            return int(conn.execute("SELECT max(version) FROM stalwart_schema").fetchone()[0])
    base, _, schema = url.partition("?schema=")
    with psycopg.connect(base) as conn:
        row = conn.execute(f"SELECT max(version) FROM {schema}.stalwart_schema").fetchone()
    return int(row[0])


def test_a_read_command_on_an_app_whose_store_is_older_names_the_command_and_the_fix(
    shared_url: str, tmp_path: Path
) -> None:
    """Not ``stalwart check``'s wording: what ran, the schema found and needed, and what to do.
    Nothing is created or migrated."""
    (tmp_path / "agent.py").write_text(AGENT.replace("sqlite:///agent.db", shared_url))
    masked = mask_url(shared_url)
    fix = "start a worker of agent:app (or any command that writes) to"
    if shared_url.startswith("postgresql"):  # a schema not made yet: nothing is created
        bare = _cli("ls", "--app", "agent:app", cwd=tmp_path)
        assert bare.returncode == 1
        assert bare.stderr.splitlines() == [
            f"error: stalwart ls: the store {masked} (from --app agent:app) has no stalwart "
            f"schema and this stalwart needs {SCHEMA_VERSION}; {fix} create it, or give --url "
            "of another store"
        ]
    older = _downgrade(shared_url)
    for command in (["ls"], ["show", "x"], ["approvals"]):
        refused = _cli(*command, "--app", "agent:app", cwd=tmp_path)
        assert refused.returncode == 1
        assert refused.stderr.splitlines() == [
            f"error: stalwart {command[0]}: the store {masked} (from --app agent:app) has "
            f"schema version {older} and this stalwart needs {SCHEMA_VERSION}; {fix} upgrade "
            "it, or give --url of another store"
        ]
    assert _version(shared_url) == older
