"""A chdb store filled the way a user fills one: simulate a shipped scenario, replay it through the
in-process pipeline with the store recorder attached (rates, phases, topology, anomalies)."""

from __future__ import annotations

import time
from pathlib import Path

from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.replay import ReplayResult, replay_trace
from fabricwatch.storage.recorder import PipelineRecorder
from fabricwatch.storage.sink import Sink
from fabricwatch.storage.store import Store
from helpers.paths import SCENARIOS


def an_hour_ago() -> int:
    """Where a trace for a store starts: the raw table keeps two days (TTL), so a trace stamped
    with a scenario's default start (2026-01-01) would be expired on insert."""
    return (time.time_ns() - 3600 * 10**9) // 10**9 * 10**9


def replay_into_store(scenario: str, workdir: Path) -> tuple[Store, ReplayResult]:
    """A shipped scenario simulated from an hour ago and replayed into a store."""
    trace = workdir / f"{scenario}.trace.gz"
    simulate(load_scenario(SCENARIOS / f"{scenario}.yaml", {"start_time": an_hour_ago()}), trace)
    return trace_into_store(trace, workdir)


def trace_into_store(trace: Path, workdir: Path) -> tuple[Store, ReplayResult]:
    """A trace replayed through the in-process pipeline into a store in ``workdir/store``."""
    store = Store.open(workdir / "store")
    try:
        sink = Sink(store)
        pipeline = Pipeline()
        recorder = PipelineRecorder(pipeline, sink)
        result = replay_trace(trace, pipeline, recorder.on_anomalies)
        recorder.finish()
    except BaseException:
        store.close()
        raise
    return store, result
