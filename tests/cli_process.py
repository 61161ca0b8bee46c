"""The real ``stalwart`` command in a subprocess, for the CLI tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# What the CLI reads to find a store; a test that wants them sets them itself.
DISCOVERY_VARIABLES = ("STALWART_URL", "STALWART_APP")


def stalwart(
    *args: str,
    cwd: Path,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    clean: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m stalwart ARGS`` in ``cwd`` and capture its output (text). ``env`` adds
    to this process's environment (``clean``: without the store-discovery variables first)."""
    base = {k: v for k, v in os.environ.items() if not (clean and k in DISCOVERY_VARIABLES)}
    return subprocess.run(
        [sys.executable, "-m", "stalwart", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        input=stdin,
        env={**base, **(env or {})},
    )
