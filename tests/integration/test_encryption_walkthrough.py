"""docs/encryption.md's walkthrough on disk runs as written: its ``agent.py`` in a fresh folder,
then its ```bash block line by line in one shell (keygen, a run, rotation, rekey, dropping the
old key, and what an operator without the key sees), through the real CLI."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]


def _walkthrough() -> tuple[str, str, str]:
    text = (ROOT / "docs" / "encryption.md").read_text(encoding="utf-8")
    start = text.index("## A walkthrough on disk\n")
    section = text[start : text.index("\n## ", start + 1)]
    (agent,) = re.findall(r"^```python\n(.*?)^```$", section, flags=re.M | re.S)
    (commands,) = re.findall(r"^```bash\n(.*?)^```$", section, flags=re.M | re.S)
    (shown,) = re.findall(r"^```text\n(.*?)^```$", section, flags=re.M | re.S)
    return agent, commands, shown


def _timeless(line: str) -> str:
    line = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", "TIME", line)
    return re.sub(r"\d+\.\d\ds", "DURATION", line).rstrip()


def test_the_walkthrough_runs_and_shows_what_it_says(tmp_path: Path) -> None:
    agent, commands, shown = _walkthrough()
    (tmp_path / "agent.py").write_text(agent, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STALWART_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        ["bash", "-e", "-c", commands],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "the answer to 'where is my parcel?'" in out
    assert "re-encrypted 6 values; every payload is under the current key" in out
    keyless = out.rsplit("run ticket-1", 1)[1]  # the last show: without the key
    assert "where is my parcel" not in keyless
    printed = {_timeless(line) for line in keyless.splitlines()}
    for line in shown.splitlines():  # the doc's table, times aside, is what was printed
        assert _timeless(line) in printed, line
    assert keyless.count('"encrypted (key k2)"') == 3
