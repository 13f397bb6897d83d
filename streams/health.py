"""What a worker's health and readiness endpoints answer, decided without the web server or Kafka.

Kubernetes restarts a pod whose liveness fails and sends no traffic to one that is not ready; for a
stream worker "traffic" is partitions. So ready means: it has joined both its groups (stage 1's and
stage 2's) and holds partitions (or a group has more workers than partitions, which is idle, not
broken), and it has read the topology. Healthy means: input is waiting on its partitions and it is
moving; a worker whose partitions have lag but which has processed nothing for ``stall_after_s`` is
stuck and should go.

A worker that processes, but slower than input arrives, is not stuck: restarting it would lose its
state and make it later still. It says so instead: how old its newest input was when processed
(``behind``), how fast that grows, and ``falling_behind`` in ``/healthz`` and the log, so an operator
adds workers. The age is wall clock minus the message's Kafka timestamp (the collector's reading
time): a recorded trace replayed at its own pace is old but does not fall further behind.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Progress:
    stall_after_s: float = 30.0
    started: float = field(default_factory=time.monotonic)
    last_progress: float = field(default_factory=time.monotonic)
    joined: set[str] = field(default_factory=set)
    """The consumer groups that have assigned this worker its share (stage 1's and stage 2's)."""
    groups: tuple[str, ...] = ("stage1", "stage2")
    inputs_ready: bool = False
    counts: Counter[str] = field(default_factory=Counter)
    dead_letters: Counter[str] = field(default_factory=Counter)
    sent: Counter[str] = field(default_factory=Counter)
    """Messages handed to the producer, by topic."""
    core_cpu_s: Counter[str] = field(default_factory=Counter)
    """CPU seconds spent in each stage's pure core (``streams/stages.py``: decoding, detection,
    encoding), so that what the framework costs around it is the process's CPU minus these."""
    behind_window_s: float = 60.0
    """Span over which the growth of a stage's delay is measured."""
    behind_min_s: float = 5.0
    """A delay below this is never falling behind (a batch's own wait and the poll are in it)."""
    behind_growth: float = 0.05
    """Seconds of delay gained per second past which a stage is falling behind."""
    behind_recent_s: float = 5.0
    """A stage is late when every sample of this last stretch is past ``behind_min_s``."""
    behind_min_span_s: float = 10.0
    """Growth is judged over at least this long: one slow batch (a pause, a rebalance) is not a trend."""
    _behind: dict[str, deque[tuple[float, float]]] = field(default_factory=dict)
    _falling: set[str] = field(default_factory=set)
    _latest: dict[str, float] = field(default_factory=dict)

    def processed(self, what: str, n: int = 1, now: float | None = None) -> None:
        self.counts[what] += n
        self.last_progress = time.monotonic() if now is None else now

    def input_age(self, stage: str, message_ts_s: float, now: float | None = None) -> str | None:
        """Record that ``stage`` just processed input stamped ``message_ts_s`` (epoch seconds).

        Returns a line for the log when the stage starts or stops falling behind, else None: said
        once per change, not per batch."""
        now = time.time() if now is None else now
        age = max(0.0, now - message_ts_s)
        self._latest[stage] = age
        samples = self._behind.setdefault(stage, deque())
        if samples and now - samples[-1][0] < 1.0:
            return None  # one sample a second: a small window, and no trend work per batch
        samples.append((now, age))
        while len(samples) > 2 and now - samples[1][0] >= self.behind_window_s:
            samples.popleft()
        falling = self.falling_behind(stage)
        if falling == (stage in self._falling):
            return None
        if falling:
            self._falling.add(stage)
            return (
                f"{stage} is falling behind: its newest input was {self.behind(stage):.1f} s old, "
                f"{self.growth(stage):.2f} s older every second; add workers or partitions"
            )
        self._falling.discard(stage)
        return f"{stage} keeps up again: its newest input was {self.behind(stage):.1f} s old"

    def behind(self, stage: str) -> float:
        """How old the stage's newest input was when it processed it, in seconds (0 before any)."""
        return self._latest.get(stage, 0.0)

    def growth(self, stage: str) -> float:
        """Seconds of delay the stage gained per second over the window (negative: catching up): the
        least-squares slope of its one-a-second samples, so one slow batch barely moves it."""
        samples = self._behind.get(stage)
        if not samples or samples[-1][0] - samples[0][0] < self.behind_min_span_s:
            return 0.0
        n = len(samples)
        mean_t = sum(t for t, _ in samples) / n
        mean_b = sum(b for _, b in samples) / n
        spread = sum((t - mean_t) ** 2 for t, _ in samples)
        return sum((t - mean_t) * (b - mean_b) for t, b in samples) / spread

    def falling_behind(self, stage: str) -> bool:
        """Late for the last few seconds, not only in the last batch, and later every second."""
        samples = self._behind.get(stage, ())
        recent = [b for t, b in samples if samples[-1][0] - t <= self.behind_recent_s]
        return bool(recent) and min(recent) >= self.behind_min_s and self.growth(stage) > self.behind_growth

    def delays(self) -> dict[str, dict[str, float | bool]]:
        """Per stage, its delay, the delay's growth, and whether it is falling behind (``/healthz``)."""
        return {
            stage: {
                "behind_s": round(self.behind(stage), 3),
                "growth": round(self.growth(stage), 4),
                "falling_behind": self.falling_behind(stage),
            }
            for stage in sorted(self._behind)
        }

    def dead_letter(self, reason: str) -> None:
        self.dead_letters[reason_class(reason)] += 1

    def readiness(self) -> tuple[bool, str]:
        if waiting := [g for g in self.groups if g not in self.joined]:
            return False, f"not yet assigned partitions by the consumer group of {' and '.join(waiting)}"
        if not self.inputs_ready:
            return False, "still reading topology and phases"
        return True, "ready"

    def liveness(self, lag: int, now: float | None = None) -> tuple[bool, str]:
        """``lag``: messages waiting on this worker's partitions (highwater minus position)."""
        now = time.monotonic() if now is None else now
        idle = now - max(self.last_progress, self.started)
        if lag > 0 and idle > self.stall_after_s:
            return False, f"stalled: {lag} messages waiting and nothing processed for {idle:.0f} s"
        falling = [s for s in sorted(self._behind) if self.falling_behind(s)]
        late = "; falling behind: " + ", ".join(
            f"{s} {self.behind(s):.1f} s (+{self.growth(s):.2f} s/s)" for s in falling
        )
        return True, f"ok: lag {lag}, last progress {idle:.1f} s ago{late if falling else ''}"

    def prometheus(self, lag: int) -> bytes:
        """The counters in Prometheus' text format, for a scrape of ``/metrics`` (prometheus-client
        writes it, as for every fabricwatch daemon)."""
        from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest

        registry = CollectorRegistry(auto_describe=False)
        registry.register(_ProgressMetrics(self, lag))
        ProcessCollector(registry=registry)  # process_cpu_seconds_total, memory, open files
        return generate_latest(registry)


