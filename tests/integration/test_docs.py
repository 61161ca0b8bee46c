"""Every ```python block in README.md and docs/*.md runs, so the docs cannot drift from the code.

Each block runs on its own: a fresh temporary working directory and a fresh module namespace
(registered in ``sys.modules`` while it runs, so enums, dataclasses and pydantic models declared in
an example can be imported back by the serializer, as they would be from a real module). Blocks
fenced as ```python-snippet are deliberately partial and are not executed. A block whose first
line is ``# needs: KIND`` talks to a broker this machine runs (``tests/brokers.py``), or needs
the extra ``ui``: it is skipped with one line when that broker does not answer (or the extra is
not installed), except under ``CI=true``.

A reader runs an example again, so each block runs twice in a row in the same folder: the second
run finds whatever the first one left there (its store files, its modules, its marker files). A
run fails if it leaves a process it started running (an example that starts workers stops them in
``finally``) or a thread that does not end, and a run that hangs fails on the test's timeout.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest

import stalwart

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(?P<lang>[^\s`]*)[^\n]*$")
EXECUTED = "python"
NOT_EXECUTED = "python-snippet"
RUNS = 2  # every executed block runs this many times in a row in one folder
THREAD_GRACE = 5.0  # seconds a block's threads may take to end after the block returned


def _blocks(path: Path) -> list[tuple[str, int, str]]:
    """``(language, first line number of the code, code)`` for every fenced block of ``path``."""
    blocks = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        start = i + 1
        end = start
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        if end == len(lines):
            raise AssertionError(f"{path.name}:{i + 1}: code fence is never closed")
        blocks.append((opening["lang"], start + 1, "\n".join(lines[start:end]) + "\n"))
        i = end + 1
    return blocks


def _python_blocks() -> list[pytest.param]:
    params = []
    for path in DOC_FILES:
        rel = path.relative_to(ROOT).as_posix()
        index = 0
        for lang, lineno, code in _blocks(path):
            if lang != EXECUTED:
                continue
            index += 1
            params.append(pytest.param(rel, lineno, code, id=f"{rel}:{index}"))
    return params


PYTHON_BLOCKS = _python_blocks()


def test_the_docs_exist_and_have_examples() -> None:
    for name in ("README.md", "docs/tutorial.md", "docs/replay.md", "docs/stores.md"):
        assert (ROOT / name).is_file(), f"{name} is missing"
    assert (ROOT / "docs/retries.md").is_file()
    assert len(PYTHON_BLOCKS) >= 10, "the block parser found suspiciously few examples"


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_step_returns_only_the_message_text(path: Path) -> None:
    """docs/models.md: a step returns the response, so that its usage counts; the text alone
    drops the tokens (and logs "recorded no usage" under ``Retry.llm()``)."""
    text = path.read_text(encoding="utf-8")
    dropped = re.findall(r"return [^\n]*\.choices\[0\]\.message\.content", text)
    assert not dropped, f"{path.name}: {dropped}: return the response (docs/models.md)"


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_python_blocks_are_marked_as_run_or_not(path: Path) -> None:
    """A block tagged ``py`` or ``python3`` would silently escape this test; insist on a choice."""
    for lang, lineno, _code in _blocks(path):
        if lang.startswith("py"):
            assert lang in (EXECUTED, NOT_EXECUTED), (
                f"{path.name}:{lineno - 1}: fence language {lang!r}; use ```{EXECUTED} "
                f"(executed by this test) or ```{NOT_EXECUTED} (not executed)"
            )


def _anchor(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # no headings inside code
    return {_anchor(m[1]) for m in re.finditer(r"^#+ (.+)$", text, flags=re.M)}


@pytest.mark.parametrize("path", DOC_FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(path: Path) -> None:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        assert linked.is_file(), f"{path.name}: link to missing file {target!r}"
        if anchor and linked.suffix == ".md":
            assert anchor in _anchors(linked), f"{path.name}: no heading for {target!r}"


def _exec_block(rel: str, lineno: int, code: str) -> None:
    name = "docs_example_" + re.sub(r"\W", "_", f"{rel}_{lineno}")
    module = types.ModuleType(name)
    module.__file__ = str(ROOT / rel)
    sys.modules[name] = module
    # Pad with blank lines so that tracebacks point at the line in the Markdown file.
    compiled = compile("\n" * (lineno - 1) + code, str(ROOT / rel), "exec")
    try:
        exec(compiled, module.__dict__)
    finally:
        for value in list(module.__dict__.values()):
            if isinstance(value, stalwart.Stalwart):
                value.close()
        del sys.modules[name]


def _stop_leftovers(started: list[subprocess.Popen[bytes]]) -> list[str]:
    """Kill the processes a run left running; describe them."""
    leftovers = []
    for process in started:
        if process.poll() is None:
            leftovers.append(f"pid {process.pid}: {process.args!r}")
            process.kill()
            process.wait()
    started.clear()
    return leftovers


def _lingering_threads(before: set[threading.Thread]) -> list[str]:
    """The threads a run started that are still alive after a grace period."""
    deadline = time.monotonic() + THREAD_GRACE
    for thread in set(threading.enumerate()) - before:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in set(threading.enumerate()) - before if t.is_alive()]


@pytest.mark.timeout(30 * RUNS)
@pytest.mark.parametrize(("rel", "lineno", "code"), PYTHON_BLOCKS)
def test_python_block_runs_twice(
    rel: str, lineno: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    needs = re.match(r"# needs: (\w+)\n", code)
    if needs is not None:
        from brokers import require

        require(needs[1])
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("STALWART_URL", raising=False)
    started: list[subprocess.Popen[bytes]] = []

    class TrackedPopen(subprocess.Popen):  # type: ignore[type-arg]
        """Popen that remembers what the example started (subprocess.run uses it too)."""

        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            started.append(self)

    monkeypatch.setattr(subprocess, "Popen", TrackedPopen)
    for run in range(1, RUNS + 1):
        where = f"{rel}:{lineno}, run {run} of {RUNS} in the same folder"
        threads_before = set(threading.enumerate())
        try:
            _exec_block(rel, lineno, code)
        except BaseException as exc:
            exc.add_note(where)
            raise
        finally:
            lingering = _lingering_threads(threads_before)
            leftovers = _stop_leftovers(started)
        assert not leftovers, f"{where}: left processes running (stop them in finally): {leftovers}"
        assert not lingering, f"{where}: threads still running after the block: {lingering}"
