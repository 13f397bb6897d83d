"""Replay a trace file through the in-process pipeline: the loop shared by the CLI and the tests."""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fabricwatch.detectors.evaluation import Evaluation, evaluate
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.schemas.messages import Anomaly
from fabricwatch.schemas.trace import TraceReader, TraceRecord


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
    merge: Sequence[Path] = (),
) -> ReplayResult:
    """Feed every record of the trace, in file order, then let stage 2 evaluate the last poll.
    ``merge`` are traces recorded beside it (the phases ``phases import`` read from a job's logs):
    their records go in among the trace's by time, and at one time the trace's own come first.
    ``on_progress`` gets (records so far, the trace time reached) every ``PROGRESS_EVERY`` records."""
    result = ReplayResult(pipeline)

    def emit(events: list[Anomaly]) -> None:
        result.anomalies.extend(events)
        if events and on_anomalies is not None:
            on_anomalies(events)

    started = time.perf_counter()
    with ExitStack() as stack:
        readers = [stack.enter_context(TraceReader(p, on_error=on_malformed)) for p in (path, *merge)]
        tagged = [_tagged(r, i) for i, r in enumerate(readers)]
        records = tagged[0] if len(tagged) == 1 else heapq.merge(*tagged, key=lambda t: t[0])
        for n, (ts_ns, _, where, rec) in enumerate(records, start=1):
            if result.first_ns is None:
                result.first_ns = ts_ns
            result.last_ns = ts_ns
            emit(pipeline.feed(rec.topic, ts_ns, rec.value(), where=where))
            if on_progress is not None and n % PROGRESS_EVERY == 0:
                on_progress(n, ts_ns)
        emit(pipeline.finish())
        result.meta = dict(readers[0].header.meta)
        result.malformed_lines = sum(r.malformed for r in readers)
    result.wall_s = time.perf_counter() - started
    return result


def _tagged(reader: TraceReader, order: int) -> Iterator[tuple[int, int, str, TraceRecord]]:
    """A trace's records as (time, which trace, where, record), for merging several by time."""
    for rec in reader:
        yield rec.ts_ns, order, f"{reader.path}:{reader.line}", rec
