"""A benchmark's child processes answer their parent or stop it: a child that dies (at import, for
one, against a broken install) makes the parent exit with the child's exit code instead of waiting
forever for an answer that cannot come. The child's own traceback is on the terminal above.

Imported as ``children`` by the scripts beside it (Python puts a script's folder on ``sys.path``).
"""

from __future__ import annotations

import sys
import time
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any


def answer(proc: BaseProcess, conn: Connection, what: str, timeout_s: float = 900.0) -> Any:
    """The next object ``proc`` sends on ``conn``; exits this process if ``proc`` exits without
    sending one or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while not conn.poll(0.2):
        if not proc.is_alive() and not conn.poll(0):
            sys.exit(f"{what} exited with code {proc.exitcode} before answering (its output is above)")
        if time.monotonic() > deadline:
            proc.terminate()
            sys.exit(f"{what} did not answer within {timeout_s:.0f} s")
    return conn.recv()
