"""Each RoCE NIC family the host collector maps, as sysfs lays it out: the RDMA device, its driver
(for an auxiliary RDMA device such as irdma's, the PCI function's driver under it), hw_counters
and IB port counters, and the netdev's `ethtool -S` names. The vendor comes from the driver, and
two polls give rates equal to the counters' deltas.

The counter names are the drivers' own, from the sources vendor_map.csv cites (irdma verbs.c,
ice_ethtool.c, i40e_ethtool.c, ionic_stats.c, mlx4 en_ethtool.c); the values are invented, since
no real output of these families was at hand (tests/fixtures/SOURCES.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fabricwatch.detectors.rates import RateEngine
from fabricwatch.ingest.host_collector import collect_nic, detect_vendor
from fabricwatch.ingest.parsers import parse_ethtool_stats

S = 10**9
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
EXPECTED = {
    "irdma": {
        ("cnp_received", None): 40,
        ("cnp_sent", None): 30,
        ("rx_ecn_marked_packets", None): 500,
        ("out_of_sequence", None): 7,
        ("local_ack_timeout_err", None): 1,
        ("tx_bytes", None): 4_000_000,
        ("rx_bytes", None): 3_000_000,
        ("rx_pfc_frames", 3): 12,
    },
    "x722": {("tx_bytes", None): 1_000_000, ("rx_pfc_frames", 3): 5, ("rx_crc_errors", None): 2},
    "ionic": {("tx_bytes", None): 8_000_000, ("rx_pfc_duration_us", 3): 250_000, ("rx_crc_errors", None): 3},
    "mlx4": {("tx_bytes", None): 2_000_000, ("rx_pfc_frames", 3): 9},
    "ib": {("tx_bytes", None): 4 * 1000},
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
        _link(pci / "driver", drivers / parent_driver)
    _link(device / "driver", drivers / driver)
    dev = sysfs / "class" / "infiniband" / name
    port = dev / "ports" / "1"
    (port / "counters").mkdir(parents=True, exist_ok=True)
    (port / "hw_counters").mkdir(exist_ok=True)
    _link(dev / "device", device)
    (port / "counters" / "port_xmit_data").write_text(f"{1000 * scale}\n")
    for counter, value in hw.items():
        (port / "hw_counters" / counter).write_text(f"{value * scale}\n")
    return name


def _link(link: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(target)


def ethtool_output(vendor: str, scale: int) -> dict[str, int] | None:
    """The netdev's statistics as `ethtool -S` prints them, parsed (None: no netdev, as on IB)."""
    lines = [f"     {counter}: {value * scale}" for counter, value in FAMILIES[vendor][4].items()]
    return parse_ethtool_stats("NIC statistics:\n" + "\n".join(lines) + "\n").values if lines else None


@pytest.mark.parametrize("vendor", sorted(FAMILIES))
def test_each_family_is_told_by_its_driver_and_its_rates_equal_the_deltas(tmp_path, vendor):
    name = lay_out(tmp_path, vendor, 1)
    dev_dir = tmp_path / "class" / "infiniband" / name
    assert detect_vendor(dev_dir) == vendor
    engine = RateEngine()
    first = collect_nic(tmp_path, name, None, ethtool_output(vendor, 1), S, host="h1")
    assert engine.update(first) is None
    lay_out(tmp_path, vendor, 3)
    frame = engine.update(collect_nic(tmp_path, name, None, ethtool_output(vendor, 3), 3 * S, host="h1"))
    assert frame is not None and frame.dt_s == 2.0
    for (counter, index), value in EXPECTED[vendor].items():
        # each counter grew by twice its value in 2 s
        assert frame.values[0, frame.layout.col(counter, index)] == pytest.approx(value), counter


def test_a_driver_with_no_map_is_named_and_the_vendors_are_listed(tmp_path):
    dev = tmp_path / "class" / "infiniband" / "hns_0"
    dev.mkdir(parents=True)
    _link(dev / "device", tmp_path / "devices" / "hns")
    _link(dev / "device" / "driver", tmp_path / "bus" / "drivers" / "hns_roce_hw_v2")
    with pytest.raises(
        ValueError, match=r"hns_0: no counter map for its driver \(hns_roce_hw_v2\).*mlx5, bnxt, irdma"
    ):
        detect_vendor(dev)
