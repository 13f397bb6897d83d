"""A real ``redis-server`` (Debian's) on a free loopback port, without persistence: the database a
simulated SONiC switch (``ingest.simulator.sonic_db``) is written into for tests and benchmarks."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from fabricwatch.local.broker import free_port
from fabricwatch.local.processes import ChildError, spawn, stop_process, wait_listening


@contextmanager
def redis_server(start_timeout_s: float = 20.0) -> Iterator[str]:
    """Yields the server's URL (no database chosen); stops it and removes its directory on exit."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise ChildError("redis-server is not installed (.ci/run installs Debian's redis-server)")
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="fw-redis-")
    args = [binary, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"]
    proc = spawn([*args, "--dir", workdir], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        state = wait_listening(proc, port, start_timeout_s)
        if state != "listening":
            err = proc.stderr.read().decode(errors="replace").strip() if state == "exited" else ""
            raise ChildError(
                f"redis-server did not listen on 127.0.0.1:{port} ({state}){': ' + err if err else ''}"
            )
        yield f"redis://127.0.0.1:{port}"
    finally:
        stop_process(proc)
        if proc.stderr:
            proc.stderr.close()
        shutil.rmtree(workdir, ignore_errors=True)
