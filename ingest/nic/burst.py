"""Burst capture: a network interface's byte and packet counters sampled every 100 µs to a few ms
for a bounded window, and the profile of that window per millisecond.

A poll every second averages a 2 ms burst at line rate into 0.2 % of it; the queue's watermark
says a burst happened (``detectors/microbursts.py``), not how it looked. Sampled every millisecond
for a few seconds, the same counters show each burst: its peak rate, how long the link ran near
line rate, how many bursts there were. The interface's ``statistics/`` files are opened once and
read with ``pread`` (one system call per counter and sample, as ``sysfs.py`` reads a port's); the
loop sleeps to each sample's due time and spins its last ``SPIN_S``, so a sample is late by a few
microseconds, and its own time, not its due time, is what the profile divides by. A capture is
bounded by its sample count and its wall time, whichever ends first.

Profile: the cumulative counters are interpolated at every ``bin_s`` boundary (1 ms), so each bin
holds the bytes of that millisecond whatever the sample period; per direction, the peak and 99th
percentile rate of a millisecond, the time at 90 % of line rate or more, and the bursts (runs of
milliseconds at half of line rate or more: count and longest).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fabricwatch.schemas.burst_profile import BurstProfile, DirectionProfile
from fabricwatch.schemas.messages import Anomaly

COUNTERS = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets")
RDMA_COUNTERS = ("np_ecn_marked_roce_packets", "np_cnp_sent")
"""Read as well where the interface is an RDMA NIC's (mlx5's ``hw_counters``, the same pread): the
ECN-marked RoCE packets it received and the CNPs it sent back, the congestion its bursts met. The
kernel caches them for the port's ``hw_counters/lifespan`` (10 ms by default; each refresh is a few
firmware commands), so their per-millisecond view is only as fine as that, which the profile says."""
SPIN_S = 200e-6
"""The last stretch before a sample's due time is spun, not slept: a sleep overshoots by 50-100 µs."""
MIN_PERIOD_S = 50e-6
MAX_SECONDS = 60.0
HOT_SHARE = 0.9
BURST_SHARE = 0.5


class CaptureError(ValueError):
    """An interface that cannot be captured (no such interface, no statistics); names it."""


@dataclass(frozen=True)
class Capture:
    """One interface's samples: ``t_ns`` since the first (taken at ``origin_ns`` of the monotonic
    clock, ``wall_start_ns`` of the wall clock), and per sample the ``COUNTERS``."""

    netdev: str
    wall_start_ns: int
    origin_ns: int
    t_ns: np.ndarray
    values: np.ndarray
    """Per sample ``COUNTERS``, then ``RDMA_COUNTERS`` where ``rdma``."""
    rdma: bool = False
    rdma_refresh_s: float | None = None
    """How often the kernel refreshed the ``RDMA_COUNTERS`` (their ``lifespan``; None: not said)."""
    unread: int = 0
    """Samples dropped because a counter could not be read or parsed (a device going away, a file
    caught mid-write): each costs only itself, the profile interpolates across it."""


def capture(
    netdev: str,
    period_s: float,
    seconds: float,
    sys_class_net: Path = Path("/sys/class/net"),
    clock: Callable[[], int] = time.perf_counter_ns,
) -> Capture:
    """Sample ``netdev``'s ``COUNTERS`` every ``period_s`` for ``seconds``."""
    if not MIN_PERIOD_S <= period_s <= 1.0:
        raise CaptureError(f"period {period_s:g} s: must be {MIN_PERIOD_S * 1e6:g} µs to 1 s")
    if not period_s < seconds <= MAX_SECONDS:
        raise CaptureError(f"seconds {seconds:g}: must be above the period and at most {MAX_SECONDS:g}")
    fds = _open(sys_class_net / netdev / "statistics", netdev, COUNTERS)
    hw = _rdma_port(sys_class_net / netdev)
    if hw is not None:
        fds += _open(hw, netdev, RDMA_COUNTERS)
    n = int(seconds / period_s) + 1
    t_ns = np.zeros(n, dtype=np.int64)
    values = np.zeros((n, len(fds)), dtype=np.uint64)
    period_ns, spin_ns = round(period_s * 1e9), round(SPIN_S * 1e9)
    wall = time.time_ns()
    try:
        start = clock()
        end = start + round(seconds * 1e9)
        taken = unread = 0
        for i in range(n):
            due = start + i * period_ns
            now = clock()
            if due - now > spin_ns:
                time.sleep((due - now - spin_ns) / 1e9)
            while clock() < due:
                pass
            stamp = clock()
            try:
                values[taken] = [int(os.pread(fd, 32, 0)) for fd in fds]
            except (OSError, ValueError):
                unread += 1
            else:
                t_ns[taken] = stamp
                taken += 1
            if stamp >= end:
                break
    finally:
        for fd in fds:
            os.close(fd)
    refresh = None if hw is None else _lifespan_s(hw)
    return Capture(
        netdev,
        wall,
        int(t_ns[0]),
        t_ns[:taken] - t_ns[0],
        values[:taken],
        hw is not None,
        refresh,
        unread,
    )


