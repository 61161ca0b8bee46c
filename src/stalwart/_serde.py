"""Serialization of step and workflow values.

The JSON codec writes plain JSON for JSON types and small tagged objects for the rest
(``{"$dt": ...}``), so datetimes, decimals, UUIDs, bytes, enums, tuples and sets round-trip
exactly. Dataclasses and pydantic models are written as dicts and restored as the class a
declaration names (:func:`restore`). Every encoded payload starts with one byte naming its codec,
so a store can hold payloads of both codecs and a reader never guesses.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import enum
import functools
import importlib
import json
import pickle
import typing
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from ._errors import EncryptionKeyMissing, SerializationError
from ._keyring import SEALED_TAG, Keyring, key_id_of

__all__ = ["Codec", "argument_path", "make_codec", "restore", "restorer_for"]

JSON_TAG = b"J"
PICKLE_TAG = b"P"

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=True).encode
_loads = json.JSONDecoder().decode
_EMPTY_CALL: dict[str, Any] = {"args": [], "kwargs": {}}
_NO_ARGUMENTS = b'J{"args":[],"kwargs":{}}'


class UnsupportedValue(SerializationError):
    """A value the codec cannot write; ``type_name`` and ``path`` say which and where."""

    def __init__(self, type_name: str, path: str):
        super().__init__(f"cannot serialize a value of type {type_name} at {path}")
        self.type_name = type_name
        self.path = path


def _qualified(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


_PLAIN = frozenset({str, int, float, bool, type(None)})


def _is_plain(value: Any) -> bool:
    """JSON as it stands: exact JSON types, and dict keys that are str and not tag-like."""
    kind = type(value)
    if kind in _PLAIN:
        return True
    if kind is list:
        return all(_is_plain(v) for v in value)
    if kind is dict:
        return all(
            type(k) is str and not k.startswith("$") and _is_plain(v) for k, v in value.items()
        )
    return False


def _to_tree(value: Any, path: str) -> Any:
    if type(value) in _PLAIN:
        return value
    if isinstance(value, enum.Enum):
        return {"$enum": _enum_name(type(value), path), "v": _to_tree(value.value, path)}
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        return value
    if isinstance(value, list):
        return [_to_tree(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        escape = False
        for k, v in value.items():
            if not isinstance(k, str):
                raise UnsupportedValue(f"dict key {type(k).__name__} (keys must be str)", path)
            escape = escape or k.startswith("$")
            out[k] = _to_tree(v, f"{path}[{k!r}]")
        return {"$esc": out} if escape else out
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return {"$tuple": [_to_tree(v, f"{path}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, set | frozenset):
        tag = "$set" if isinstance(value, set) else "$frozenset"
        return {tag: [_to_tree(v, f"{path}{{}}") for v in value]}
    if isinstance(value, _dt.datetime):
        return {"$dt": value.isoformat()}
    if isinstance(value, _dt.date):
        return {"$date": value.isoformat()}
    if isinstance(value, Decimal):
        return {"$dec": str(value)}
    if isinstance(value, uuid.UUID):
        return {"$uuid": str(value)}
    if isinstance(value, bytes | bytearray):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _to_tree({f.name: getattr(value, f.name) for f in dataclasses.fields(value)}, path)
    dump = getattr(value, "model_dump", None)
    if callable(dump) and hasattr(type(value), "model_fields"):
        return _to_tree(dump(mode="python"), path)
    raise UnsupportedValue(type(value).__qualname__, path)


def _refused(value: Any, exc: BaseException) -> UnsupportedValue:
    """What ``json`` refused in ``value`` (found by a walk, on this error path only)."""
    if isinstance(exc, RecursionError):
        return UnsupportedValue("list or dict that contains itself (or nests too deep)", "value")
    seen: set[int] = set()
    stack: list[tuple[Any, str]] = [(value, "value")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return UnsupportedValue("str with a lone surrogate (not valid UTF-8)", path)
        elif isinstance(node, int) and not isinstance(node, bool):
            try:
                str(node)
            except ValueError:
                return UnsupportedValue("int with more digits than the interpreter prints", path)
        elif id(node) in seen:
            continue
        elif isinstance(node, dict):
            seen.add(id(node))
            for k, v in node.items():
                stack.append((k, f"{path} (a key)"))
                stack.append((v, f"{path}[{k!r}]"))
        elif isinstance(node, list | tuple | set | frozenset):
            seen.add(id(node))
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(node))
    return UnsupportedValue(f"{type(value).__qualname__} ({exc})", "value")


def argument_path(path: str) -> str:
    """Turn a path inside ``{"args": [...], "kwargs": {...}}`` into ``arguments[...]``."""
    for prefix in ("value['args']", "value['kwargs']"):
        if path.startswith(prefix):
            return "arguments" + path[len(prefix) :]
    return path.replace("value", "arguments", 1)


@functools.lru_cache(maxsize=256)
def _importable(cls: type) -> bool:
    try:
        return _import(_qualified(cls)) is cls
    except Exception:
        return False


def _enum_name(cls: type, path: str) -> str:
    if not _importable(cls):
        raise UnsupportedValue(
            f"enum {cls.__qualname__} (it cannot be imported by name; declare it at the top "
            "level of a module)",
            path,
        )
    return _qualified(cls)


def _import(qualified: str) -> Any:
    module, _, qualname = qualified.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _tagged(tag: str, body: Any, node: dict[str, Any]) -> Any:
    if tag == "$esc":
        return {k: _from_tree(v) for k, v in body.items()}
    if tag == "$tuple":
        return tuple(_from_tree(v) for v in body)
    if tag == "$set":
        return {_from_tree(v) for v in body}
    if tag == "$frozenset":
        return frozenset(_from_tree(v) for v in body)
    if tag == "$dt":
        return _dt.datetime.fromisoformat(body)
    if tag == "$date":
        return _dt.date.fromisoformat(body)
    if tag == "$dec":
        return Decimal(body)
    if tag == "$uuid":
        return uuid.UUID(body)
    if tag == "$bytes":
        return base64.b64decode(body)
    if tag == "$enum":
        return _import(body)(_from_tree(node["v"]))
    raise ValueError(f"unknown tag {tag}")


def _from_tree(node: Any) -> Any:
    if isinstance(node, list):
        return [_from_tree(v) for v in node]
    if isinstance(node, dict):
        if node and len(node) <= 2:
            tag = next(iter(node))
            if tag.startswith("$"):
                return _tagged(tag, node[tag], node)
        return {k: _from_tree(v) for k, v in node.items()}
    return node


class Codec:
    """Encodes values to payload bytes; JSON unless the app opted in to pickle. With a
    ``keyring`` every payload it writes is sealed (see ``_keyring``)."""

    def __init__(self, name: str, keyring: Keyring | None = None):
        self.name = name
        self.keyring = keyring
        # ``None`` as this codec writes it, where that is one constant (JSON, unsealed): the
        # most common step result is recorded without encoding and decoding it
        self.null: bytes | None = b"Jnull" if name == "json" and keyring is None else None
        self._last = (b"", b"")  # the last value sealed, and its plaintext

    @property
    def opener(self) -> Callable[[bytes], bytes] | None:
        """What opens a sealed value (``None`` without a keyring)."""
        return None if self.keyring is None else self.keyring._open

    def encode(self, value: Any) -> bytes:
        """Payload bytes for ``value``; raises :class:`UnsupportedValue` naming type and path."""
        keyring = self.keyring
        if keyring is not None:
            plain = self._plain(value)
            sealed = keyring._seal(plain)
            self._last = (sealed, plain)  # decoded again at once, often (a step's result)
            return sealed
        return self._plain(value)

    def _plain(self, value: Any) -> bytes:
        if self.name == "pickle":
            try:
                return PICKLE_TAG + pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:
                raise UnsupportedValue(f"{type(value).__qualname__} ({exc})", "value") from exc
        if value is None:
            return b"Jnull"
        try:
            if type(value) is dict and value == _EMPTY_CALL:
                return _NO_ARGUMENTS
            if _is_plain(value):
                return JSON_TAG + _dumps(value).encode("utf-8")
            return JSON_TAG + _dumps(_to_tree(value, "value")).encode("utf-8")
        except UnsupportedValue:
            raise
        except (ValueError, RecursionError) as exc:  # UnicodeEncodeError is a ValueError
            raise _refused(value, exc) from None

    def decode(self, payload: bytes) -> Any:
        """The value of stored ``payload``; raises ``ValueError`` if this codec cannot read it.

        The JSON codec refuses a payload tagged as pickle instead of unpickling it.
        """
        if payload[:1] == SEALED_TAG:
            if self.keyring is None:
                raise EncryptionKeyMissing(key_id_of(payload) or "?")
            last = self._last
            payload = last[1] if last[0] == payload else self.keyring._open(payload)
        if payload == b"Jnull":
            return None
        tag, body = payload[:1], payload[1:]
        if tag == JSON_TAG:
            return _decode_json(body)
        if tag == PICKLE_TAG:
            if self.name != "pickle":
                raise ValueError(
                    "it was written with pickle, which an app with serializer='json' never "
                    "loads; open the app with serializer='pickle' to read such rows"
                )
            try:
                return pickle.loads(body)
            except Exception as exc:
                raise ValueError(f"invalid pickle payload: {exc}") from exc
        raise ValueError(f"unknown payload codec {tag!r}")


def make_codec(name: str, keyring: Keyring | None = None) -> Codec:
    """The codec for the ``serializer=`` setting (``"json"`` or ``"pickle"``), sealing what
    it writes with ``keyring`` when one is given."""
    if name not in ("json", "pickle"):
        raise ValueError(
            f"serializer={name!r} is not supported: use 'json' (the default) or 'pickle'"
        )
    return Codec(name, keyring)


def _decode_json(body: bytes) -> Any:
    try:
        tree = _loads(body.decode("utf-8"))
        return _from_tree(tree) if b'"$' in body else tree
    except Exception as exc:
        raise ValueError(f"invalid JSON payload: {type(exc).__name__}: {exc}") from exc


def _wants_restoring(annotation: Any) -> bool:
    if isinstance(annotation, type):
        return dataclasses.is_dataclass(annotation) or hasattr(annotation, "model_fields")
    return any(_wants_restoring(arg) for arg in typing.get_args(annotation))


@functools.lru_cache(maxsize=512)
def _adapter(annotation: Any) -> Any:
    from pydantic import TypeAdapter

    return TypeAdapter(annotation)


def _type_name(annotation: Any) -> str:
    return annotation.__qualname__ if isinstance(annotation, type) else repr(annotation)


def restorer_for(annotation: Any, owner: str = "the value") -> Callable[[Any], Any] | None:
    """A function rebuilding the dataclasses and pydantic models ``annotation`` names, or
    ``None`` when it names none (plain values are left exactly as they round-trip).

    ``owner`` (say ``"step 'charge'"``) is named by the error for a value that does not fit.
    """
    if annotation is None or not _wants_restoring(annotation):
        return None
    try:
        adapter = _adapter(annotation)
    except Exception:
        return None
    return functools.partial(restore, adapter, owner, _type_name(annotation))


def _problems(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return f"{type(exc).__name__}: {exc}"
    parts = [
        f"{'.'.join(str(p) for p in e.get('loc', ())) or 'value'}: {e.get('msg', '')}"
        for e in errors()[:3]
    ]
    return "; ".join(parts)


def restore(adapter: Any, owner: str, type_name: str, value: Any) -> Any:
    """Rebuild ``value`` as the declared type; :class:`SerializationError` if it does not fit."""
    try:
        return adapter.validate_python(value)
    except Exception as exc:
        raise SerializationError(
            f"{owner}: its result does not validate as {type_name} ({_problems(exc)}); return "
            f"a value that does, or change the annotation to what it returns"
        ) from None
