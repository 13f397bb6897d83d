"""Child servers (the embedded broker, a test's ClickHouse, worker processes): waiting for them to
listen, and stopping them."""

from __future__ import annotations

import signal
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


def stop_process(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> int:
    """Send ``sig`` (unless it already exited), wait up to ``timeout_s``, then kill: a child that
    ignores its stop signal must not outlive us."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode
