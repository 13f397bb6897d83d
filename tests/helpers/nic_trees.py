"""Sysfs trees of the RoCE NIC families the host collector maps, laid out as the kernel does: the
RDMA device, its driver (for an auxiliary RDMA device such as irdma's, the PCI function's driver
under it), hw_counters and IB port counters; and each family's `ethtool -S` names.

The names are the drivers' own, from the sources vendor_map.csv cites (irdma verbs.c,
ice_ethtool.c, i40e_ethtool.c, ionic_stats.c, mlx4 en_ethtool.c); the values are invented, since
no real output of these families was at hand (tests/fixtures/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

from fabricwatch.ingest.nic.parsers import parse_ethtool_stats

FAMILIES = {
    # vendor: (RDMA device, its driver, the PCI function's driver or None, hw_counters, ethtool)
    "irdma": (
        "rocep24s0f0",
        "irdma",
        "ice",
        {"cnpHandled": 40, "cnpSent": 30, "RxECNMrkd": 500, "Rcvd Out of order packets": 7, "RTO": 1},
        {"tx_bytes.nic": 4_000_000, "rx_bytes.nic": 3_000_000, "rx_priority_3_xoff.nic": 12},
    ),
    "x722": (
        "iwp26s0f0",
        "irdma",
        "i40e",
        {"cnpHandled": 0},
        {"port.tx_bytes": 1_000_000, "port.rx_priority_3_xoff_rx": 5, "port.rx_crc_errors": 2},
    ),
    "ionic": (
        "ionic_0",
        "ionic_rdma",
        "ionic",
        {},
        {"octets_tx_ok": 8_000_000, "rx_pripause_3_1us_count": 250_000, "frames_rx_bad_fcs": 3},
    ),
    "mlx4": ("mlx4_0", "mlx4_core", None, {}, {"tx_bytes": 2_000_000, "rx_pause_prio_3": 9}),
    "ib": ("hfi1_0", "hfi1", None, {}, {}),
}


def lay_out(sysfs: Path, vendor: str, scale: int) -> str:
    """The family's device under ``sysfs`` with every counter at ``scale`` times its value;
    returns the device name."""
    name, driver, parent_driver, hw, _ = FAMILIES[vendor]
    drivers = sysfs / "bus" / "drivers"
    pci = sysfs / "devices" / "pci0000:00" / f"pci-function-of-{name}"
    pci.mkdir(parents=True, exist_ok=True)
    device = pci
    if parent_driver is not None:
        device = pci / f"{parent_driver}.rdma.0"
        device.mkdir(exist_ok=True)
        link(pci / "driver", drivers / parent_driver)
    link(device / "driver", drivers / driver)
    dev = sysfs / "class" / "infiniband" / name
    port = dev / "ports" / "1"
    (port / "counters").mkdir(parents=True, exist_ok=True)
    (port / "hw_counters").mkdir(exist_ok=True)
    link(dev / "device", device)
    (port / "counters" / "port_xmit_data").write_text(f"{1000 * scale}\n")
    for counter, value in hw.items():
        (port / "hw_counters" / counter).write_text(f"{value * scale}\n")
    return name


def link(link: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(target)


def ethtool_output(vendor: str, scale: int) -> dict[str, int] | None:
    """The netdev's statistics as `ethtool -S` prints them, parsed (None: no netdev, as on IB)."""
    lines = [f"     {counter}: {value * scale}" for counter, value in FAMILIES[vendor][4].items()]
    return parse_ethtool_stats("NIC statistics:\n" + "\n".join(lines) + "\n").values if lines else None
