"""``stalwart worker portable_worker:app``: the portability tests' agent on ``$STALWART_URL``."""

from __future__ import annotations

import stalwart
from portable_agent import declare

app = stalwart.Stalwart()
declare(app)
