-- The trace context (W3C traceparent and tracestate, as JSON) current when the run was
-- started, so that the worker's spans continue the caller's trace. Expand-only: older code
-- leaves it empty and never reads it.
ALTER TABLE runs ADD COLUMN trace_context TEXT;
