"""How a worker stops: the runs in progress finish their current step and give their lease
back, within ``lease_seconds``, and the worker says what it waits for while it waits."""

from __future__ import annotations

import logging
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from ._engine.invocation import Invocation
from ._engine.observe import fields
from ._runtime import Runtime

__all__ = ["Active", "shut_down"]

log = logging.getLogger("stalwart")

Active = list[tuple[str, tuple[Future[None], list[Invocation]]]]  # run id, its execution


def shut_down(runtime: Runtime, active: Active, pool: ThreadPoolExecutor) -> None:
    """Let the current steps of ``active`` finish, give their runs back at their next
    boundary, release the rest once ``lease_seconds`` have passed."""
    for _wid, (_future, invocations) in active:
        invocations[-1].releasing.set()
    _wait_for_runs(runtime, active, runtime.lease_seconds)
    now = runtime.clock.time()
    for wid, (future, invocations) in active:
        if not future.done():
            log.warning(
                "run %s: a step outlived the shutdown grace; releasing its lease",
                wid,
                extra=fields(wid, runtime.owner),
            )
            invocations[-1].lease_lost.set()
            runtime.store.release_run(wid, owner=invocations[-1].owner, now=now)
    pool.shutdown(wait=False, cancel_futures=True)


def _wait_for_runs(runtime: Runtime, active: Active, grace: float) -> None:
    """Wait up to ``grace`` seconds for the runs in progress to end or give their lease back,
    saying which they are, how long it waits at most, and as each one is done."""
    deadline = time.monotonic() + grace
    owner = runtime.owner
    if not active:
        log.info("worker %s: no run in progress", owner, extra=fields(None, owner))
        return
    doing = ", ".join(f"{wid} ({_doing(invs[-1])})" for wid, (_f, invs) in active)
    log.info(
        "worker %s: waiting up to %gs (lease_seconds) for %d run(s) to finish their current "
        "step and give their lease back: %s",
        owner,
        grace,
        len(active),
        doing,
        extra=fields(None, owner),
    )
    waiting = {future: wid for wid, (future, _invs) in active}
    while waiting:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        done, _ = wait(list(waiting), timeout=left, return_when=FIRST_COMPLETED)
        for future in done:
            wid = waiting.pop(future)
            log.info(
                "worker %s: run %s is off this worker (%d left, at most %.1fs more)",
                owner,
                wid,
                len(waiting),
                max(0.0, deadline - time.monotonic()),
                extra=fields(wid, owner),
            )


def _doing(inv: Invocation) -> str:
    """What a run in progress is doing, as the shutdown's log line names it."""
    scope = inv.current_step
    if scope is None:
        return "between steps"
    return f"step {scope.name}, seq {scope.seq}, attempt {scope.attempt}"