def healthy_gauge(ok: bool) -> Any:
    """``fabricwatch_healthy``: what ``/healthz`` answers, as a series Prometheus keeps and can
    alert on (``deploy/prometheus/fabricwatch-rules.yml``); it cannot read ``/healthz`` itself."""
    from prometheus_client.core import GaugeMetricFamily

    return GaugeMetricFamily(
        "fabricwatch_healthy",
        "1 while the daemon's /healthz answers 200, 0 while it answers 503",
        value=float(ok),
    )


class _ProgressMetrics:
    """A prometheus-client collector reading a worker's ``Progress`` at scrape time."""

    def __init__(self, progress: Progress, lag: int) -> None:
        self._progress = progress
        self._lag = lag

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        processed = CounterMetricFamily(
            "fabricwatch_processed", "Messages processed, by kind", labels=["what"]
        )
        for what, n in sorted(self._progress.counts.items()):
            processed.add_metric([what], n)
        dead = CounterMetricFamily(
            "fabricwatch_dead_letters", "Messages set aside, by reason", labels=["reason"]
        )
        for reason, n in sorted(self._progress.dead_letters.items()):
            dead.add_metric([reason], n)
        lag = GaugeMetricFamily("fabricwatch_consumer_lag", "Messages waiting on this worker's partitions")
        lag.add_metric([], self._lag)
        behind = GaugeMetricFamily(
            "fabricwatch_behind_seconds",
            "How old a stage's newest input was when processed (wall clock minus its Kafka timestamp; "
            "a replayed trace's age)",
            labels=["stage"],
        )
        growth = GaugeMetricFamily(
            "fabricwatch_behind_growth",
            "Seconds of delay a stage gained per second over the last minute (above 0: falling behind)",
            labels=["stage"],
        )
        for stage, d in self._progress.delays().items():
            behind.add_metric([stage], d["behind_s"])
            growth.add_metric([stage], d["growth"])
        sent = CounterMetricFamily(
            "fabricwatch_sent", "Messages handed to the producer, by topic", labels=["topic"]
        )
        for topic, n in sorted(self._progress.sent.items()):
            sent.add_metric([topic], n)
        core = CounterMetricFamily(
            "fabricwatch_core_cpu_seconds",
            "CPU seconds in a stage's pure core (decode, detect, encode); the rest is the framework's",
            labels=["stage"],
        )
        for stage, seconds in sorted(self._progress.core_cpu_s.items()):
            core.add_metric([stage], seconds)
        yield from (processed, dead, lag, behind, growth, sent, core)
        yield healthy_gauge(self._progress.liveness(self._lag)[0])


def reason_class(reason: str) -> str:
    """A low-cardinality label for a dead-letter reason (the full reason travels in the message)."""
    if reason.startswith("oversized"):
        return "oversized"
    if reason.startswith("empty"):
        return "empty"
    if reason.startswith("not valid JSON"):
        return "not_json"
    if reason.startswith("unsupported schema version"):
        return "schema_version"
    if reason.startswith("clock of"):
        return "clock_ahead"
    return "invalid"
