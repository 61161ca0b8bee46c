"""``stalwart worker portable_worker:app``: the portability tests' agent on ``$STALWART_URL``."""

from __future__ import annotations

from portable_agent import declare

import stalwart

app = stalwart.Stalwart()
declare(app)
