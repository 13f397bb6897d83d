"""What the host collector costs a node: CPU per poll for 8 NICs, and how late its polls land.

The sysfs side is 8 copies of the procfs project's real mlx5_0 tree (tests/fixtures); the ethtool
side reads a real interface of this machine (``--netdev``, default the first one with ethtool
statistics) 8 times per poll, once per NIC, through the ``SIOCETHTOOL`` ioctl and, as the
baseline, by forking ``ethtool -S``. CPU counts this process and its children. Jitter is how long
after each wall-clock boundary the first NIC was read, at 100 ms polling. Prints JSON lines.

    python bench/bench_collector.py [--polls 50] [--netdev eth0]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import tempfile
from pathlib import Path

import numpy as np

from fabricwatch.ingest.nic.device import EthtoolError, ethtool_command
from fabricwatch.ingest.nic.ethtool_ioctl import EthtoolIoctl
from fabricwatch.ingest.nic.poll import NicTarget, poll

ROOT = Path(__file__).resolve().parent.parent
NICS = 8


def fixture_tree(dest: Path) -> Path:
    """/sys with mlx5_0 .. mlx5_7, each a copy of the real fixture device."""
    from fabricwatch.ingest.simulator.ttar import extract_ttar

    extract_ttar(
        ROOT / "tests" / "fixtures" / "sysfs_infiniband_mlx5_0_counters_hw_counters_procfs_fixture.ttar", dest
    )
    sysfs = dest / "fixtures" / "sys"
    base = sysfs / "class" / "infiniband"
    for i in range(1, NICS):
        shutil.copytree(base / "mlx5_0", base / f"mlx5_{i}", symlinks=True)
    return sysfs


def cpu_s() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def first_netdev() -> str:
    reader = EthtoolIoctl()
    for name in sorted(os.listdir("/sys/class/net")):
        try:
            reader.read(name)
            return name
        except EthtoolError:
            continue
    raise SystemExit("no interface here has ethtool statistics; give --netdev")


def measure(sysfs: Path, netdev: str, reader: object, polls: int, interval_s: float) -> dict:
    targets = [NicTarget(f"mlx5_{i}", netdev, "mlx5") for i in range(NICS)]
    lateness_ms: list[float] = []
    start = cpu_s()
    got = 0
    for n, snap in enumerate(
        poll(sysfs, targets, interval_s, polls, host="bench", ethtool=reader, warn=lambda _: None)
    ):
        got += 1
        if n % NICS == 0:
            lateness_ms.append((snap.ts_ns / 1e9 % interval_s) * 1000)
    cpu = cpu_s() - start
    late = np.array(lateness_ms)
    return {
        "snapshots": got,
        "cpu_ms_per_poll": round(cpu / polls * 1000, 3),
        "cpu_ms_per_nic_per_poll": round(cpu / polls / NICS * 1000, 3),
        "lateness_ms_p50": round(float(np.percentile(late, 50)), 2),
        "lateness_ms_p99": round(float(np.percentile(late, 99)), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--polls", type=int, default=50)
    ap.add_argument("--netdev", default=None)
    args = ap.parse_args()
    netdev = args.netdev or first_netdev()
    with tempfile.TemporaryDirectory() as tmp, EthtoolIoctl() as ioctl:
        sysfs = fixture_tree(Path(tmp))
        results = {
            "ioctl": measure(sysfs, netdev, ioctl.read, args.polls, 0.1),
            "ethtool_fork": measure(sysfs, netdev, ethtool_command, args.polls, 0.1),
            "sysfs_only": measure(sysfs, netdev, None, args.polls, 0.1),
        }
    base = results["ethtool_fork"]["cpu_ms_per_poll"]
    for path, row in results.items():
        row |= {"bench": "collector", "path": path, "nics": NICS, "netdev": netdev, "interval_s": 0.1}
        row["cpu_vs_ethtool_fork"] = round(row["cpu_ms_per_poll"] / base, 3)
        print(json.dumps(row))


if __name__ == "__main__":
    main()
