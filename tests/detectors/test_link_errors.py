"""Links that damage frames (issue 34, 1): one incident per link, at the part most likely to fail,
within its bound; bursts, resets and wraps of the error counters stay quiet."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from helpers import small_fabric
from helpers.paths import FIXTURES

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.link_errors import SIGNALS, LinkErrors, LinkErrorsConfig
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.detectors.rates import Layout, RateFrame
from fabricwatch.detectors.spec import Poll
from fabricwatch.ingest.mapping import map_counters
from fabricwatch.ingest.nic.parsers import parse_ethtool_stats
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Anomaly, CounterSpec, Snapshot, encode

NS = 1_000_000_000
T0 = 1_767_225_600 * NS


def replayed(tmp_path: Path, faults: str, duration: int = 120, collector: str = "") -> list[Anomaly]:
    events = small_fabric.replayed(tmp_path, "link_corruption", faults, 11, duration, collector)
    return [a for a in events if a.kind == "link_corruption"]


def after(a: Anomaly, start_s: float) -> float:
    return (a.ts_ns - T0) / NS - start_s


def test_a_cable_losing_one_frame_in_a_million_is_one_incident_at_its_nic_within_three_polls(tmp_path):
    events = replayed(
        tmp_path, "  - {kind: lossy_link, device: h003, loss_rate: 0.000001, start: 30.3, duration: 40}"
    )
    # One incident; its updates are the NICs whose resends join it as they start (its echo).
    assert {(a.root.device, a.root.port) for a in events} == {("h003/mlx5_0", "1")}
    statuses = [a.status for a in events]
    assert statuses[0] == "firing" and statuses[-1] == "resolved" and set(statuses[1:-1]) <= {"updated"}
    assert all("retransmit" in a.summary for a in events[1:-1])
    firing = events[0]
    assert after(firing, 30.3) <= 3.0  # the bound: within 3 polls at 1e-6 of frames
    assert firing.severity == "warning" and firing.evidence["ends"] == "both"
    assert "h003/mlx5_0 1 and leaf00" in firing.summary and "the cable between them" in firing.summary
    assert "h003" in firing.hosts and firing.jobs == ["dp"]
    assert {"h003/mlx5_0", "leaf00"} <= set(firing.devices)


def test_errors_at_one_end_only_are_rooted_at_the_far_end_that_sends_them(tmp_path):
    events = replayed(
        tmp_path,
        "  - {kind: lossy_link, device: h003, loss_rate: 0.001, one_way: true, start: 30.3, duration: 40}",
    )
    firing = [a for a in events if a.status == "firing"]
    assert len(firing) == 1
    (a,) = firing
    assert a.root.device == "leaf00" and a.root.port.startswith("Ethernet")  # the leaf port facing h003
    assert a.severity == "critical"  # 1e-3 of frames: past critical_ratio (1e-4)
    assert a.evidence["ends"] == "one" and f"optic at leaf00 {a.root.port}" in a.summary
    assert a.hint.startswith(f"Replace or reseat the optic at leaf00 {a.root.port}")


def test_a_burst_of_errors_a_reseat_a_driver_reload_and_a_wrap_stay_quiet(tmp_path):
    """One poll with errors is not a failing part; counters that reset (a driver reload) or wrap
    (32-bit counters started near the top) must not read as errors."""
    faults = (
        "  - {kind: error_burst, device: h005, loss_rate: 0.001, start: 30.4, duration: 0.5}\n"
        "  - {kind: error_burst, device: leaf01, port: Ethernet0, loss_rate: 0.01, start: 60.2,"
        " duration: 0.3}"
    )
    resets = (
        ", counter_start: near_wrap, resets: [{device: h002/mlx5_0, at: 40.5}, {device: leaf00, at: 70.5}]"
    )
    assert replayed(tmp_path, faults, collector=resets) == []


def _frame(ts_ns: int, crc: float, rx: float) -> RateFrame:
    specs = [CounterSpec("rx_packets", "counter", 64), CounterSpec("rx_crc_errors", "counter", 64)]
    values = np.array([[rx, crc], [rx, 0.0]])
    return RateFrame(
        "leaf00", "switch", ts_ns, 1.0, ["Ethernet0", "Ethernet8"], Layout.of(tuple(specs)), values
    )


def test_unknown_error_rates_neither_clear_nor_extend_a_failing_link():
    """Missing data is unknown, never healthy: polls whose error counter is unknown (a reset, a
    stale read) keep the incident open until they last past ``lack_of_data_s``."""
    detector = LinkErrors(LinkErrorsConfig(clear_after_s=5.0, lack_of_data_s=20.0))
    fabric = FabricMap(None)

    def poll(t: int, crc: float) -> list:
        return detector.update(Poll(_frame(T0 + t * NS, crc, 1e6), np.full(2, 5e10), fabric))

    assert poll(1, 10.0) == [] and [s.port for s in poll(2, 10.0)] == ["Ethernet0"]
    for t in range(3, 15):  # 12 s unknown, past clear_after_s: still open, not healed
        said = poll(t, np.nan)
        assert [(s.port, s.active) for s in said] == [("Ethernet0", True)], t
    assert [s.active for s in poll(15, 0.0)] == [True]  # one known quiet second is not clear_after_s
    ended = [s for t in range(16, 40) for s in poll(t, np.nan) if not s.active]
    assert len(ended) == 1 and "no poll could read its error counters" in str(ended[0].evidence["ended"])


STEP = {"rx_packets_phy": 1_000_000, "rx_crc_errors_phy": 386, "rx_symbol_err_phy": 386}
"""One derived second of the real reading's fault (a million frames, its 386 CRC errors)."""


