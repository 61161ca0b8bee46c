"""The app that ``test_telemetry.py`` serves with ``stalwart worker telemetry_app:app``.

Its store is ``$TELEMETRY_URL``; ``$TELEMETRY_DIR`` keeps the side files (how often ``flaky``
ran). With ``$TELEMETRY_HANG`` set, ``slow`` hangs (its worker is killed in it). With
``$TELEMETRY_SPANS`` set, the worker process configures an OpenTelemetry tracer
provider that writes every finished span to that file as one JSON object per line, as an
operator's exporter would ship them.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import stalwart

FAST = stalwart.Retry(max_attempts=3, initial_delay=0.01, max_delay=0.01, jitter=False)
LLM = stalwart.Breaker("llm", failures=1, window=60.0, cooldown=600.0)


def declare(app: stalwart.Stalwart, side: Path | None) -> dict[str, Any]:
    """The workflows, on ``app``; ``side`` is where ``flaky`` counts its calls."""

    @app.step(name="double")
    def double(x: int) -> int:
        return 2 * x

    @app.step(retry=FAST, name="flaky")
    def flaky() -> str:
        assert side is not None
        marker = side / "flaky-ran"
        if not marker.exists():
            marker.write_text("1")
            raise ConnectionError("503 from the tool server")
        return "ok"

    @app.step(retry=stalwart.Retry.never(), name="doomed")
    def doomed() -> None:
        raise ValueError("the account is closed")

    @app.step(name="chat")
    def chat(prompt: str) -> str:
        stalwart.record_usage(input_tokens=120, output_tokens=30, cost=0.25)
        return prompt.upper()

    @app.step(retry=stalwart.Retry.never(), breaker=LLM, name="provider_down")
    def provider_down() -> None:
        raise ConnectionError("the provider is down")

    @app.step(name="slow")
    def slow() -> str:
        assert side is not None
        (side / "slow-running").write_text("1")
        if os.environ.get("TELEMETRY_HANG"):  # this worker is about to be killed
            threading.Event().wait(60)
        return "done"

    def unbook(booking: str) -> None:
        assert side is not None
        marker = side / "unbook-ran"
        if not marker.exists():
            marker.write_text("1")
            raise ConnectionError("503 from the booking API")

    @app.step(retry=FAST, name="booked", compensate=unbook)
    def booked() -> str:
        return "b-1"

    @app.workflow(name="undone_wf")
    def undone_wf() -> None:
        booked()
        raise RuntimeError("no seats left")

    @app.workflow(name="slow_wf")
    def slow_wf() -> str:
        return slow()

    @app.workflow(name="ok_wf")
    def ok_wf(x: int) -> int:
        return double(x)

    @app.workflow(name="flaky_wf")
    def flaky_wf() -> str:
        return flaky()

    @app.workflow(name="doomed_wf")
    def doomed_wf() -> None:
        doomed()

    @app.workflow(name="chat_wf")
    def chat_wf(prompt: str) -> str:
        return chat(prompt)

    @app.workflow(name="breaker_wf")
    def breaker_wf() -> None:
        provider_down()

    @app.workflow(name="napping_wf")
    def napping_wf(x: int) -> int:
        first = double(x)
        stalwart.sleep(0.3)
        return first + double(first)

    return {
        "ok_wf": ok_wf,
        "flaky_wf": flaky_wf,
        "doomed_wf": doomed_wf,
        "chat_wf": chat_wf,
        "breaker_wf": breaker_wf,
        "napping_wf": napping_wf,
        "slow_wf": slow_wf,
        "undone_wf": undone_wf,
    }


def _export_spans_to(path: str) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    lock = threading.Lock()

    class JsonLinesExporter(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            with lock, open(path, "a", encoding="utf-8") as sink:
                for span in spans:
                    context = span.get_span_context()
                    assert context is not None
                    sink.write(
                        json.dumps(
                            {
                                "name": span.name,
                                "trace_id": f"{context.trace_id:032x}",
                                "span_id": f"{context.span_id:016x}",
                                "parent_id": None
                                if span.parent is None
                                else f"{span.parent.span_id:016x}",
                                "attributes": dict(span.attributes or {}),
                            }
                        )
                        + "\n"
                    )
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter()))
    trace.set_tracer_provider(provider)


if os.environ.get("TELEMETRY_SPANS"):
    _export_spans_to(os.environ["TELEMETRY_SPANS"])

if os.environ.get("TELEMETRY_URL"):  # in the worker; the test process calls declare()
    app = stalwart.Stalwart(os.environ["TELEMETRY_URL"])
    declare(app, Path(os.environ["TELEMETRY_DIR"]))
