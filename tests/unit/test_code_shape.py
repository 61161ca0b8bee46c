"""The code keeps the shape docs/architecture.md describes: no module of ``src/stalwart`` is
over 600 lines and no class over 300 (docstrings count), so no part grows into a god object
again. (Which way the layers import is checked by the import-linter contracts in
``make lint``.)"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "stalwart"
MAX_MODULE_LINES = 600
MAX_CLASS_LINES = 300


def _modules() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_no_module_is_over_600_lines() -> None:
    long = {}
    for path in _modules():
        lines = path.read_text().count("\n")
        if lines > MAX_MODULE_LINES:
            long[str(path.relative_to(SRC))] = lines
    assert not long, f"split these modules (limit {MAX_MODULE_LINES} lines): {long}"


def test_no_class_is_over_300_lines() -> None:
    big = {}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                size = (node.end_lineno or node.lineno) - node.lineno + 1
                if size > MAX_CLASS_LINES:
                    big[f"{path.relative_to(SRC)}:{node.name}"] = size
    assert not big, f"these classes do too much (limit {MAX_CLASS_LINES} lines): {big}"