def _mlx5_reading(stats: dict[str, int], ts_ns: int) -> bytes:
    specs, values = map_counters("mlx5_ethtool", stats)
    snap = Snapshot("h001/mlx5_0", "nic", ts_ns, specs, ["1"], [list(values)], source="mlx5_ethtool")
    return encode(snap)


def test_a_real_mlx5_reading_with_crc_errors_read_again_each_second_is_a_critical_link():
    """The first reading is a real ConnectX ``ethtool -S`` (386 CRC and 386 symbol errors in 15 M
    frames since the driver loaded; ``tests/fixtures/SOURCES.md``). The next ones are derived from
    it, labelled so: no second real reading exists. Each adds a second of the same fault, 386 CRC
    errors in a million frames (3.9e-4, past critical_ratio). The collector's names reach the
    detector through the vendor map, and a NIC without a topology is still a link (one end)."""
    real = parse_ethtool_stats((FIXTURES / "ethtool_mlx5_crc_errors_zh_ethtool_notes.txt").read_text()).values
    assert real["rx_crc_errors_phy"] == real["rx_symbol_err_phy"] == 386
    pipeline, events = Pipeline(DetectorConfig()), []
    for second in range(6):
        derived = dict(real)
        for name, step in (
            ("rx_packets_phy", 1_000_000),
            ("rx_crc_errors_phy", 386),
            ("rx_symbol_err_phy", 386),
        ):
            derived[name] = real[name] + second * step
        ts = T0 + second * NS
        events += pipeline.feed(topics.COUNTERS, ts, _mlx5_reading(derived, ts))
    events += pipeline.finish()
    firing = [a for a in events if a.kind == "link_corruption" and a.status == "firing"]
    assert [(a.root.device, a.root.port, a.severity) for a in firing] == [("h001/mlx5_0", "1", "critical")]
    assert firing[0].evidence["symbol_errors_ps"] == 386 and "3.9e-04 of frames" in firing[0].summary


def test_a_sonic_port_hash_gives_the_detector_its_fec_and_error_counters():
    """COUNTERS_DB's Ethernet0 of a Cisco SONiC switch as a gNMI get printed it (source in
    ``tests/fixtures/SOURCES.md``): FEC corrected frames counted, none uncorrectable. It has no
    CRC field, so the detector reads damaged frames from ``SAI_PORT_STAT_IF_IN_ERRORS``."""
    doc = json.loads((FIXTURES / "sonic_counters_db_fec_cisco_sonic_gnmi_post.json").read_text())
    (update,) = doc["notification"][0]["update"]
    specs, values = map_counters("sonic_port", {k: int(v) for k, v in update["val"].items()})
    read = {s.name: v for s, v in zip(specs, values, strict=True)}
    assert read["fec_corrected_blocks"] == 433513349 and read["fec_uncorrectable_blocks"] == 0
    assert read["rx_errors"] == 0 and "rx_packets" in read and "rx_crc_errors" not in read
    assert SIGNALS & read.keys() == {"rx_errors", "fec_uncorrectable_blocks"}


def test_the_polls_that_opened_a_streak_count_in_its_peak_and_severity():
    """Found in review: 1e-3 then 5e-5 of frames opened as a warning, the first poll forgotten."""
    detector = LinkErrors(LinkErrorsConfig())
    fabric = FabricMap(None)
    assert detector.update(Poll(_frame(T0 + NS, 1000.0, 1e6), np.full(2, 5e10), fabric)) == []
    (opened,) = detector.update(Poll(_frame(T0 + 2 * NS, 50.0, 1e6), np.full(2, 5e10), fabric))
    assert opened.evidence["severity"] == "critical" and opened.evidence["peak_error_ratio"] >= 9.9e-4
