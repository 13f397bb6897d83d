"""Each RoCE NIC family the host collector maps (``nic_trees.py`` lays them out): the vendor comes
from the driver, and two polls give rates equal to the counters' deltas."""

from __future__ import annotations

import pytest
from helpers.nic_trees import FAMILIES, ethtool_output, lay_out, link

from fabricwatch.detectors.rates import RateEngine
from fabricwatch.ingest.nic.device import collect_nic, detect_vendor

S = 10**9
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
    link(dev / "device", tmp_path / "devices" / "hns")
    link(dev / "device" / "driver", tmp_path / "bus" / "drivers" / "hns_roce_hw_v2")
    with pytest.raises(
        ValueError, match=r"hns_0: no counter map for its driver \(hns_roce_hw_v2\).*mlx5, bnxt, irdma"
    ):
        detect_vendor(dev)
