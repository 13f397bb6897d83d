"""Switches' gNMI servers subscribed directly (SAMPLE at the interval), assembled into one snapshot
per switch per sample on ``fabric.counters`` (``ingest/gnmi/README.md``). A target that is down or
drops its stream is subscribed again (1 s, doubling to 30 s), said once."""

from __future__ import annotations

from dataclasses import dataclass

from fabricwatch.collectors.frame import Frame
from fabricwatch.collectors.metrics import CollectMetrics
from fabricwatch.ingest.gnmi.snapshots import SnapshotAssembler
from fabricwatch.ingest.gnmi.subscribe import GnmiSettings, stream_targets
from fabricwatch.ingest.nic.poll import CollectStats, ProblemLog
from fabricwatch.schemas import topics

TOPICS = (topics.COUNTERS,)


@dataclass
class GnmiRun:
    stats: CollectStats
    assembler: SnapshotAssembler

    def summary(self, targets: int) -> str:
        a = self.assembler.stats
        return (
            f"collected {self.stats.snapshots} snapshots of {targets} targets from {a.points} values "
            f"({a.late} late, {a.unknown_paths} of unknown paths, "
            f"{sum(self.stats.problems.values())} stream problems)"
        )


def run(cfg: GnmiSettings, frame: Frame, count: int | None = None) -> GnmiRun:
    """Stream every target until ``frame.stop`` (or ``count`` snapshots); the samples still open
    then are sent."""
    done = GnmiRun(CollectStats(), SnapshotAssembler(cfg.window_s, cfg.grace_s, frame.warn))
    stats, assembler = done.stats, done.assembler
    metrics = CollectMetrics(stats, cfg.interval_s, frame.published)
    frame.serve(metrics.registry, metrics.health)
    for points in stream_targets(cfg.targets, cfg.interval_s, frame.stop, ProblemLog(stats, frame.warn)):
        for snap in assembler.add(points) + assembler.due():
            frame.put(topics.COUNTERS, snap.device, snap, snap.ts_ns)
            stats.snapshots += 1
            metrics.observe_poll(0.0)
            if count is not None and stats.snapshots >= count:
                frame.stop.set()
    if count is None or stats.snapshots < count:
        for snap in assembler.close():
            frame.put(topics.COUNTERS, snap.device, snap, snap.ts_ns)
            stats.snapshots += 1
    return done
