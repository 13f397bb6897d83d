"""Poll this host's RDMA NICs on a fixed schedule and hand each snapshot to a sink.

Polls are aligned to wall-clock multiples of the interval, so every host of a fabric reads its poll
N at the same instant (give or take clock sync) and the detectors compare like with like.
Timestamps are taken when each device is read (docs/architecture.md: the collector's clock at
read time). A read that overruns the interval skips the polls it overran (counted as late), never
bunches them up.

One device's trouble costs only that device: an ``ethtool -S`` that fails or prints garbage costs
its ethtool counters for that poll (the sysfs counters still go out), a device that cannot be read
at all costs that device's snapshot for that poll, and every later poll tries again. Each kind of
trouble is reported once per device when it starts and once when it ends, and counted throughout.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import msgspec

from fabricwatch.ingest.nic.device import EthtoolError, collect_nic, ethtool_command
from fabricwatch.ingest.nic.parsers import EthtoolStats, RdmaStatistic
from fabricwatch.ingest.nic.sysfs import SysfsPorts
from fabricwatch.ingest.optics import ModuleReading, optic_gauges
from fabricwatch.schemas.messages import Snapshot


class CollectSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The ``collect:`` section of a config file; a command-line option wins over its key."""

    interval_s: float = 1.0
    devices: list[str] = msgspec.field(default_factory=list)
    """RDMA devices to read (default: every one under sysfs)."""
    vendors: dict[str, str] = msgspec.field(default_factory=dict)
    """Device -> counter map, for drivers the collector does not know (``hns_0: ib``)."""
    ethtool: Literal["ioctl", "command", "none"] = "ioctl"
    rdma_statistic: bool = False
    """Also read every link's hw counters with ``rdma -j statistic show`` (one fork per poll)."""
    sysfs_root: str = "/sys"
    host: str = ""
    """Host name in device ids (default: this host's); ``FABRICWATCH_HOST`` overrides it."""
    module_every_s: float = 60.0
    """Seconds between two reads of each port's transceiver diagnostics (``ethtool -m``: an I2C
    read of tens to hundreds of ms); between reads the last one goes out. 0: never read them."""
    lldp_interval_s: float | None = None
    """Seconds between LLDP reads (default: 30 when publishing; 0: none)."""
    lldp_socket: str = ""
    web_bind: str = "127.0.0.1"
    web_port: int | None = None
    """Port of /metrics and /healthz (default: 6068 when publishing; 0: none)."""

    def __post_init__(self) -> None:
        if not 0.1 <= self.interval_s <= 10:
            raise ValueError(f"interval_s {self.interval_s}: must be between 0.1 and 10 seconds")
        if self.module_every_s < 0:
            raise ValueError(f"module_every_s {self.module_every_s}: must be 0 (never) or more seconds")


@dataclass
class NicTarget:
    ib_dev: str
    netdev: str | None
    vendor: str | None = None


@dataclass
class CollectStats:
    polls: int = 0
    snapshots: int = 0
    late_polls: int = 0
    problems: dict[str, int] = field(default_factory=dict)
    """Per device, the reads that lost something (an ethtool output, a line of it, the device)."""


class ProblemLog:
    """Says each kind of trouble of a device once when it begins and once when it ends; counts all."""

    def __init__(self, stats: CollectStats, warn: Callable[[str], None]) -> None:
        self._stats = stats
        self._warn = warn
        self._open: set[tuple[str, str]] = set()

    def failed(self, device: str, kind: str, text: str) -> None:
        self._stats.problems[device] = self._stats.problems.get(device, 0) + 1
        if (device, kind) not in self._open:
            self._open.add((device, kind))
            self._warn(f"{device}: {text} (said once; counted until it clears)")

    def ok(self, device: str, kind: str) -> None:
        if (device, kind) in self._open:
            self._open.discard((device, kind))
            self._warn(f"{device}: {kind} read again")


