"""The code keeps the shape docs/architecture.md describes: no module of ``src/stalwart`` is
over 600 lines and no class over 300 (docstrings count), so no part grows into a god object
again, and no module imports itself through others (a cycle, even one only a type checker or
a function-level import closes). (Which way the layers import is checked by the import-linter
contracts in ``make lint``; its ``acyclic_siblings`` contract catches cycles between sibling
packages, this test those through a package's ``__init__`` too.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

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


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``path`` imports, anywhere in it."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names} & modules
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.add(target if target in modules else base)
    return (found & modules) - {name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while not group or group[-1] != module:
                group.append(stack.pop())
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return groups


def test_no_module_imports_itself_through_others() -> None:
    paths = _modules()
    modules = {_module_name(path) for path in paths}
    graph = {_module_name(path): _imports(path, modules) for path in paths}
    assert not _cycles(graph), f"these modules import each other in a cycle: {_cycles(graph)}"


@pytest.mark.parametrize(
    ("graph", "cycles"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": set(), "c": {"b"}}, []),
    ],
)
def test_the_cycle_finder_finds_exactly_the_cycles(
    graph: dict[str, set[str]], cycles: list[list[str]]
) -> None:
    assert _cycles(graph) == cycles
