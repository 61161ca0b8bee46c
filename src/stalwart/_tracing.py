"""OpenTelemetry traces (``pip install 'stalwart[otel]'``): a span ``run <workflow>`` per
execution of a run, ``step <name>`` per attempt and ``wait <kind>`` per wait decided or
suspended on.

Nothing here imports OpenTelemetry. Code that configures a tracer provider has imported it,
so :class:`Tracing` looks in ``sys.modules`` as each execution begins and does nothing when it
is not there, or when no provider is set (the API's proxy or no-op provider). The trace
context current at ``app.start`` is stored with the run (W3C ``traceparent``/``tracestate``
through the global propagator, as JSON) and the worker's ``run`` span continues it.
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any

from ._hooks import Observer, RunHooks

__all__ = ["Tracing"]

_TRACE = "opentelemetry.trace"
_SCOPE = "stalwart"


def _tracer() -> Any:
    """A tracer of the configured provider, or ``None`` (OpenTelemetry not imported, or no
    provider set)."""
    trace = sys.modules.get(_TRACE)
    if trace is None:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return provider.get_tracer(_SCOPE)


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


class _RunTrace(RunHooks):
    """The spans of one execution."""

    def __init__(self, tracer: Any, workflow: str, workflow_id: str, carrier: str | None):
        from opentelemetry import propagate, trace

        self.trace = trace
        self.tracer = tracer
        self.workflow_id = workflow_id
        parent = None
        if carrier:
            with contextlib.suppress(ValueError, TypeError):
                parent = propagate.extract(json.loads(carrier))
        self.span = tracer.start_span(
            f"run {workflow}",
            context=parent,
            kind=trace.SpanKind.CONSUMER if carrier else trace.SpanKind.INTERNAL,
            attributes={"stalwart.workflow_id": workflow_id, "stalwart.workflow": workflow},
        )
        self.context = trace.set_span_in_context(self.span)
        self.open: list[Any] = []

    def current(self) -> contextlib.AbstractContextManager[Any]:
        return self.trace.use_span(self.span, end_on_exit=False)

    def attempt(self, step: str, seq: int, attempt: int) -> Any:
        span = self.tracer.start_span(
            f"step {step}",
            context=self.context,
            attributes={
                "stalwart.workflow_id": self.workflow_id,
                "stalwart.step.name": step,
                "stalwart.step.seq": seq,
                "stalwart.step.attempt": attempt,
            },
        )
        self.open.append(span)
        return span

    def attempt_current(self, token: Any) -> contextlib.AbstractContextManager[Any]:
        return self.trace.use_span(token, end_on_exit=False)

    def attempt_ended(self, token: Any, *, outcome: str, **fields: Any) -> None:
        if token is None:
            return
        token.set_attribute("stalwart.step.outcome", outcome)
        if outcome != "completed":
            token.set_status(self.trace.Status(self.trace.StatusCode.ERROR, outcome))
        token.end()
        with contextlib.suppress(ValueError):
            self.open.remove(token)

    def waited(self, kind: str, name: str, started: float, ended: float, outcome: str) -> None:
        span = self.tracer.start_span(
            f"wait {kind}",
            context=self.context,
            start_time=_ns(started),
            attributes={
                "stalwart.workflow_id": self.workflow_id,
                "stalwart.wait.name": name,
                "stalwart.wait.outcome": outcome,
            },
        )
        span.end(end_time=_ns(max(started, ended)))

    def ended(self, status: str) -> None:
        for span in self.open:  # attempts whose outcome was never recorded here
            span.set_attribute("stalwart.step.outcome", "interrupted")
            span.end()
        self.open.clear()
        self.span.set_attribute("stalwart.run.status", status)
        if status in ("failed", "needs_attention", "abort"):
            self.span.set_status(self.trace.Status(self.trace.StatusCode.ERROR, status))
        self.span.end()


class Tracing(Observer):
    """Spans for every execution in this process, while a tracer provider is configured."""

    def carried(self) -> str | None:
        trace = sys.modules.get(_TRACE)
        if trace is None or not trace.get_current_span().get_span_context().is_valid:
            return None
        from opentelemetry import propagate

        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        return json.dumps(carrier) if carrier else None

    def run(self, *, workflow: str, workflow_id: str, trace_context: str | None) -> RunHooks | None:
        tracer = _tracer()
        if tracer is None:
            return None
        return _RunTrace(tracer, workflow, workflow_id, trace_context)
