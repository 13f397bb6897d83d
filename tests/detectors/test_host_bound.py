"""A NIC held back by its host (issue 34, 6): PCIe stalls poll after poll are one warning at the
NIC with the shortfall it runs at, and not a PFC storm; a NIC slow for another reason (no stall
counted) and one stalled second are not."""

from __future__ import annotations

from pathlib import Path

from helpers import small_fabric
from helpers.paths import FIXTURES

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.ingest.mapping import map_counters
from fabricwatch.ingest.nic.parsers import parse_ethtool_stats
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Anomaly, Snapshot, encode

NS = 1_000_000_000
T0 = 1_767_225_600 * NS


def replayed(tmp_path: Path, faults: str) -> list[Anomaly]:
    return small_fabric.replayed(tmp_path, "host_bound", faults, 9, 120)


def test_a_nic_its_host_drains_at_forty_percent_is_one_warning_with_its_shortfall(tmp_path):
    fault = "  - {kind: pcie_capped_nic, nic: h003, factor: 0.4, start: 30.3, duration: 40}"
    events = replayed(tmp_path, fault)
    assert {a.kind for a in events} == {"nic_host_bound"}  # its short pauses are not a storm
    firing, resolved = events[0], events[-1]
    assert firing.status == "firing" and resolved.status == "resolved"
    assert (firing.root.device, firing.root.port) == ("h003/mlx5_0", "1")
    bound = (DetectorConfig().host_bound.persist_polls + 1) * 1.0
    assert (firing.ts_ns - T0) / NS - 30.3 <= bound
    assert firing.severity == "warning" and "h003" in firing.hosts and firing.jobs == ["dp"]
    assert firing.evidence["line_gbps"] == 400 and firing.evidence["shortfall_gbps"] > 200
    assert "held back by its host" in firing.summary and "pausing its leaf 10% of the time" in firing.summary
    assert "lspci" in firing.hint


def test_a_nic_slow_without_pcie_stalls_is_not_said_to_be_host_bound(tmp_path):
    """The learned outlier model's case (a NIC silently at a quarter of line rate): without a
    stall counted, nothing here names the host."""
    faults = "  - {kind: nic_slowdown, nic: h003, factor: 0.25, start: 30.3, duration: 40}"
    assert [a for a in replayed(tmp_path, faults) if a.kind == "nic_host_bound"] == []


def test_a_real_mlx5_reading_maps_its_pcie_stall_counters_and_a_lone_stalled_second_stays_quiet():
    """The real ConnectX ``ethtool -S`` (``tests/fixtures/SOURCES.md``) counts no stall yet. The
    later readings are derived from it and labelled so: one stalled second, then none, then a
    stall every second; only the run of stalls is a host-bound NIC."""
    real = parse_ethtool_stats((FIXTURES / "ethtool_mlx5_crc_errors_zh_ethtool_notes.txt").read_text()).values
    assert real["outbound_pci_stalled_rd_events"] == real["outbound_pci_stalled_wr_events"] == 0
    pipeline, events, stalls = Pipeline(DetectorConfig()), [], 0
    for second in range(16):
        stalls += second == 2 or second >= 9
        derived = dict(real) | {"outbound_pci_stalled_wr_events": stalls}
        specs, values = map_counters("mlx5_ethtool", derived)
        ts = T0 + second * NS
        snap = Snapshot("h001/mlx5_0", "nic", ts, specs, ["1"], [list(values)], source="mlx5_ethtool")
        events += pipeline.feed(topics.COUNTERS, ts, encode(snap))
    events += pipeline.finish()
    firing = [a for a in events if a.status == "firing"]
    assert [(a.kind, a.root.device) for a in firing] == [("nic_host_bound", "h001/mlx5_0")]
    assert (firing[0].ts_ns - T0) / NS >= 11  # the third stalled second of the run, not the lone one


def test_a_host_bound_nic_whose_traffic_counters_are_unknown_is_still_said():
    """Found in review: a NIC reporting its stall counters but not its bytes (unknown throughput)
    made the description fail. It says the stalls and leaves the throughput out."""
    real = parse_ethtool_stats((FIXTURES / "ethtool_mlx5_crc_errors_zh_ethtool_notes.txt").read_text()).values
    bare = {k: v for k, v in real.items() if "bytes" not in k}
    pipeline, events = Pipeline(DetectorConfig()), []
    for second in range(8):
        specs, values = map_counters("mlx5_ethtool", bare | {"outbound_pci_stalled_rd_events": second})
        ts = T0 + second * NS
        snap = Snapshot("h001/mlx5_0", "nic", ts, specs, ["1"], [list(values)], source="mlx5_ethtool")
        events += pipeline.feed(topics.COUNTERS, ts, encode(snap))
    events += pipeline.finish()
    (firing,) = [a for a in events if a.status == "firing"]
    assert "held back by its host" in firing.summary and "reaches" not in firing.summary
