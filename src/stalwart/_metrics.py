"""Prometheus metrics of a worker (``pip install 'stalwart[metrics]'``), served as text at
``/metrics``.

Counters and histograms are this process's own: what its executions did, counted as it
happened (replayed history counts nothing). The gauges are the fleet's, read from the store
at each scrape by one collector: ``stalwart_runs{status,queue}`` is one ``GROUP BY`` over the
runs (an index-only scan), ``stalwart_breaker_open{breaker}`` the breakers' rows. Each worker
has a registry of its own, never the global default, so that two workers in one process (a
test's) do not collide.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

from ._errors import StoreError, UsageError, install_hint
from ._hooks import Observer, RunHooks
from ._model import RunStatus, Usage
from ._runtime import Runtime

__all__ = ["INSTALL_HINT", "Metrics"]

log = logging.getLogger("stalwart")

INSTALL_HINT = install_hint("metrics")
_OPEN = ("open", "half_open")
# Seconds: steps from a cached tool call to a long model call; starts from instant to minutes.
_STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_START_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)


class _Fleet:
    """The fleet-wide gauges, read from the store when scraped."""

    def __init__(self, runtime: Runtime, queues: list[str]) -> None:
        self.runtime = runtime
        self.queues = queues

    def describe(self) -> list[Any]:
        return []  # families are known only at collect time; nothing to check at register

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        store = self.runtime.store
        try:
            counts = store.run_counts()
            breakers = store.list_breakers(now=self.runtime.clock.time())
        except StoreError as exc:  # a scrape during an outage: the process's own metrics only
            log.warning("metrics: the store did not answer the fleet gauges: %s", exc)
            return
        runs = GaugeMetricFamily(
            "stalwart_runs",
            "Runs in the store by status and queue (fleet-wide, read at scrape).",
            labels=["status", "queue"],
        )
        held = {(c.status, c.queue): c.runs for c in counts}
        queues = sorted({*self.queues, *(queue for _, queue in held)})
        for status in RunStatus:
            for queue in queues:
                runs.add_metric([str(status), queue], held.get((str(status), queue), 0))
        yield runs
        open_ = GaugeMetricFamily(
            "stalwart_breaker_open",
            "1 while a circuit breaker is open or half-open (fleet-wide, read at scrape).",
            labels=["breaker"],
        )
        for breaker in breakers:
            open_.add_metric([breaker.name], 1 if breaker.state in _OPEN else 0)
        yield open_


class _RunMetrics(RunHooks):
    """What one execution adds to the process's counters."""

    def __init__(self, metrics: Metrics, workflow: str) -> None:
        self.metrics = metrics
        self.workflow = workflow
        metrics.runs_started.labels(workflow).inc()

    def attempt_ended(
        self,
        token: Any,
        *,
        step: str,
        outcome: str,
        seconds: float | None,
        usage: Usage | None,
        **fields: Any,
    ) -> None:
        metrics = self.metrics
        metrics.attempts.labels(step, outcome).inc()
        if seconds is not None:
            metrics.step_seconds.labels(step).observe(seconds)
        if usage is not None:
            if usage.input_tokens > 0:
                metrics.tokens.labels("input").inc(usage.input_tokens)
            if usage.output_tokens > 0:
                metrics.tokens.labels("output").inc(usage.output_tokens)
            if usage.cost > 0:
                metrics.cost.inc(usage.cost)

    def ended(self, status: str) -> None:
        if status in _ENDED:
            self.metrics.runs_finished.labels(self.workflow, status).inc()


_ENDED = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.NEEDS_ATTENTION}
)


class Metrics(Observer):
    """A worker's metrics: its registry, the observer that counts, the server."""

    def __init__(self, runtime: Runtime, queues: list[str]) -> None:
        try:
            from prometheus_client import CollectorRegistry, Counter, Histogram
        except ImportError:
            raise UsageError(f"serving metrics needs prometheus-client: {INSTALL_HINT}") from None
        self.registry = registry = CollectorRegistry()
        self.runs_started = Counter(
            "stalwart_runs_started",
            "Executions of runs this process began (a resumed run counts again).",
            ["workflow"],
            registry=registry,
        )
        self.runs_finished = Counter(
            "stalwart_runs_finished",
            "Runs this process ended, by the status they ended in.",
            ["workflow", "status"],
            registry=registry,
        )
        self.attempts = Counter(
            "stalwart_step_attempts",
            "Step attempts this process recorded, by outcome "
            "(completed, failed, timeout, interrupted).",
            ["step", "outcome"],
            registry=registry,
        )
        self.step_seconds = Histogram(
            "stalwart_step_duration_seconds",
            "How long the step attempts this process ran took.",
            ["step"],
            buckets=_STEP_BUCKETS,
            registry=registry,
        )
        self.schedule_to_start = Histogram(
            "stalwart_run_schedule_to_start_seconds",
            "From a run becoming runnable (created, woken, released) to this worker taking it.",
            buckets=_START_BUCKETS,
            registry=registry,
        )
        self.takeovers = Counter(
            "stalwart_lease_takeovers",
            "Runs this process took over from a holder that stopped or whose lease lapsed.",
            registry=registry,
        )
        self.tokens = Counter(
            "stalwart_usage_tokens",
            "Model tokens the step attempts of this process used, by kind (input, output).",
            ["kind"],
            registry=registry,
        )
        self.cost = Counter(
            "stalwart_usage_cost",
            "What the step attempts of this process cost, in the unit of the app's prices.",
            registry=registry,
        )
        self.runs_pruned = Counter(
            "stalwart_runs_pruned",
            "Ended runs this process deleted past their retention (docs/lifecycle.md).",
            registry=registry,
        )
        self.ingress_messages = Counter(
            "stalwart_ingress_messages",
            "Messages this process accepted from a subscription or webhook (a run started or "
            "an event delivered; docs/ingress.md).",
            ["source"],
            registry=registry,
        )
        self.ingress_rejected = Counter(
            "stalwart_ingress_rejected",
            "Messages this process rejected without requeue (a body that does not fit).",
            ["source"],
            registry=registry,
        )
        registry.register(_Fleet(runtime, queues))
        self._server: Any = None
        self._thread: threading.Thread | None = None

    # -- the observer ---------------------------------------------------------------------

    def took(self, workflow: str, waited: float, *, takeover: bool) -> None:
        self.schedule_to_start.observe(waited)
        if takeover:
            self.takeovers.inc()

    def run(self, *, workflow: str, workflow_id: str, trace_context: str | None) -> RunHooks | None:
        return _RunMetrics(self, workflow)

    # -- the server -----------------------------------------------------------------------

    def text(self) -> str:
        """The metrics as Prometheus text, as a scrape reads them."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()

    def start(self, host: str, port: int) -> str:
        """Serve ``/metrics`` on ``host:port`` from a thread; returns the URL."""
        from prometheus_client import start_http_server

        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise UsageError(f"cannot serve metrics on {host}:{port}: {exc}") from exc
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{self._server.server_port}/metrics"

    def stop(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
