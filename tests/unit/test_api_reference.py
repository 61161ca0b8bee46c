"""docs/api.md stays in step with the code: every public name, its signature, every CLI command.

On a failure, regenerate the page: ``.venv/bin/python tests/api_reference.py``.
"""

from __future__ import annotations

import pytest

import stalwart
import stalwart.testing
from api_reference import PAGE, expected, parse

REGENERATE = "run `.venv/bin/python tests/api_reference.py` to regenerate docs/api.md"


@pytest.fixture(scope="module")
def written() -> dict[str, str]:
    assert PAGE.is_file(), f"docs/api.md is missing; {REGENERATE}"
    return parse(PAGE.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    "module", [stalwart, stalwart.testing], ids=["stalwart", "stalwart.testing"]
)
def test_every_public_name_has_an_entry(module: object, written: dict[str, str]) -> None:
    missing = [name for name in module.__all__ if name not in written]  # type: ignore[attr-defined]
    assert not missing, f"no ### entry in docs/api.md for {missing}; {REGENERATE}"


def test_every_entry_has_the_signature_of_the_code(written: dict[str, str]) -> None:
    wanted = expected()
    changed = {
        name: (written[name], sig)
        for name, sig in wanted.items()
        if name in written and written[name] != sig
    }
    assert not changed, "\n".join(
        [f"docs/api.md disagrees with the code; {REGENERATE}"]
        + [
            f"  {name}:\n    page: {page}\n    code: {code}"
            for name, (page, code) in changed.items()
        ]
    )


def test_the_page_documents_nothing_that_is_gone_and_misses_nothing(
    written: dict[str, str],
) -> None:
    wanted = expected()
    assert sorted(set(written) - set(wanted)) == [], (
        f"entries for names that are gone; {REGENERATE}"
    )
    assert sorted(set(wanted) - set(written)) == [], f"methods or commands missing; {REGENERATE}"


def test_the_readme_and_pyproject_point_at_the_page() -> None:
    root = PAGE.parents[1]
    assert "(docs/api.md)" in (root / "README.md").read_text(encoding="utf-8")
    assert "docs/api.md" in (root / "pyproject.toml").read_text(encoding="utf-8")
