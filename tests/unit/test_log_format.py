"""The worker's JSON log format: one object per line, the run's fields from ``extra`` or from
the step the line was written in, a thread's traceback as one line."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator

import pytest

from stalwart._logs import configure


@pytest.fixture
def json_lines() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (list(root.handlers), root.level, threading.excepthook)
    stream = io.StringIO()
    configure("debug", "json", stream=stream)
    yield stream
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in saved[0]:
        root.addHandler(handler)
    root.setLevel(saved[1])
    threading.excepthook = saved[2]
    logging.captureWarnings(False)


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_extra_fields_become_keys_and_the_rest_are_null(json_lines: io.StringIO) -> None:
    log = logging.getLogger("stalwart")
    log.warning("run r: step s failed", extra={"workflow_id": "r", "step": "s", "seq": 2})
    logging.getLogger("other").info("multi\nline")
    first, second = _lines(json_lines)
    assert first["msg"] == "run r: step s failed" and first["level"] == "WARNING"
    assert (first["workflow_id"], first["step"], first["seq"], first["attempt"]) == (
        "r",
        "s",
        2,
        None,
    )
    assert first["worker"] is None and "logger" not in first
    assert str(first["ts"]).endswith("Z")
    assert second["msg"] == "multi\nline" and second["logger"] == "other"
    assert second["workflow_id"] is None


def test_a_threads_traceback_is_one_json_line(json_lines: io.StringIO) -> None:
    def boom() -> None:
        raise RuntimeError("kaput")

    thread = threading.Thread(target=boom, name="helper")
    thread.start()
    thread.join()
    (line,) = _lines(json_lines)
    assert line["msg"] == "thread helper raised RuntimeError" and line["level"] == "ERROR"
    assert "RuntimeError: kaput" in str(line["exc"])


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="text, json"):
        configure("info", "xml")
