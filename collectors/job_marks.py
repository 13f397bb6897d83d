"""Mark a training job's collectives from the job itself, for sites whose jobs do not log NCCL's
COLL lines: ``import fabricwatch.phases`` (no torch, nothing heavy until publishing starts).

    import fabricwatch.phases as phases

    phases.start(job="llama-70b")                 # broker from FABRICWATCH_BROKER, or out="x.trace"
    for step in range(steps):
        phases.step(step)                          # optional: step time; incidents name the step
        phases.collective("AllReduce", nbytes=grad_bytes, comm="dp")
        ...
    phases.stop()                                   # sends what is open

A mark costs the training loop an append to a bounded queue (well under a microsecond;
``bench/bench_phases_api.py``): a thread beside it coalesces the marks into phases, as the log
collector does, a few messages a second per rank, and hands them to the broker (or a trace). The
loop never waits: a full queue drops the mark and counts it (``stats()``), and a broker that is
away costs the thread, not the loop.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from fabricwatch.ingest.phases.coalescer import PhaseCoalescer
from fabricwatch.ingest.phases.nccl_log import KNOWN_OPS, CollCall, CommInit
from fabricwatch.ingest.phases.steps import StepMark, step_messages
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import PhaseMessage, encode, phase_time

_STEP = "step"
"""A step mark in the queue, beside the collectives (whose names are NCCL's, never this)."""
QUEUE_MAX = 100_000
"""Marks waiting for the thread; past it a mark is dropped and counted (a stalled publisher must
not grow the training process without bound)."""


@dataclass
class ApiStats:
    marked: int = 0
    dropped: int = 0
    """Marks dropped because the queue was full."""
    phases: int = 0
    """Phases handed to the broker (or written)."""
    lost: int = 0
    """Phases that could not be handed over (no broker to connect to): counted, not retried."""
    last_error: str = ""


class _Marks:
    """What ``start`` sets up: the queue the loop appends to and the thread that drains it."""

    def __init__(self, job: str, rank: int, output: Any, interval_s: float, gap_s: float) -> None:
        self.queue: deque[tuple[str, int, str, int]] = deque()
        self.stats = ApiStats()
        self.host, self.pid, self.rank = socket.gethostname(), os.getpid(), rank
        self._coalescer = PhaseCoalescer(job, gap_s, f"api:{self.host}")
        self._output = output
        self._out: Any = None
        self._closers: list[Any] = []
        self._interval_s = interval_s
        self._comms: set[str] = set()
        self.steps = 0
        """The step ``step()`` marks when not told."""
        self._step: tuple[int, int] | None = None
        """The step running: its number and when it was marked."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fabricwatch-phases", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._send(self._drain() + self._coalescer.due(time.time_ns()))
        self._send(self._drain() + self._coalescer.close_all())

    def _drain(self) -> list[PhaseMessage]:
        """The phases the marks closed, and the steps that ended (a step ends when the next is
        marked: its time is the gap between the two marks; the last one marked has none yet)."""
        closed: list[PhaseMessage] = []
        steps: list[StepMark] = []
        popleft = self.queue.popleft
        while self.queue:
            op, nbytes, comm, ts = popleft()
            if op == _STEP:
                self._coalescer.step = nbytes
                if self._step is not None and ts > self._step[1]:
                    n, began = self._step
                    steps.append(StepMark(self.host, self.rank, n, began, ts - began, None, None))
                self._step = (nbytes, ts)
                continue
            if comm not in self._comms:
                self._comms.add(comm)
                self._coalescer.init(CommInit(self.host, self.pid, comm, self.rank, 0, comm))
            closed += self._coalescer.call(CollCall(self.host, self.pid, comm, op, nbytes, 0, 0, ts), ts)
        return closed + step_messages(self._coalescer.job, self._coalescer.source, steps)

    def _send(self, phases: list[PhaseMessage]) -> None:
        """Hand phases over, connecting first if need be: in this thread, so a broker that is away
        costs it, never the training loop. What cannot be handed over is counted as lost."""
        if not phases:
            return
        try:
            if self._out is None:
                self._out, close = self._output()
                self._closers.append(close)
            for ph in phases:
                self._out(ph)
            self.stats.phases += len(phases)
        except Exception as exc:  # a broker library's errors are many; each costs only these phases
            self.stats.lost += len(phases)
            self.stats.last_error = f"{type(exc).__name__}: {exc}"

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        for close in self._closers:
            close()


_marks: _Marks | None = None


def start(
    job: str | None = None,
    broker: str | None = None,
    out: str | None = None,
    rank: int | None = None,
    interval_s: float = 0.5,
    gap_s: float = 0.5,
) -> None:
    """Begin marking: the job (``FABRICWATCH_JOB``), the broker (``FABRICWATCH_BROKER``) or a trace
    file ``out``, this process's rank (``RANK``, as torchrun sets it). Marks before ``start`` and
    after ``stop`` are ignored."""
    global _marks
    if _marks is not None:
        raise RuntimeError("fabricwatch.phases is already started; stop() it first")
    job = job or os.environ.get("FABRICWATCH_JOB", "")
    if not job:
        raise ValueError("name the job: start(job=...) or FABRICWATCH_JOB")
    rank = rank if rank is not None else int(os.environ.get("RANK", "0"))
    _marks = _Marks(
        job, rank, _output(broker or os.environ.get("FABRICWATCH_BROKER"), out), interval_s, gap_s
    )


def _output(broker: str | None, out: str | None) -> Any:
    """What opens the destination, in the marking thread: (send one phase, close)."""
    if out is not None:

        def to_trace() -> tuple[Any, Any]:
            from fabricwatch.schemas.trace import TraceWriter

            writer = TraceWriter(out, "fabricwatch.phases", time.time_ns(), {})
            return (lambda ph: writer.write_message(topics.PHASES, ph.job, phase_time(ph), ph)), writer.close

        return to_trace
    if broker:

        def to_broker() -> tuple[Any, Any]:
            from fabricwatch.streams.kafka_io import BrokerSettings, Publisher

            publisher = Publisher(BrokerSettings(bootstrap=broker))
            return (
                lambda ph: publisher.send(topics.PHASES, ph.job, encode(ph), phase_time(ph))
            ), publisher.close

        return to_broker
    raise ValueError("nowhere to send the phases: start(broker=...), FABRICWATCH_BROKER, or start(out=...)")


def collective(op: str, nbytes: int = 0, comm: str = "default") -> None:
    """Mark one collective call of this rank, now: ``op`` as NCCL names it (AllReduce, AllGather,
    ReduceScatter, AllToAll, Broadcast, Reduce, Send, Recv), the bytes it moves, the communicator
    (``dp``, ``tp``, a process group's name). Never blocks."""
    marks = _marks
    if marks is None:
        return
    if op not in KNOWN_OPS:
        raise ValueError(f"collective {op!r}: one of {', '.join(sorted(KNOWN_OPS))}")
    if len(marks.queue) >= QUEUE_MAX:
        marks.stats.dropped += 1
        return
    marks.queue.append((op, nbytes, comm, time.time_ns()))
    marks.stats.marked += 1


def step(n: int | None = None) -> None:
    """Mark the start of training step ``n`` (the step after the last one marked, without it): the
    phases that begin from now on carry it, and an incident they explain names it; the step before
    is sent with its time (``Steps``: the gap between the two marks). Never blocks."""
    marks = _marks
    if marks is None:
        return
    if n is None:
        n = marks.steps
    if len(marks.queue) >= QUEUE_MAX:
        marks.stats.dropped += 1
        return
    marks.steps = n + 1
    marks.queue.append((_STEP, n, "", time.time_ns()))
    marks.stats.marked += 1


def pending() -> int:
    """Marks waiting for the marking thread."""
    return len(_marks.queue) if _marks is not None else 0


def stats() -> ApiStats:
    """Marks taken and dropped, phases sent, since ``start``."""
    return _marks.stats if _marks is not None else ApiStats()


def stop() -> ApiStats:
    """Send what is open, close the broker connection or the trace, and stop marking."""
    global _marks
    marks, _marks = _marks, None
    if marks is None:
        return ApiStats()
    marks.stop()
    return marks.stats
