"""The ```bash blocks of the docs that run ``stalwart`` after a page's Python example: the
example runs in a fresh folder, then each command of the block in that folder through the real
CLI, and every one exits 0; twice in a row, as a reader runs them again (test_docs.py runs the
```python blocks)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from cli_process import stalwart

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
# (page, the heading whose ```bash block runs, the number of the ```python block run first)
PAGES = [("docs/schedules.md", "From the command line", 1)]


def _fenced(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```$", text, flags=re.M | re.S)


def _section(text: str, heading: str) -> str:
    start = text.index(f"## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


@pytest.mark.parametrize(("page", "heading", "example"), PAGES)
def test_the_commands_run_after_the_pages_example(
    page: str, heading: str, example: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (ROOT / page).read_text(encoding="utf-8")
    code = _fenced(text, "python")[example - 1]
    (commands,) = _fenced(_section(text, heading), "bash")
    monkeypatch.chdir(tmp_path)
    for run in (1, 2):
        exec(compile(code, f"{page} python block {example}", "exec"), {"__name__": "docs_example"})
        for line in commands.splitlines():
            argv = shlex.split(line)
            assert argv[0] == "stalwart", line
            done = stalwart(*argv[1:], cwd=tmp_path, clean=True)
            assert done.returncode == 0, f"{page}, run {run}: {line}: {done.stderr}"
