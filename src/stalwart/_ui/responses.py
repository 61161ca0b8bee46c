"""The API's JSON answers, encoded with orjson where it is installed: a long journal is
megabytes of JSON, which orjson writes several times faster than the json module. What orjson
refuses (an integer over 64 bits, a key that is not a string) is written by the json module,
as is every answer where orjson is missing."""

from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - the ui extra installs it
    _orjson = None  # type: ignore[assignment]

__all__ = ["JSONAnswer"]


class JSONAnswer(JSONResponse):
    """A JSON answer (``application/json``, UTF-8, compact)."""

    def render(self, content: Any) -> bytes:
        if _orjson is not None:
            try:
                return _orjson.dumps(content)
            except TypeError:  # orjson.JSONEncodeError is one
                pass
        return super().render(content)
