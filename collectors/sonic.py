"""SONiC switches' COUNTERS_DB, one pipelined round trip per switch per poll, into
``fabric.counters``; their LLDP neighbours into ``fabric.topology`` (``ingest/sonic/README.md``).

The switches are the configured list, or, with ``assigned``, this replica's share of the
``fabric.switches`` topic (``collectors/switch_assignments.py``), polled in rounds that end when
the share changes."""

from __future__ import annotations

import threading

from fabricwatch.collectors.frame import Frame
from fabricwatch.collectors.metrics import CollectMetrics
from fabricwatch.ingest.nic.poll import CollectStats
from fabricwatch.ingest.sonic.poll import SonicSettings, SwitchTarget, poll_switches
from fabricwatch.ingest.sonic.switch import SonicSwitch, SwitchStats
from fabricwatch.ingest.sonic.topology import TopologyWatch
from fabricwatch.schemas import topics

TOPICS = (topics.COUNTERS, topics.TOPOLOGY)


class SonicCollector:
    """The pollers of the switches met so far, kept across assignment rounds (a switch's name maps
    and counter history stay when its share moves and comes back)."""

    def __init__(self, cfg: SonicSettings, frame: Frame, count: int | None = None) -> None:
        self.cfg, self.frame, self.count = cfg, frame, count
        self.stats = CollectStats()
        self.switches: dict[str, SonicSwitch] = {}
        self._switch_stats: dict[str, SwitchStats] = {}
        self.metrics = CollectMetrics(self.stats, cfg.interval_s, frame.published, self._switch_stats)
        frame.serve(self.metrics.registry, self.metrics.health)
        frame.close_later(self._close)
        self._lldp = self._topology()

    def poll(self, targets: list[SwitchTarget], stop: threading.Event) -> None:
        """Poll ``targets`` until ``stop`` (or ``count`` polls), each snapshot to the frame."""
        current = [self._switch(t) for t in targets]
        self._switch_stats.update({s.name: s.stats for s in current})
        while not current and not stop.wait(self.cfg.interval_s):
            self.metrics.observe_poll(0.0)  # nothing assigned yet (or more replicas than shares): healthy
        if not current:
            return
        polls = poll_switches(
            current,
            self.cfg.interval_s,
            self.count,
            self.frame.warn,
            self.stats,
            stop,
            self.metrics.observe_read,
            self.metrics.observe_poll,
        )
        for snap in polls:
            self.frame.put(topics.COUNTERS, snap.device, snap, snap.ts_ns)
            for report in self._lldp.due() if self._lldp is not None else []:
                self.frame.publish(topics.TOPOLOGY, report.source, report, report.ts_ns)

    def summary(self) -> str:
        s = self.stats
        return (
            f"collected {s.snapshots} snapshots of {len(self.switches)} switches in {s.polls} polls "
            f"({s.late_polls} late, {sum(s.problems.values())} switch polls that gave nothing)"
        )

    def _switch(self, target: SwitchTarget) -> SonicSwitch:
        known = self.switches.get(target.name)
        if known is None or known.url != target.redis:
            known = self.switches[target.name] = SonicSwitch(
                target.name, target.redis, self.cfg.timeout, target.config_redis, self.frame.warn
            )
        return known

    def _topology(self) -> TopologyWatch | None:
        """The switches' LLDP neighbours, when publishing (a trace has no use for them)."""
        if not self.cfg.lldp_interval_s or self.frame.publisher is None:
            return None
        switches = {s.name: s.redis for s in self.cfg.switches}
        watch = TopologyWatch(
            switches, self.cfg.site, self.cfg.lldp_interval_s, self.cfg.timeout, self.frame.warn
        )
        self.frame.close_later(watch.close)
        return watch

    def _close(self) -> None:
        for switch in self.switches.values():
            switch.close()


def run(cfg: SonicSettings, frame: Frame, count: int | None = None) -> SonicCollector:
    """Poll the configured switches until ``frame.stop`` (or ``count`` polls)."""
    collector = SonicCollector(cfg, frame, count)
    collector.poll(cfg.switches, frame.stop)
    return collector


def run_assigned(cfg: SonicSettings, frame: Frame, count: int | None = None) -> SonicCollector:
    """Poll this replica's share of ``fabric.switches`` until ``frame.stop``, a new round whenever
    the share changes."""
    from fabricwatch.collectors.switch_assignments import Assignments

    if frame.destination.broker is None:
        raise ValueError("--assigned takes the switches from the broker: give --broker HOST:PORT")
    collector = SonicCollector(cfg, frame, count)
    assignments = Assignments(frame.destination.broker, frame.warn)
    frame.close_later(assignments.close)
    while not frame.stop.is_set():
        assignments.changed.clear()
        targets = assignments.current()
        frame.say(f"assigned {len(targets)} switches: {', '.join(t.name for t in targets) or 'none yet'}")
        round_stop = threading.Event()
        threading.Thread(
            target=_until, args=(assignments.changed, frame.stop, round_stop), daemon=True
        ).start()
        collector.poll(targets, round_stop)
    return collector


def _until(changed: threading.Event, stop: threading.Event, round_stop: threading.Event) -> None:
    """End the round when the share changes or the collector stops."""
    while not (changed.wait(0.5) or stop.is_set()):
        continue
    round_stop.set()