def profile(cap: Capture, line_Bps: float, period_s: float, bin_s: float = 1e-3) -> BurstProfile:
    """The capture per ``bin_s``: rates of each bin from the counters interpolated at its edges."""
    t = cap.t_ns / 1e9
    if len(t) < 2:
        raise CaptureError(f"{cap.netdev}: fewer than two samples")
    edges = np.arange(0.0, t[-1] + bin_s / 2, bin_s)
    cumulative = cap.values.astype(np.float64) - cap.values[0].astype(np.float64)
    at = np.column_stack([np.interp(edges, t, cumulative[:, k]) for k in range(cumulative.shape[1])])
    per_bin = np.diff(at, axis=0) / bin_s
    col = {name: k for k, name in enumerate(COUNTERS + (RDMA_COUNTERS if cap.rdma else ()))}
    congestion = {}
    if cap.rdma:
        marked = col["np_ecn_marked_roce_packets"]
        congestion = {
            "ecn_marked_packets": int(cumulative[-1, marked]),
            "cnp_sent": int(cumulative[-1, col["np_cnp_sent"]]),
            "ecn_per_bin_pps": [round(float(r), 1) for r in per_bin[:, marked]],
            "ecn_refresh_s": cap.rdma_refresh_s,
        }
    return BurstProfile(
        netdev=cap.netdev,
        start_ns=cap.wall_start_ns,
        seconds=float(t[-1]),
        period_s=period_s,
        achieved_period_s=float(np.median(np.diff(t))),
        samples=len(t),
        bin_s=bin_s,
        line_Bps=line_Bps,
        rx=_direction(per_bin[:, col["rx_bytes"]], line_Bps, bin_s),
        tx=_direction(per_bin[:, col["tx_bytes"]], line_Bps, bin_s),
        rx_packets=int(cumulative[-1, col["rx_packets"]]),
        tx_packets=int(cumulative[-1, col["tx_packets"]]),
        unread=cap.unread,
        **congestion,
    )


def _direction(rate: np.ndarray, line_Bps: float, bin_s: float) -> DirectionProfile:
    hot = rate >= HOT_SHARE * line_Bps
    runs = _runs(rate >= BURST_SHARE * line_Bps)
    return DirectionProfile(
        peak_Bps=float(rate.max(initial=0.0)),
        p99_Bps=float(np.quantile(rate, 0.99)) if rate.size else 0.0,
        mean_Bps=float(rate.mean()) if rate.size else 0.0,
        hot_s=float(hot.sum() * bin_s),
        bursts=len(runs),
        longest_burst_s=max((b - a for a, b in runs), default=0) * bin_s,
        per_bin_Bps=[round(float(r), 1) for r in rate],
    )


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(start, end) bin indexes, end exclusive, of each run where ``mask`` holds."""
    padded = np.concatenate([[False], mask, [False]]).astype(np.int8)
    change = np.flatnonzero(np.diff(padded))
    return list(zip(change[0::2].tolist(), change[1::2].tolist(), strict=True))


def _rdma_port(interface: Path) -> Path | None:
    """The ``hw_counters`` of the RDMA port behind a network interface (``device/infiniband/<dev>/
    ports/<n>``), None for an interface that has none (a veth, a NIC without RDMA)."""
    for hw in sorted((interface / "device" / "infiniband").glob("*/ports/*/hw_counters")):
        if all((hw / name).is_file() for name in RDMA_COUNTERS):
            return hw
    return None


def _lifespan_s(hw: Path) -> float | None:
    """The port's ``hw_counters/lifespan`` in seconds (the kernel's cache of those counters)."""
    try:
        return int((hw / "lifespan").read_text()) / 1000
    except (OSError, ValueError):
        return None


def _open(statistics: Path, netdev: str, names: tuple[str, ...]) -> list[int]:
    fds: list[int] = []
    try:
        fds.extend(os.open(statistics / name, os.O_RDONLY | os.O_CLOEXEC) for name in names)
    except OSError as exc:
        for fd in fds:
            os.close(fd)
        raise CaptureError(f"{netdev}: cannot read {statistics}: {exc.strerror}") from None
    return fds


@dataclass
class IncidentTrigger:
    """Which incidents start a capture on this host (``fabricwatch collect burst --on-incident``):
    one that fires naming the host, at most one every ``cooldown_s``, so that a fabric with many
    incidents costs the host a core for a few seconds now and then, never all the time."""

    host: str
    cooldown_s: float = 300.0
    _last_s: float = float("-inf")

    def wants(self, anomaly: Anomaly, now_s: float) -> bool:
        if anomaly.status != "firing" or self.host not in anomaly.hosts:
            return False
        if now_s - self._last_s < self.cooldown_s:
            return False
        self._last_s = now_s
        return True
