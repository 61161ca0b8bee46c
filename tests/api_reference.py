"""docs/api.md, generated from the code: every public name with its signature and docstring.

``.venv/bin/python tests/api_reference.py`` writes the page; ``tests/unit/test_api_reference.py``
fails when the page and the code disagree (a name of ``stalwart.__all__`` or
``stalwart.testing.__all__`` without an entry, an entry for a name that is gone, a signature that
changed, a CLI command without an entry). The descriptions are the first paragraph of each
docstring, so improve them in the code and regenerate.

A new name needs nothing here: it lands in a group by its kind (an exception in *Errors*, a
function in *Inside a workflow or a step*, a class in *Value types*). List it in ``GROUPS`` only
to put it somewhere else.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

import stalwart
import stalwart.testing

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "api.md"

# (heading, what the group is, the names placed in it explicitly).
GROUPS: list[tuple[str, str, list[str]]] = [
    ("The app", "The app owns the store and everything run on it.", ["Stalwart"]),
    (
        "Declarations",
        "Policies passed to `@app.step(...)`, `@app.workflow(...)`, `app.start(...)` and "
        "`run_step(...)`.",
        ["Retry", "Breaker", "Budget"],
    ),
    (
        "Inside a workflow or a step",
        "Functions that workflow and step code call; outside a run most of them raise.",
        [],
    ),
    ("Value types", "What the app's methods return.", []),
    (
        "Errors",
        "Every error derives from `StalwartError`; `NotDurableWarning` is a `UserWarning`.",
        [],
    ),
]
FUNCTIONS, VALUES, ERRORS = (
    "Inside a workflow or a step",
    "Value types",
    "Errors",
)
TESTING = "stalwart.testing"
CLI = "Command line"


class _Annotation(str):
    """An annotation string shown without quotes."""

    def __repr__(self) -> str:
        return str(self)


# Classes stalwart makes for you, never constructed by user code: what gives you one.
MADE_BY = {
    "Handle": "app.start, app.handle and app.fork",
    "ChildHandle": "stalwart.start_child and stalwart.start_child_async",
}


def signature(obj: Any, name: str) -> str:
    """``name(...)`` as the page shows it: ``inspect.signature`` with unquoted annotations."""
    if isinstance(obj, type) and obj.__name__ in MADE_BY:
        return f"class {name}  # returned by {MADE_BY[obj.__name__]}"
    if isinstance(obj, type) and issubclass(obj, BaseException) and "__init__" not in vars(obj):
        bases = ", ".join(base.__name__ for base in obj.__bases__)
        return f"class {name}({bases})"
    if isinstance(obj, property):
        annotation = inspect.signature(obj.fget).return_annotation if obj.fget else None
        return f"{name}: {annotation}" if annotation else name
    sig = inspect.signature(obj)

    def plain(annotation: Any) -> Any:
        if annotation is inspect.Parameter.empty:
            return annotation
        return _Annotation(annotation if isinstance(annotation, str) else repr(annotation))

    def default(value: Any) -> Any:  # a sentinel's repr has an address: name it instead
        if value is inspect.Parameter.empty or " at 0x" not in repr(value):
            return value
        return _Annotation("<missing>" if type(value) is object else f"<{type(value).__name__}>")

    params = [
        p.replace(annotation=plain(p.annotation), default=default(p.default))
        for p in sig.parameters.values()
    ]
    if params and params[0].name == "self":
        params = params[1:]  # a method, shown as it is called
    shown = sig.replace(parameters=params, return_annotation=plain(sig.return_annotation))
    text = f"{name}{shown}"
    if isinstance(obj, type) and text.endswith(" -> None"):
        text = text[: -len(" -> None")]  # a class's __init__ returns None: say nothing
    return text


def description(obj: Any) -> str:
    doc = inspect.getdoc(obj.fget if isinstance(obj, property) else obj) or ""
    if isinstance(obj, type) and doc == inspect.getdoc(obj.__mro__[1]):
        doc = ""  # inherited, not its own
    first = " ".join(doc.split("\n\n")[0].split())
    first = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", first)  # Sphinx roles, as Markdown code
    return first.replace("``", "`") or "(No docstring yet.)"


def members(cls: type) -> Iterator[tuple[str, Any]]:
    """The public methods and properties a class defines (not dataclass or tuple machinery)."""
    if issubclass(cls, BaseException) or not cls.__module__.startswith("stalwart"):
        return
    import stalwart

    # and those of its private bases (the app's mixins: Reads, SharedContext, ...)
    own = [cls] + [
        base
        for base in cls.__mro__[1:]
        if base.__module__.startswith("stalwart") and base.__name__ not in stalwart.__all__
    ]
    seen: set[str] = set()
    for klass in own:
        for name, value in vars(klass).items():
            if name.startswith("_") or name in getattr(cls, "_fields", ()) or name in seen:
                continue
            kinds = property | staticmethod | classmethod
            if isinstance(value, kinds) or inspect.isfunction(value):
                seen.add(name)
                yield name, getattr(cls, name) if not isinstance(value, property) else value


def entries(module: Any, prefix: str) -> Iterator[tuple[str, str, str, list[tuple[str, str, str]]]]:
    """``(name, signature, description, [(member, signature, description)])`` per public name."""
    for name in module.__all__:
        obj = getattr(module, name)
        subs = []
        if isinstance(obj, type):
            for member, value in members(obj):
                label = f"{name}.{member}"
                subs.append((label, signature(value, label), description(value)))
        yield name, signature(obj, prefix + name), description(obj), subs


def group_of(name: str) -> str:
    for heading, _intro, names in GROUPS:
        if name in names:
            return heading
    obj = getattr(stalwart, name)
    if isinstance(obj, type) and issubclass(obj, BaseException | Warning):
        return ERRORS
    return VALUES if isinstance(obj, type) else FUNCTIONS


def _options(command: click.Command, ctx: click.Context) -> list[str]:
    """One Markdown bullet per option of ``command``: its flags and its help."""
    lines = []
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None or not isinstance(param, click.Option) or record[0] == "--help":
            continue
        flags, help_text = record
        lines.append(f"- `{flags}`: {' '.join(help_text.split())}" if help_text else f"- `{flags}`")
    return lines


def cli_commands() -> Iterator[tuple[str, str, str, list[str]]]:
    """``(stalwart COMMAND, usage, help, options)`` for every CLI command."""
    from stalwart._cli import cli

    root = click.Context(cli, info_name="stalwart")
    usage = cli.get_usage(root).removeprefix("Usage: ")
    yield "stalwart", usage, description(cli), _options(cli, root)
    yield from _commands(cli, root, "stalwart")


def _commands(
    group: click.Group, parent: click.Context, path: str
) -> Iterator[tuple[str, str, str, list[str]]]:
    """The commands of ``group``, and of the groups among them (``stalwart shared get``)."""
    for name, command in sorted(group.commands.items()):
        ctx = click.Context(command, info_name=name, parent=parent)
        usage = command.get_usage(ctx).removeprefix("Usage: ")
        help_text = " ".join((command.help or "").split("\n\n")[0].split())
        yield f"{path} {name}", usage, help_text or "(No help yet.)", _options(command, ctx)
        if isinstance(command, click.Group):
            yield from _commands(command, ctx, f"{path} {name}")


def _entry(level: str, name: str, sig: str, text: str) -> list[str]:
    return [f"{level} {name}", "", "```python-snippet", sig, "```", "", text, ""]


def render() -> str:
    out = [
        "# API reference",
        "",
        "Every public name of `stalwart` (and of `stalwart.testing`), with its signature and the",
        "first paragraph of its docstring, and every command of the `stalwart` CLI. This page is",
        "generated: run `.venv/bin/python tests/api_reference.py` after changing the API, and",
        "`tests/unit/test_api_reference.py` fails while the page and the code disagree. The guides",
        "([tutorial.md](tutorial.md) and the pages it links) explain how the pieces fit together.",
        "",
    ]
    by_group: dict[str, list[Any]] = {heading: [] for heading, _i, _n in GROUPS}
    for entry in entries(stalwart, "stalwart."):
        by_group[group_of(entry[0])].append(entry)
    for heading, intro, _names in GROUPS:
        out += [f"## {heading}", "", intro, ""]
        for name, sig, text, subs in by_group[heading]:
            out += _entry("###", name, sig, text)
            for label, sub_sig, sub_text in subs:
                out += _entry("####", label, sub_sig, sub_text)
    out += [f"## {TESTING}", "", description(stalwart.testing), ""]
    for name, sig, text, subs in entries(stalwart.testing, "stalwart.testing."):
        out += _entry("###", name, sig, text)
        for label, sub_sig, sub_text in subs:
            out += _entry("####", label, sub_sig, sub_text)
    out += [
        f"## {CLI}",
        "",
        "Each command lists its options; `stalwart --help` and `stalwart COMMAND --help` print",
        "them too.",
        "",
    ]
    for name, usage, text, options in cli_commands():
        out += _entry("###", name, usage, text)
        if options:
            out += [*options, ""]
    return "\n".join(out).rstrip("\n") + "\n"


ENTRY = re.compile(r"^#{3,4} (?P<name>[^\n]+)\n\n```python-snippet\n(?P<sig>[^\n]*)\n```", re.M)


def parse(text: str) -> dict[str, str]:
    """``{heading: signature}`` of every entry of a page ``render`` wrote."""
    return {m["name"]: m["sig"] for m in ENTRY.finditer(text)}


def expected() -> dict[str, str]:
    return parse(render())


def main(argv: list[str]) -> int:
    del argv
    PAGE.write_text(render(), encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
