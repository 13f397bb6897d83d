"""The phase collector's self-metrics and health, for ``/metrics`` and ``/healthz``, as the other
daemons have them: counts read from its tail's, reader's and publisher's stats at scrape time, the
time one read of the log files took as a histogram. Healthy means a read finished recently and
the patterns matched a file within the last minute: a collector that follows nothing (logs written
where the unit does not look) reads "successfully" forever, and an empty panel is all anyone sees."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from fabricwatch.collectors.metrics import POLL_BUCKETS_S, Liveness
from fabricwatch.ingest.phases.log_tail import TailStats
from fabricwatch.ingest.phases.nccl_phases import ReadStats

NOTHING_FOLLOWED_S = 60.0
"""How long the patterns may match no file before the collector says so and is unhealthy (a job's
first log appears when it starts, so a node between jobs follows nothing for a while)."""


class PhaseMetrics:
    """A prometheus-client registry for one ``phases collect``."""

    def __init__(
        self,
        tail: TailStats,
        reader: ReadStats,
        phases: Callable[[], int],
        interval_s: float,
        published: Callable[[], dict[str, int]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from prometheus_client import CollectorRegistry, Histogram

        self.registry = CollectorRegistry(auto_describe=False)
        self._read_seconds = Histogram(
            "fabricwatch_phases_read_duration_seconds",
            "Time one read of the log files took, parsing and hand-over of its phases included",
            buckets=POLL_BUCKETS_S,
            registry=self.registry,
        )
        self.registry.register(_Counts(tail, reader, phases, published))
        self._liveness = Liveness("read of the logs", interval_s, clock)
        self._tail, self._clock = tail, clock
        self._empty_since: float | None = clock()
        self._said = False

    def observe_read(self, seconds: float) -> str | None:
        """Count a finished read; return, once per stretch, what to tell the operator when the
        patterns have matched no file for ``NOTHING_FOLLOWED_S``."""
        self._read_seconds.observe(seconds)
        self._liveness.done()
        if self._tail.files:
            self._empty_since, self._said = None, False
            return None
        now = self._clock()
        self._empty_since = now if self._empty_since is None else self._empty_since
        if self._said or now - self._empty_since < NOTHING_FOLLOWED_S:
            return None
        self._said = True
        return f"following no file for {now - self._empty_since:.0f} s: nothing matches the --log patterns"

    def health(self) -> tuple[bool, str]:
        ok, said = self._liveness.health()
        if ok and self._empty_since is not None:
            empty_s = self._clock() - self._empty_since
            if empty_s >= NOTHING_FOLLOWED_S:
                return False, f"following no file for {empty_s:.0f} s: nothing matches the --log patterns"
        return ok, said


class _Counts:
    def __init__(
        self,
        tail: TailStats,
        reader: ReadStats,
        phases: Callable[[], int],
        published: Callable[[], dict[str, int]] | None,
    ) -> None:
        self._tail, self._reader, self._phases, self._published = tail, reader, phases, published

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        t, r = self._tail, self._reader
        yield GaugeMetricFamily("fabricwatch_phases_files", "Log files being followed", value=t.files)
        yield CounterMetricFamily("fabricwatch_phases_lines", "Log lines read", value=t.lines)
        for name, value, text in (
            ("rotations", t.rotations, "Log files rotated (read to their end, their successor followed)"),
            ("truncations", t.truncations, "Log files truncated or rewritten (read again from their start)"),
            ("not_utf8_lines", t.not_utf8, "Lines with bytes that are not UTF-8"),
            ("calls", r.calls, "Collective calls read"),
            ("untimed_calls", r.untimed, "Calls left out for want of a time (import only)"),
            ("phases", self._phases(), "Phases made of the calls"),
        ):
            yield CounterMetricFamily(f"fabricwatch_phases_{name}", text, value=value)
        skipped = CounterMetricFamily(
            "fabricwatch_phases_skipped_lines", "Lines that could not be read, by kind", labels=["kind"]
        )
        for kind, n in sorted(r.problems.items()):
            skipped.add_metric([kind], n)
        yield skipped
        if self._published is not None:
            messages = CounterMetricFamily(
                "fabricwatch_phases_messages", "Phases handed to the broker, by outcome", labels=["outcome"]
            )
            for outcome, n in self._published().items():
                messages.add_metric([outcome], n)
            yield messages
