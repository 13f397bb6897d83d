"""A ``fabricwatch worker`` as a child process, for ``fabricwatch run`` and the integration tests."""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from fabricwatch.local.broker import free_port
from fabricwatch.local.processes import (
    ChildError,
    ChildExited,
    fabricwatch_command,
    last_lines,
    spawn,
    stop_process,
)


class WorkerProcess:
    """Started on construction; ``stop`` sends SIGTERM (Faust commits and leaves the group).

    Its Faust state directory is made here and removed by ``stop``, whatever the signal: a worker
    killed outright cannot clean up after itself, and nothing may be left in the temp directory.
    Its output goes to ``log`` (or a file in that directory), so that when it exits its last lines
    say why (``check``)."""

    def __init__(
        self,
        bootstrap: str,
        log: Path | None = None,
        session_timeout_s: float = 6.0,
        extra_args: list[str] | None = None,
    ) -> None:
        self.port = free_port()
        self.state_dir = Path(tempfile.mkdtemp(prefix="fabricwatch-worker-"))
        self.log_path = log if log is not None else self.state_dir / "worker.log"
        self._log: IO[bytes] = self.log_path.open("wb")
        cmd = fabricwatch_command(
            "worker",
            "--broker",
            bootstrap,
            "--session-timeout",
            str(session_timeout_s),
            "--web-port",
            str(self.port),
            "--state-dir",
            str(self.state_dir),
            *(extra_args or []),
        )
        self.proc = spawn(cmd, stdout=self._log, stderr=subprocess.STDOUT)

    def get(self, path: str) -> tuple[int, str]:
        """Status and body of one of the worker's endpoints (0 when it does not answer)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/{path}", timeout=2) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:
            return 0, ""

    def metric(self, name: str, label: str = "") -> int:
        """Sum of a ``fabricwatch_<name>`` metric's series whose labels contain ``label``."""
        status, text = self.get("metrics")
        if status != 200:
            return 0
        return sum(
            int(float(line.rsplit(" ", 1)[1]))
            for line in text.splitlines()
            if line.startswith(f"fabricwatch_{name}") and label in line
        )

    def check(self) -> None:
        """Raise ``ChildExited`` with the worker's last lines if it is no longer running: whoever
        waits on a worker calls this in the wait, so that a dead one stops them with its reason."""
        if self.proc.poll() is not None:
            raise ChildExited(
                f"the worker (port {self.port})", self.proc.returncode, last_lines(self.log_path)
            )

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.check()
            if self.get("ready")[0] == 200:
                return
            time.sleep(0.2)
        raise ChildError(
            f"the worker (port {self.port}) was not ready within {timeout_s:.0f} s: "
            f"{last_lines(self.log_path) or 'it wrote nothing'}"
        )

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int:
        code = stop_process(self.proc, sig, timeout_s)
        self._log.close()
        shutil.rmtree(self.state_dir, ignore_errors=True)
        return code

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
