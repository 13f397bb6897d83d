"""Poll this host's RDMA NICs on a fixed schedule and hand each snapshot to a sink.

Timestamps are taken when each device is read (docs/architecture.md: the collector's clock at read time); the
schedule is kept on the monotonic clock so that a slow read delays one poll, not all the following
ones. The netdev of each RDMA device comes from sysfs (``device/net/``) unless given.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from fabricwatch.ingest.host_collector import EthtoolError, collect_nic, run_ethtool
from fabricwatch.schemas.messages import Snapshot


@dataclass
class NicTarget:
    ib_dev: str
    netdev: str | None


def discover(sysfs_root: Path, wanted: list[str] | None = None) -> list[NicTarget]:
    """RDMA devices under ``<sysfs_root>/class/infiniband`` with the netdev each one drives."""
    base = Path(sysfs_root) / "class" / "infiniband"
    if not base.is_dir():
        raise ValueError(f"{base}: no RDMA devices on this host (is the rdma driver loaded?)")
    names = sorted(p.name for p in base.iterdir())
    missing = sorted(set(wanted or []) - set(names))
    if missing:
        raise ValueError(f"no RDMA device {', '.join(missing)} under {base}; found: {', '.join(names)}")
    return [NicTarget(n, _netdev_of(base / n)) for n in (wanted or names)]


def _netdev_of(dev_dir: Path) -> str | None:
    net = dev_dir / "device" / "net"
    found = sorted(p.name for p in net.iterdir()) if net.is_dir() else []
    return found[0] if found else None


def poll(
    sysfs_root: Path,
    targets: list[NicTarget],
    interval_s: float,
    count: int | None,
    host: str | None = None,
    ethtool: Callable[[str], str] | None = run_ethtool,
    warn: Callable[[str], None] = print,
) -> Iterator[Snapshot]:
    """Yield one snapshot per device per poll, ``count`` polls (forever when None).

    A device whose ethtool fails is still read from sysfs, and the failure is reported once: PFC
    counters missing is worth a warning, not a blind spot on ECN and CNP too.
    """
    next_at = time.monotonic()
    failed_ethtool: set[str] = set()
    n = 0
    while count is None or n < count:
        for t in targets:
            text = None
            if ethtool is not None and t.netdev and t.netdev not in failed_ethtool:
                try:
                    text = ethtool(t.netdev)
                except EthtoolError as exc:
                    failed_ethtool.add(t.netdev)
                    warn(f"{t.ib_dev}: {exc}; continuing with sysfs counters only")
            netdev = t.netdev if text is not None else None  # collect_nic would run ethtool itself
            yield collect_nic(sysfs_root, t.ib_dev, netdev, text, time.time_ns(), host=host)
        n += 1
        next_at += interval_s
        time.sleep(max(0.0, next_at - time.monotonic()))
