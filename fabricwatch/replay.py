"""Replay a trace file through the in-process pipeline: the loop shared by the CLI and the tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabricwatch.detectors.evaluation import Evaluation, evaluate
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.schemas.messages import Anomaly
from fabricwatch.schemas.trace import TraceReader


@dataclass
class ReplayResult:
    pipeline: Pipeline
    anomalies: list[Anomaly] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    malformed_lines: int = 0
    first_ns: int | None = None
    last_ns: int | None = None
    wall_s: float = 0.0

    @property
    def duration_s(self) -> float:
        return (self.last_ns - self.first_ns) / 1e9 if self.first_ns is not None else 0.0

    def evaluation(self) -> Evaluation:
        poll_s = float(self.meta.get("poll_interval_s", 1.0))
        return evaluate(self.anomalies, self.pipeline.labels, poll_s, self.duration_s)


PROGRESS_EVERY = 5_000
"""Records between two progress calls: a few per second on a large trace, nothing on a small one."""


def replay_trace(
    path: Path,
    pipeline: Pipeline,
    on_anomalies: Callable[[list[Anomaly]], None] | None = None,
    on_malformed: Callable[[int, str], None] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
) -> ReplayResult:
    """Feed every record of the trace, in file order, then let stage 2 evaluate the last poll.
    ``on_progress`` gets (records so far, the trace time reached) every ``PROGRESS_EVERY`` records."""
    result = ReplayResult(pipeline)

    def emit(events: list[Anomaly]) -> None:
        result.anomalies.extend(events)
        if events and on_anomalies is not None:
            on_anomalies(events)

    started = time.perf_counter()
    with TraceReader(path, on_error=on_malformed) as reader:
        for rec in reader:
            if result.first_ns is None:
                result.first_ns = rec.ts_ns
            result.last_ns = rec.ts_ns
            emit(pipeline.feed(rec.topic, rec.ts_ns, rec.value(), where=f"{path}:{reader.line}"))
            if on_progress is not None and reader.line % PROGRESS_EVERY == 0:
                on_progress(reader.line, rec.ts_ns)
        emit(pipeline.finish())
        result.meta = dict(reader.header.meta)
        result.malformed_lines = reader.malformed
    result.wall_s = time.perf_counter() - started
    return result
