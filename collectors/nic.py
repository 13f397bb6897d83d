"""This host's RDMA NICs, polled on the wall-clock schedule into ``fabric.counters``, and the host's
cabling from LLDP into ``fabric.topology`` (``ingest/nic/README.md``)."""

from __future__ import annotations

import socket
import time
from contextlib import ExitStack
from pathlib import Path

from fabricwatch.collectors.frame import Frame
from fabricwatch.collectors.metrics import CollectMetrics
from fabricwatch.ingest.lldp.lldpcli import LldpWatch, run_lldpcli
from fabricwatch.ingest.nic.device import ethtool_command, rdma_statistic_command
from fabricwatch.ingest.nic.ethtool_ioctl import EthtoolIoctl
from fabricwatch.ingest.nic.module import read_module
from fabricwatch.ingest.nic.poll import CollectSettings, CollectStats, NicTarget, discover, poll
from fabricwatch.ingest.nic.vendors import nic_vendors, vendor_names
from fabricwatch.schemas import topics
from fabricwatch.schemas.config import ConfigError

TOPICS = (topics.COUNTERS, topics.TOPOLOGY)
LLDP_INTERVAL_S = 30.0
"""Seconds between reads of the host's LLDP neighbours when publishing and none is configured."""


def check(cfg: CollectSettings) -> list[NicTarget]:
    """The devices to read, or a clear error before anything is opened."""
    bad = sorted(v for v in cfg.vendors.values() if v not in nic_vendors())
    if bad:
        raise ConfigError(f"collect.vendors: unknown vendor {bad[0]!r}; known: {vendor_names()}")
    return discover(Path(cfg.sysfs_root), cfg.devices or None, cfg.vendors)


def run(
    cfg: CollectSettings, frame: Frame, targets: list[NicTarget], count: int | None = None
) -> CollectStats:
    """Poll ``targets`` ``count`` times (until ``frame.stop`` when None), every snapshot to the frame."""
    stats = CollectStats()
    with ExitStack() as stack:
        ethtool = {"none": None, "command": ethtool_command}.get(cfg.ethtool)
        if cfg.ethtool == "ioctl":
            ethtool = stack.enter_context(EthtoolIoctl()).read
        metrics = CollectMetrics(stats, cfg.interval_s, frame.published)
        frame.serve(metrics.registry, metrics.health)
        lldp = _lldp(cfg, targets, frame)
        snapshots = poll(
            Path(cfg.sysfs_root),
            targets,
            cfg.interval_s,
            count,
            host=cfg.host or None,
            ethtool=ethtool,
            warn=frame.warn,
            stats=stats,
            stop=frame.stop,
            on_poll=metrics.observe_poll,
            rdma_statistic=rdma_statistic_command if cfg.rdma_statistic else None,
            module=read_module,
            module_every_s=cfg.module_every_s,
        )
        for snap in snapshots:
            frame.put(topics.COUNTERS, snap.device, snap, snap.ts_ns)
            report = lldp.due(time.monotonic()) if lldp is not None else None
            if report is not None:
                frame.publish(topics.TOPOLOGY, report.source, report, report.ts_ns)
    return stats


def summary(stats: CollectStats, targets: list[NicTarget]) -> str:
    devices = ", ".join(t.ib_dev for t in targets)
    return (
        f"collected {stats.snapshots} snapshots of {devices} in {stats.polls} polls "
        f"({stats.late_polls} late, {sum(stats.problems.values())} reads that lost something)"
    )


def _lldp(cfg: CollectSettings, targets: list[NicTarget], frame: Frame) -> LldpWatch | None:
    """This host's cabling from LLDP, when publishing (a trace has no use for it)."""
    interval = cfg.lldp_interval_s if cfg.lldp_interval_s is not None else LLDP_INTERVAL_S
    if not interval or frame.publisher is None:
        return None
    nics = {t.ib_dev: t.netdev for t in targets if t.netdev}
    socket_path = cfg.lldp_socket or None
    host = cfg.host or socket.gethostname()
    return LldpWatch(host, nics, interval, frame.warn, read=lambda: run_lldpcli(socket_path))
