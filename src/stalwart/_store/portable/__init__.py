"""Moving a store's data: ``migrate`` (the whole store into an empty one of any backend),
``export`` and ``import`` (runs as JSON Lines between any two stores), all driven by the one
list of tables in ``tables``."""

from __future__ import annotations
