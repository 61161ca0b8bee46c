"""Loaded by every Python child the fault lab runs under libfaketime (``lab.skewed_clock_env``
puts this folder first on ``PYTHONPATH``).

libfaketime 0.9.10 (Debian 12) fails Python's ``time.sleep`` with ``EINVAL`` when it leaves the
monotonic clock alone (its ``clock_nanosleep`` wrapper mistranslates an absolute monotonic
deadline), and hangs Python's timed waits when it shifts that clock (it does not wrap
``sem_clockwait``). So the lab leaves the monotonic clock alone, and here ``time.sleep`` waits
on an event instead, which reads only the monotonic clock.
"""

from __future__ import annotations

import os
import threading
import time

if os.environ.get("FAKETIME"):

    def _sleep(seconds: float) -> None:
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        threading.Event().wait(seconds)

    time.sleep = _sleep
