"""Read one RDMA NIC of a Linux host into a snapshot: IB sysfs counters, hw_counters and ethtool -S.

A RoCE NIC reports the same traffic several ways (ethtool's physical-port counters, the RDMA queue
and congestion counters in hw_counters, the IB PMA counters in sysfs) and each source alone misses
something: PFC and pause counters exist only in ethtool, CNP and ECN counters only in hw_counters,
and an InfiniBand port has no netdev at all. So one snapshot combines them, with a fixed precedence
per column (see ``nic_vendors.csv``).
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from pathlib import Path

from fabricwatch.ingest.mapping import build_combined_snapshot
from fabricwatch.ingest.nic.parsers import (
    EthtoolStats,
    RdmaStatistic,
    parse_ethtool_stats,
    parse_rdma_statistic,
    read_port_link,
    read_sysfs_port,
)
from fabricwatch.ingest.nic.vendors import nic_vendors, vendor_by_driver, vendor_by_name, vendor_names
from fabricwatch.ingest.tools import run_tool
from fabricwatch.schemas.messages import Snapshot

ETHTOOL_TIMEOUT_S = 5.0
MODULE_SOURCE = "ethtool_module"

_BY_PARENT = {"irdma", "i40iw"}
"""Drivers that serve two NIC families: the PCI function's driver (ice or i40e) tells which."""


class EthtoolError(RuntimeError):
    """ethtool is missing or failed; the text says what to do."""


def run_ethtool(netdev: str) -> str:
    """``ethtool -S <netdev>`` output; raises EthtoolError when ethtool is absent or fails. Bytes
    that are not UTF-8 become U+FFFD, which the parser reports with their line."""
    return run_tool(
        ["ethtool", "-S", netdev],
        f"ethtool -S {netdev}",
        ETHTOOL_TIMEOUT_S,
        "ethtool is not installed or not on PATH; install it (apt install ethtool / dnf install ethtool)"
        " to read the NIC's PFC and pause counters, or collect without a netdev",
        EthtoolError,
    )


def ethtool_command(netdev: str) -> EthtoolStats:
    """The statistics of ``netdev`` from the ``ethtool`` binary: the fallback to ``EthtoolIoctl``."""
    return parse_ethtool_stats(run_ethtool(netdev))


def rdma_statistic_command() -> RdmaStatistic:
    """Every RDMA link's hw counters from ``rdma -j statistic show`` (iproute2, over RDMA netlink):
    one fork per poll for the whole host. It has what sysfs has, plus the optional counters and
    the devices of a container that sees RDMA netlink but no ``/sys/class/infiniband`` hw_counters."""
    return parse_rdma_statistic(
        run_tool(
            ["rdma", "-j", "statistic", "show"],
            "rdma statistic show",
            ETHTOOL_TIMEOUT_S,
            "rdma (iproute2) is not installed or not on PATH; install iproute2, or collect without "
            "--rdma-statistic",
            EthtoolError,
        )
    )


def collect_nic(
    sysfs_root: Path,
    ib_dev: str,
    netdev: str | None,
    ethtool: dict[str, int] | None,
    ts_ns: int,
    *,
    host: str | None = None,
    vendor: str | None = None,
    read_port: Callable[[Path], tuple[dict[str, int], dict[str, int]]] = read_sysfs_port,
    netlink: Mapping[str, dict[str, int]] | None = None,
    module: Mapping[str, int] | None = None,
) -> Snapshot:
    """Snapshot of one RDMA device: device id ``<host>/<ib_dev>``, one row per IB port number.

    ``sysfs_root`` is the sysfs mount (``/sys``). ``ethtool`` is the device's parsed ``ethtool
    -S`` (or None): its counters belong to the port whose default GID is on ``netdev`` (or to the
    only port). ``vendor`` (a key of ``nic_vendors.csv``) decides how hw_counters and ethtool names
    are read; by default it comes from the device's driver. ``read_port`` reads one port's
    ``counters/`` and ``hw_counters/`` (a collector passes ``SysfsPorts.read``, files kept open).
    ``netlink`` is each port's hw counters as ``rdma statistic`` reads them (port number -> name ->
    value): they fill in what the port's sysfs hw_counters lack, and sysfs wins where both have one.
    ``module`` is the netdev's transceiver diagnostics as gauges (``optics.optic_gauges``), on the
    same port as its ethtool counters.
    """
    dev_dir = Path(sysfs_root) / "class" / "infiniband" / ib_dev
    ports_dir = dev_dir / "ports"
    if not ports_dir.is_dir():
        raise ValueError(f"{dev_dir}: no such RDMA device (no ports/ directory)")
    hw_source, eth_source, ib_source = _sources(vendor or detect_vendor(dev_dir))
    port_names = sorted((p.name for p in ports_dir.iterdir() if p.name.isdigit()), key=int)
    per_port: dict[str, dict[str, dict[str, int]]] = {}
    for port in port_names:
        counters, hw_counters = read_port(ports_dir / port)
        counters = counters | read_port_link(ports_dir / port)
        if netlink and port in netlink:
            hw_counters = netlink[port] | hw_counters
        per_port[port] = {ib_source: counters} | ({hw_source: hw_counters} if hw_source else {})
    if ethtool is not None and eth_source is not None:
        per_port[_netdev_port(ports_dir, port_names, netdev)][eth_source] = ethtool
    if module:
        per_port[_netdev_port(ports_dir, port_names, netdev)][MODULE_SOURCE] = dict(module)
    device = f"{host or socket.gethostname()}/{ib_dev}"
    sources = [s for s in (hw_source, eth_source, ib_source) if s is not None]
    if module:
        sources.append(MODULE_SOURCE)
    return build_combined_snapshot(device, "nic", ts_ns, sources, per_port)


def _sources(vendor: str) -> tuple[str | None, str | None, str]:
    if vendor not in nic_vendors():
        raise ValueError(f"unknown NIC vendor {vendor!r}; known: {vendor_names()}")
    return nic_vendors()[vendor].sources


def detect_vendor(dev_dir: Path) -> str:
    """A key of ``nic_vendors.csv`` from the device's kernel driver (for irdma and i40iw, from the PCI
    function's under it: ice or i40e), else from its name (mlx5_0, bnxt_re0, mlx4_0, hfi1_0)."""
    driver = dev_dir / "device" / "driver"
    name = driver.resolve().name if driver.exists() else None
    if name in _BY_PARENT:
        parent = dev_dir / "device" / ".." / "driver"
        name = parent.resolve().name if parent.exists() else name
    vendor = (vendor_by_driver(name) if name is not None else None) or vendor_by_name(dev_dir.name)
    if vendor is not None:
        return vendor
    driver_name = driver.resolve().name if driver.exists() else "unknown"
    raise ValueError(
        f"{dev_dir.name}: no counter map for its driver ({driver_name}); name one with "
        f"--vendor {dev_dir.name}=VENDOR, VENDOR one of {vendor_names()} "
        "(ib: the standard InfiniBand port counters only)"
    )


def _netdev_port(ports_dir: Path, port_names: list[str], netdev: str | None) -> str:
    """The IB port whose default GID (gid_attrs/ndevs/0) sits on ``netdev``; else the only port."""
    if netdev is not None:
        for port in port_names:
            ndev = ports_dir / port / "gid_attrs" / "ndevs" / "0"
            if _read_text(ndev) == netdev:
                return port
    if len(port_names) == 1:
        return port_names[0]
    raise ValueError(
        f"{ports_dir.parent.name}: cannot tell which of ports {port_names} carries netdev {netdev!r}"
    )


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
