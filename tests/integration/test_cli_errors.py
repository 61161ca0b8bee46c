"""Every error of the ``stalwart`` command is one ``error: ...`` line that says what to do: bad
numbers, usage mistakes, a missing extra (with an install hint that works from this source
tree). Run as the real command in a subprocess; a missing extra is made by blocking its import
(``sys.modules[name] = None``) in the process before the command runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={k: v for k, v in os.environ.items() if k not in ("STALWART_URL", "STALWART_APP")},
    )


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _run([sys.executable, "-m", "stalwart", *args], cwd)


def _without(modules: list[str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command in a process where importing each of ``modules`` fails."""
    code = (
        "import sys\n"
        f"for name in {modules!r}:\n"
        "    sys.modules[name] = None\n"
        f"sys.argv = ['stalwart', *{list(args)!r}]\n"
        "from stalwart._cli import main\n"
        "main()\n"
    )
    return _run([sys.executable, "-c", code], cwd)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["ls", "--limit", "abc"], "'abc' is not a whole number; give 1 or more, for example --limit 20"),  # noqa: E501
        (["ls", "--limit", "0"], "0 is out of range; give 1 or more, for example --limit 20"),
        (["ui", "--port", "x"], "give 0 to 65535, for example --port 8377"),
        (["show", "r", "--seq", "first"], "give 1 or more, for example --seq 3"),
        (["resolve", "r", "two", "--rerun"], "'two' is not a whole number; give 1 or more, for example 3"),  # noqa: E501
        (["fork", "r", "--from", "x"], "give 1 or more, for example --from 3"),
        (["worker", "a:app", "--concurrency", "0"], "give 1 or more, for example --concurrency 8"),
        (["worker", "a:app", "--metrics-port", "-1"], "give 0 to 65535"),
    ],
)  # fmt: skip
def test_a_bad_number_says_what_to_pass(tmp_path: Path, args: list[str], says: str) -> None:
    done = _cli(*args, cwd=tmp_path)
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith("error: ") and says in line, line
    assert "valid integer" not in line


@pytest.mark.parametrize(
    "args",
    [
        ["show"],
        ["no-such-command"],
        ["ls", "--status", "bogus"],
        ["ls", "--url"],
        ["ls", "--json=1"],
    ],
)
def test_usage_mistakes_are_one_error_line(tmp_path: Path, args: list[str]) -> None:
    done = _cli(*args, cwd=tmp_path)
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith("error: "), line


def test_the_group_itself_prints_error_lines_not_clicks_usage_block(tmp_path: Path) -> None:
    code = "import sys; sys.argv = ['stalwart', 'ls', '--limit', 'x']\n"
    code += "from stalwart._cli import cli\ncli()\n"
    done = _run([sys.executable, "-c", code], tmp_path)
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith("error: Invalid value for '--limit': 'x' is not a whole number")
    alone = _cli(cwd=tmp_path)
    assert alone.returncode == 0 and alone.stdout.startswith("Usage: ")
    assert "Commands:" in alone.stdout and alone.stderr == ""


def test_ui_without_the_extra_names_an_install_that_works_from_this_checkout(
    tmp_path: Path,
) -> None:
    for blocked in (["fastapi"], ["uvicorn"], ["stalwart._ui.server"]):
        done = _without(blocked, "ui", "--port", "0", cwd=tmp_path)
        assert done.returncode == 1, done.stderr
        assert done.stderr.splitlines() == [
            "error: the console needs the ui extra (FastAPI and uvicorn): "
            f"pip install -e '.[ui]' in {ROOT} (this stalwart's source tree)"
        ]


def test_a_postgres_url_without_the_driver_names_the_extra(tmp_path: Path) -> None:
    url = "postgresql://agents:secret@127.0.0.1:5432/test"
    done = _without(["psycopg"], "ls", "--url", url, cwd=tmp_path)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "error: postgresql://agents:***@127.0.0.1:5432/test: the PostgreSQL store needs psycopg; "
        f"install it with pip install -e '.[postgres]' in {ROOT} (this stalwart's source tree)"
    ]


def test_the_hint_outside_a_source_tree_names_both_forms(tmp_path: Path) -> None:
    """An installed (not editable) stalwart has no source tree above it: both forms."""
    site = tmp_path / "lib" / "site-packages" / "stalwart"
    site.mkdir(parents=True)
    (site / "_errors.py").write_text((ROOT / "src" / "stalwart" / "_errors.py").read_text())
    code = f"import sys; sys.path.insert(0, {str(site)!r}); import _errors\n"
    code += "print(_errors.install_hint('ui'))\n"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == (
        "pip install 'stalwart[ui]' (in stalwart's source tree: pip install -e '.[ui]')"
    )
