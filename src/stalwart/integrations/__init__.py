"""Agent frameworks on stalwart: each integration is an optional extra and a thin consumer of
stalwart's public API (``run_step_async``, ``request_approval_async``, ``Retry.llm()``)."""
