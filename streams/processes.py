"""Waiting for a child server (the embedded broker, a test's ClickHouse) to listen."""

from __future__ import annotations

import socket
import subprocess
import time
from typing import Literal


def wait_listening(
    proc: subprocess.Popen, port: int, timeout_s: float, every_s: float = 0.05
) -> Literal["listening", "exited", "timeout"]:
    """Until ``proc`` accepts connections on loopback ``port``, exits, or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return "exited"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return "listening"
        except OSError:
            time.sleep(every_s)
    return "timeout"