def discover(
    sysfs_root: Path, wanted: list[str] | None = None, vendors: dict[str, str] | None = None
) -> list[NicTarget]:
    """RDMA devices under ``<sysfs_root>/class/infiniband`` with the netdev each one drives."""
    base = Path(sysfs_root) / "class" / "infiniband"
    if not base.is_dir():
        raise ValueError(f"{base}: no RDMA devices on this host (is the rdma driver loaded?)")
    names = sorted(p.name for p in base.iterdir())
    missing = sorted(set(wanted or []) - set(names))
    if missing:
        raise ValueError(f"no RDMA device {', '.join(missing)} under {base}; found: {', '.join(names)}")
    unknown = sorted(set(vendors or {}) - set(names))
    if unknown:
        raise ValueError(f"--vendor names {', '.join(unknown)}, not under {base}; found: {', '.join(names)}")
    vendors = vendors or {}
    return [NicTarget(n, _netdev_of(base / n), vendors.get(n)) for n in (wanted or names)]


def _netdev_of(dev_dir: Path) -> str | None:
    net = dev_dir / "device" / "net"
    found = sorted(p.name for p in net.iterdir()) if net.is_dir() else []
    return found[0] if found else None


def next_boundary(now_s: float, interval_s: float) -> float:
    """The first wall-clock multiple of ``interval_s`` after ``now_s``."""
    return (math.floor(now_s / interval_s) + 1) * interval_s


def poll_times(
    interval_s: float,
    count: int | None,
    stats: CollectStats,
    stop: threading.Event,
    on_poll: Callable[[float], None] | None = None,
) -> Iterator[float]:
    """The schedule every collector polls on: yields each poll's due time, a wall-clock multiple of
    ``interval_s``, ``count`` times (forever when None) until ``stop`` is set. When the caller's
    poll is done it is counted and its duration goes to ``on_poll``; a poll that overran the next
    boundary skips to the one after (counted as late), never bunching polls up."""
    due = next_boundary(time.time(), interval_s)
    while count is None or stats.polls < count:
        if stop.wait(max(0.0, due - time.time())):
            return
        began = time.monotonic()
        yield due
        stats.polls += 1
        if on_poll is not None:
            on_poll(time.monotonic() - began)
        due += interval_s
        if time.time() > due:
            stats.late_polls += 1
            due = next_boundary(time.time(), interval_s)


def poll(
    sysfs_root: Path,
    targets: list[NicTarget],
    interval_s: float,
    count: int | None,
    *,
    host: str | None = None,
    ethtool: Callable[[str], EthtoolStats] | None = ethtool_command,
    warn: Callable[[str], None] = print,
    stats: CollectStats | None = None,
    stop: threading.Event | None = None,
    on_poll: Callable[[float], None] | None = None,
    rdma_statistic: Callable[[], RdmaStatistic] | None = None,
    module: Callable[[str], ModuleReading] | None = None,
    module_every_s: float = 60.0,
) -> Iterator[Snapshot]:
    """Yield one snapshot per readable device per poll, ``count`` polls (forever when None), until
    ``stop`` is set (checked while waiting for the next poll). ``on_poll`` gets each poll's
    duration in seconds, reads and hand-over of its snapshots included. ``rdma_statistic``, once
    per poll, adds every link's netlink hw counters to what sysfs has. ``module`` reads a netdev's
    transceiver diagnostics, once every ``module_every_s`` per device."""
    stats = stats if stats is not None else CollectStats()
    stop = stop or threading.Event()
    problems = ProblemLog(stats, warn)
    modules = Modules(module, module_every_s, problems)
    with SysfsPorts() as ports:
        for _ in poll_times(interval_s, count, stats, stop, on_poll):
            netlink = _netlink_counters(rdma_statistic, problems) if rdma_statistic is not None else {}
            modules.new_poll()
            for t in targets:
                mine = {str(port): c for (dev, port), c in netlink.items() if dev == t.ib_dev}
                snap = _read(sysfs_root, t, host, ethtool, problems, ports, mine, modules.gauges(t))
                if snap is not None:
                    stats.snapshots += 1
                    yield snap


