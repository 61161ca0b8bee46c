"""docs/reliability.md's recipes match what the repository does: the fault lab's clock-skew
settings, the command that runs one lab test, the dev install, a PostgreSQL install that starts
no server the lab does not need; and the pages on leases state the fencing limit."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RELIABILITY = (ROOT / "docs/reliability.md").read_text(encoding="utf-8")
DEV_INSTALL = "python3 -m venv .venv && .venv/bin/pip install -e '.[dev]'"


def _skew_settings() -> list[str]:
    """The names of the environment ``lab.skewed_clock_env`` returns (read from its source:
    calling it needs libfaketime)."""
    tree = ast.parse((ROOT / "tests/faults/lab.py").read_text(encoding="utf-8"))
    (func,) = [
        n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "skewed_clock_env"
    ]
    (ret,) = [n for n in ast.walk(func) if isinstance(n, ast.Return)]
    assert isinstance(ret.value, ast.Dict)
    return [k.value for k in ret.value.keys if isinstance(k, ast.Constant)]


def test_the_clock_skew_recipe_names_every_setting_of_the_lab() -> None:
    settings = _skew_settings()
    assert "FAKETIME_DONT_FAKE_MONOTONIC" in settings
    for name in settings:
        assert f"`{name}" in RELIABILITY, name
    assert "lab_faketime" in RELIABILITY and "sitecustomize.py" in RELIABILITY
    fleet = (ROOT / "docs/fleet.md").read_text(encoding="utf-8")
    assert "not a skew but a broken clock" in fleet


def test_the_command_that_runs_one_lab_test_names_a_lab_test() -> None:
    (line,) = re.findall(
        r"^\.venv/bin/python -m pytest -m faults (\S+) -k (\w+)$", RELIABILITY, re.M
    )
    path, word = line
    source = (ROOT / path).read_text(encoding="utf-8")  # the file exists
    assert "pytestmark = pytest.mark.faults" in source  # -m faults keeps it
    assert len(re.findall(rf"def test_\w*{word}|\"{word}\"", source)) == 1  # -k picks one
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    markers = pyproject["tool"]["pytest"]["ini_options"]["markers"]
    assert any(m.startswith("faults:") for m in markers)


def test_the_dev_install_is_given_and_is_the_makefiles() -> None:
    assert DEV_INSTALL in (ROOT / "README.md").read_text(encoding="utf-8")
    assert DEV_INSTALL in RELIABILITY
    assert "pip install --quiet -e '.[dev]'" in (ROOT / "Makefile").read_text(encoding="utf-8")


def test_the_lab_install_starts_no_postgresql_cluster() -> None:
    installs = re.findall(r"apt-get install[^\n]*", RELIABILITY)
    assert installs
    for line in installs:
        assert not re.search(r"\bpostgresql(\s|$)", line), line  # the metapackage: a cluster
    assert re.search(r"create_main_cluster = false[^\n]*\n[^\n]*postgresql-\d+", RELIABILITY)


def test_the_lease_pages_state_the_fencing_limit() -> None:
    for page in ("reliability.md", "irreversible.md", "workers.md"):
        text = (ROOT / "docs" / page).read_text(encoding="utf-8")
        assert "stalwart.heartbeat()" in text and "stalwart.idempotency_key()" in text, page
        assert "right before" in text, page
