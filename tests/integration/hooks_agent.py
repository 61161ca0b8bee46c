"""The app the webhook tests serve (``stalwart worker hooks_agent:app --http-port 0``, and
``stalwart ui --app hooks_agent:app``), on the store ``$STALWART_URL``."""

from __future__ import annotations

from typing import Any

import stalwart

GITHUB_SECRET = "gh-s3cret"
STRIPE_SECRET = "whsec_test"

app = stalwart.Stalwart(lease_seconds=2.0)


@app.workflow(name="triage")
def triage(event: dict[str, Any]) -> str:
    return f"triaged {event['action']}"


@app.workflow(name="fulfil")
def fulfil(event: dict[str, Any]) -> str:
    return f"fulfilled {event['id']}"


@app.workflow(name="inbox")
def inbox() -> Any:
    return stalwart.wait_for_event("ping", timeout=3600)


app.webhook("github", start=triage, secret=GITHUB_SECRET)
app.webhook("stripe", start=fulfil, secret=STRIPE_SECRET, scheme="stripe")
app.webhook("pings", event="ping", to=lambda body: body["run"], secret=GITHUB_SECRET)
app.webhook("open", start=triage, allow_unsigned=True)
