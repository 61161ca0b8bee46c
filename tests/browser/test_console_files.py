"""The console's static files keep the rules that make it safe and offline, checked without a
browser: values reach the page only as text (no HTML sinks), nothing is inline (the server's CSP
forbids it), nothing is fetched from another site, and every file a page asks for exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import stalwart

CONSOLE = Path(stalwart.__file__).parent / "_ui" / "console"
SCRIPTS = sorted(CONSOLE.rglob("*.js"))
SINKS = re.compile(
    r"\.innerHTML|\.outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|"
    r"setAttribute\(\s*['\"]on|\.srcdoc|createContextualFragment|DOMParser"
)


def test_the_console_is_there() -> None:
    assert (CONSOLE / "index.html").is_file()
    assert (CONSOLE / "style.css").is_file()
    assert len(SCRIPTS) >= 5


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_no_script_writes_html(script: Path) -> None:
    text = script.read_text()
    assert not SINKS.findall(text), f"{script.name} writes HTML; build nodes with dom.h instead"


def test_the_page_has_no_inline_script_handler_or_style() -> None:
    html = (CONSOLE / "index.html").read_text()
    for tag in re.findall(r"<script\b[^>]*>", html):
        assert "src=" in tag, tag
    for body in re.findall(r"<script\b[^>]*>(.*?)</script>", html, re.DOTALL):
        assert not body.strip(), "an inline script"
    assert not re.search(r"\son[a-z]+\s*=", html), "an inline event handler"
    assert not re.search(r"\sstyle\s*=", html) and "<style" not in html, "an inline style"


def test_nothing_comes_from_another_site_and_every_file_exists() -> None:
    html = (CONSOLE / "index.html").read_text()
    for url in re.findall(r"(?:src|href)=\"([^\"]+)\"", html):
        assert url.startswith(("/console/", "/api/v1/", "#")), url
        if url.startswith("/console/"):
            assert (CONSOLE / url.removeprefix("/console/")).is_file(), url
    for path in [*SCRIPTS, CONSOLE / "style.css"]:
        text = path.read_text()
        assert not re.search(r"@import|url\(\s*['\"]?(https?:)?//", text), path.name
        for target in re.findall(r"^import\b[^;]*?from \"([^\"]+)\";", text, re.MULTILINE):
            assert target.startswith("."), f"{path.name} imports {target}"
            assert (path.parent / target).resolve().is_file(), f"{path.name}: {target}"
