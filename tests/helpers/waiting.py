"""Waiting on conditions, never on fixed sleeps: a test waits exactly as long as the system needs,
bounded by a timeout that fails it."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(condition: Callable[[], object], timeout_s: float = 30.0, every_s: float = 0.05) -> bool:
    """Poll ``condition`` until it is true or ``timeout_s`` passes; the last answer decides."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(every_s)
    return bool(condition())
