"""The LangGraph tests reuse the crash tests' harness (``tests/faults/fault_harness.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

FAULTS = str(Path(__file__).resolve().parents[1] / "faults")
if FAULTS not in sys.path:
    sys.path.append(FAULTS)
