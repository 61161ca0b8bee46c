"""The agents behind the console's browser tests, and the worker program that serves them:

    python console_agent.py URL WORKDIR [--queues Q,Q]

``declare`` puts the same workflows on the test's own app (to start runs and read them) and on
the workers' (to execute them). The world outside the engine is files in ``WORKDIR``:

* ``crm-up``: while it is missing, ``fetch_profile`` fails (the CRM is down), so
  ``enrich_lead`` runs go to ``failed``, the dead-letter queue; once it exists a retry completes;
* ``hang-charge``: while it exists, the irreversible ``charge`` (which has no ``verify``) touches
  ``charging-<WORKFLOW_ID>`` and sleeps until the test SIGKILLs its worker, so the recovered run
  is in doubt and goes to ``needs_attention``;
* ``stop-research``: ``browse`` heartbeats every half second until it exists;
* ``go-<WORKFLOW_ID>``: ``write`` streams half its words, then waits for it to stream the rest.

``checklist`` ticks off one item per ``next`` event it gets (its journal grows while a test
watches its page).

The worker touches ``WORKDIR/ready-<PID>`` when it is about to serve and serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import stalwart

__all__ = ["HOSTILE", "declare", "main"]

# What a model might answer when a page it read told it to: it must show as text, never run.
HOSTILE = (
    "<script>window.__pwned = 'script'</script>"
    "<img src=x onerror=\"window.__pwned = 'img'\">"
    "Summary: the customer wants a refund."
)
HANG_SECONDS = 120.0  # the test kills the worker long before


def declare(app: stalwart.Stalwart, workdir: Path) -> dict[str, Any]:
    """Declare the console's demo workflows on ``app``; they read their world in ``workdir``.
    Returns the workflows by name."""
    app.queue("llm", concurrency=4, rate=30, period=60.0)
    app.queue("payments", concurrency=2)
    crm = stalwart.Breaker("crm", failures=50, window=600.0, cooldown=5.0)

    @app.step(name="look_up_order")
    def look_up_order(order_id: str) -> dict[str, Any]:
        return {"order_id": order_id, "customer": "Ada Lovelace", "total": 129.0}

    @app.step(name="issue_refund")
    def issue_refund(order_id: str, amount: float) -> str:
        return f"rf_{order_id}"

    @app.workflow(name="refund_agent")
    def refund_agent(order_id: str, amount: float) -> dict[str, Any]:
        order = look_up_order(order_id)
        decision = stalwart.request_approval(
            f"Refund {amount:.2f} USD on order {order_id}",
            details={"customer": order["customer"], "amount": amount},
        )
        if decision is None or not decision.approved:
            return {"refunded": False, "reason": decision.reason if decision else "timeout"}
        return {"refunded": True, "refund": issue_refund(order_id, amount)}

    @app.step(name="fetch_profile", retry=stalwart.Retry.never(), breaker=crm)
    def fetch_profile(email: str) -> dict[str, Any]:
        if not (workdir / "crm-up").exists():
            raise ConnectionError("crm.internal:443 refused the connection")
        return {"email": email, "company": "Analytical Engines Ltd", "seats": 40}

    @app.workflow(name="enrich_lead")
    def enrich_lead(email: str) -> dict[str, Any]:
        return fetch_profile(email)

    @app.step(name="quote")
    def quote(order_id: str, amount: int) -> int:
        return amount + 5

    @app.step(name="charge", irreversible=True)
    def charge(order_id: str, total: int) -> str:
        if (workdir / "hang-charge").exists():
            (workdir / f"charging-{stalwart.workflow_id()}").touch()
            time.sleep(HANG_SECONDS)
        return f"ch_{order_id}"

    @app.step(name="send_receipt")
    def send_receipt(charge_id: str) -> str:
        return f"receipt for {charge_id}"

    @app.workflow(name="charge_card", queue="payments")
    def charge_card(order_id: str, amount: int) -> dict[str, Any]:
        total = quote(order_id, amount)
        charge_id = charge(order_id, total)
        return {"charge": charge_id, "receipt": send_receipt(charge_id)}

    @app.step(name="call_llm")
    def call_llm(prompt: str) -> str:
        stalwart.record_usage(input_tokens=812, output_tokens=164, cost=0.0042, model="gpt-4o")
        return HOSTILE

    @app.workflow(name="summarize", queue="llm")
    def summarize(ticket: str) -> str:
        return call_llm(f"Summarize this ticket: {ticket}")

    @app.workflow(name="triage")
    def triage(ticket: str) -> Any:
        return stalwart.wait_for_event("customer_reply", timeout=86_400)

    @app.step(name="browse", timeout=600.0)
    def browse(topic: str) -> list[str]:
        page = 0
        while not (workdir / "stop-research").exists() and page < 1200:
            page += 1
            stalwart.heartbeat({"page": page, "url": f"https://example.org/{topic}?p={page}"})
            time.sleep(0.5)
        return [f"https://example.org/{topic}"]

    @app.workflow(name="research", queue="llm")
    def research(topic: str) -> list[str]:
        return browse(topic)

    @app.workflow(name="digest", queue="llm")
    def digest(tickets: list[str]) -> list[str]:
        children = [stalwart.start_child(summarize, t) for t in tickets]
        return [child.result() for child in children]

    @app.step(name="tick_off")
    def tick_off(item: Any) -> str:
        return f"item {item} done"

    @app.step(name="reply")
    def reply(turn: int) -> str:
        return f"turn {turn}"

    @app.workflow(name="long_chat")
    def long_chat(turns: int) -> int:
        for turn in range(turns):
            reply(turn)
        return turns

    @app.workflow(name="checklist")
    def checklist(items: int) -> int:
        for _ in range(items):
            tick_off(stalwart.wait_for_event("next", timeout=3600))
        return items

    @app.step(name="write")
    def write(words: list[str]) -> int:
        """Streams the first half of ``words``, waits for ``WORKDIR/go-<WORKFLOW_ID>``, then
        streams the rest."""
        half = len(words) // 2
        for word in words[:half]:
            stalwart.emit(word)
        go = workdir / f"go-{stalwart.workflow_id()}"
        while not go.exists():
            time.sleep(0.05)
        for word in words[half:]:
            stalwart.emit(word)
        return len(words)

    @app.workflow(name="writer")
    def writer(words: list[str]) -> int:
        return write(words)

    return {
        wf.__name__: wf
        for wf in (
            writer,
            refund_agent,
            enrich_lead,
            charge_card,
            summarize,
            triage,
            research,
            digest,
            checklist,
            long_chat,
        )
    }


def main(argv: list[str]) -> int:
    """Serve the workflows on ``URL`` until SIGTERM."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("url")
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--queues", default=None, help="comma-separated (default: all)")
    opts = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(process)d %(message)s")
    queues = opts.queues.split(",") if opts.queues else None
    with stalwart.Stalwart(opts.url) as app:
        declare(app, opts.workdir)
        (opts.workdir / f"ready-{os.getpid()}").touch()
        app.serve(concurrency=8, queues=queues)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