def _read(
    sysfs_root: Path,
    t: NicTarget,
    host: str | None,
    ethtool: Callable[[str], EthtoolStats] | None,
    problems: ProblemLog,
    ports: SysfsPorts,
    netlink: dict[str, dict[str, int]],
    module: dict[str, int] | None = None,
) -> Snapshot | None:
    ts_ns = time.time_ns()
    counters = _ethtool_counters(t, ethtool, problems) if ethtool is not None and t.netdev else None
    try:
        snap = collect_nic(
            sysfs_root,
            t.ib_dev,
            t.netdev,
            counters,
            ts_ns,
            host=host,
            vendor=t.vendor,
            read_port=ports.read,
            netlink=netlink,
            module=module,
        )
    except (ValueError, OSError) as exc:
        problems.failed(t.ib_dev, "device", f"{exc}; skipped")
        return None
    problems.ok(t.ib_dev, "device")
    return snap


class Modules:
    """Each device's transceiver diagnostics, read once every ``every_s`` and repeated between
    reads (a module refreshes them about once a second; its thresholds never change). At most one
    device's module is read per poll (``new_poll``): an EEPROM read can take a second, and eight
    at once would make the poll late. A failed read costs them until the next one succeeds: said
    once, counted, never a stale value."""

    def __init__(
        self, read: Callable[[str], ModuleReading] | None, every_s: float, problems: ProblemLog
    ) -> None:
        self._read, self._every_s, self._problems = read, every_s, problems
        self._last: dict[str, tuple[float, dict[str, int] | None]] = {}
        self._read_this_poll = False

    def new_poll(self) -> None:
        self._read_this_poll = False

    def gauges(self, t: NicTarget) -> dict[str, int] | None:
        if self._read is None or not self._every_s or not t.netdev:
            return None
        now = time.monotonic()
        last = self._last.get(t.ib_dev)
        if self._read_this_poll or (last is not None and now - last[0] < self._every_s):
            return last[1] if last is not None else None
        self._read_this_poll = True
        try:
            gauges: dict[str, int] | None = optic_gauges(self._read(t.netdev))
        except (EthtoolError, ValueError) as exc:
            self._problems.failed(t.ib_dev, "module", f"ethtool -m {t.netdev}: {exc}; its optics unknown")
            gauges = None
        else:
            self._problems.ok(t.ib_dev, "module")
        self._last[t.ib_dev] = (now, gauges)
        return gauges


RDMA_STATISTIC = "rdma statistic"
"""Where ``rdma statistic`` trouble is counted and said: it is one read for every device."""


def _netlink_counters(
    read: Callable[[], RdmaStatistic], problems: ProblemLog
) -> dict[tuple[str, int], dict[str, int]]:
    """Every link's counters from one ``rdma statistic`` read, or none this poll when it fails."""
    try:
        parsed = read()
    except (EthtoolError, ValueError) as exc:
        problems.failed(RDMA_STATISTIC, "read", f"{exc}; hw_counters from sysfs only")
        return {}
    problems.ok(RDMA_STATISTIC, "read")
    if parsed.problems:
        more = f" (and {len(parsed.problems) - 1} more)" if len(parsed.problems) > 1 else ""
        problems.failed(RDMA_STATISTIC, "lines", f"{parsed.problems[0]}{more}; skipped")
    else:
        problems.ok(RDMA_STATISTIC, "lines")
    return parsed.links


def _ethtool_counters(
    t: NicTarget, ethtool: Callable[[str], EthtoolStats], problems: ProblemLog
) -> dict[str, int] | None:
    """The device's ``ethtool -S`` counters, or None when this poll has none of them."""
    try:
        parsed = ethtool(t.netdev or "")
    except (EthtoolError, ValueError) as exc:
        problems.failed(t.ib_dev, "ethtool", f"ethtool -S {t.netdev}: {exc}; its sysfs counters still go out")
        return None
    problems.ok(t.ib_dev, "ethtool")
    if parsed.problems:
        more = f" (and {len(parsed.problems) - 1} more)" if len(parsed.problems) > 1 else ""
        problems.failed(
            t.ib_dev, "ethtool lines", f"ethtool -S {t.netdev}: {parsed.problems[0]}{more}; skipped"
        )
    else:
        problems.ok(t.ib_dev, "ethtool lines")
    return parsed.values
