"""Child servers (the embedded broker, a test's ClickHouse, worker processes): starting them,
waiting for them to listen, and stopping them.

A child runs in a process group of its own, so Ctrl-C in a terminal (SIGINT to the foreground
group) reaches only the parent, which stops its children in order: the sink stores and commits
before the broker goes away. Each child also asks the kernel for SIGTERM when its parent dies, so
that a parent killed outright leaves no broker or worker behind.
"""

from __future__ import annotations

import ctypes
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
"""Loaded here, not in the child between fork and exec, where loading a library can deadlock."""


class ChildError(RuntimeError):
    """A child we started could not serve: its message is one line that says which and why."""


class ChildExited(ChildError):
    """A child exited while we needed it; the message carries the last lines it wrote (its reason)."""

    def __init__(self, what: str, code: int | None, output: str) -> None:
        reason = f": {output}" if output else " (it wrote nothing)"
        super().__init__(f"{what} exited with code {code}{reason}")
        self.code = code


def fabricwatch_command(*args: str) -> list[str]:
    """The command that runs ``fabricwatch ARGS`` as a child with this interpreter.

    ``-P`` keeps the current directory off the child's ``sys.path``: ``python -m`` would put it
    first, and a directory holding a folder named ``fabricwatch`` (a clone of this repository, for
    one) would then shadow the installed package in the child though the parent imported it fine."""
    return [sys.executable, "-P", "-m", "fabricwatch", *args]


def last_lines(path: Path, lines: int = 3, chars: int = 400) -> str:
    """The last non-blank ``lines`` of a child's output file, joined into one line of at most
    ``chars``: what a parent says when the child exits (its last words are almost always why)."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 8192))
            tail = f.read().decode(errors="replace")
    except OSError:
        return ""
    tail = _TERMINAL_CODES.sub("", tail)
    kept = [line.strip() for line in tail.splitlines() if line.strip()][-lines:]
    text = " | ".join(kept)
    return text if len(text) <= chars else "..." + text[-chars:]


_TERMINAL_CODES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def spawn(cmd: list[str], **popen: Any) -> subprocess.Popen:
    """``subprocess.Popen(cmd)`` in a process group of its own, sent SIGTERM when we die."""
    return subprocess.Popen(cmd, start_new_session=True, preexec_fn=_die_with_parent, **popen)


def _die_with_parent() -> None:
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


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
