"""Degrading links (issue 34, 1): FEC correcting ever more bits before a frame is lost is one
warning per link, at the part most likely to fail; a healthy PAM4 link (whose corrected bits move
every poll) and a link already losing frames are not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from helpers import small_fabric
from helpers.paths import FIXTURES, SCENARIOS

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.link_degrading import LinkDegrading, LinkDegradingConfig
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.detectors.rates import Layout, RateFrame
from fabricwatch.detectors.spec import Poll
from fabricwatch.detectors.stage1 import Stage1
from fabricwatch.ingest.mapping import map_counters
from fabricwatch.ingest.nic.parsers import parse_ethtool_stats
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.replay import replay_trace
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Anomaly, CounterSpec, Snapshot, encode

NS = 1_000_000_000
T0 = 1_767_225_600 * NS


def replayed(tmp_path: Path, faults: str, duration: int = 300) -> list[Anomaly]:
    events = small_fabric.replayed(tmp_path, "link_degrading", faults, 5, duration)
    return [a for a in events if a.kind in ("link_degrading", "link_corruption")]


def test_a_link_whose_fec_corrects_ever_more_is_one_warning_at_its_nic_before_a_frame_is_lost(tmp_path):
    events = replayed(
        tmp_path, "  - {kind: degrading_link, device: h003, pre_fec_ber: 0.00005, start: 30.3, duration: 60}"
    )
    assert {(a.kind, a.root.device, a.root.port) for a in events} == {("link_degrading", "h003/mlx5_0", "1")}
    firing = next(a for a in events if a.status == "firing")
    cfg = DetectorConfig().fec_degrading
    assert (firing.ts_ns - T0) / NS - 30.3 <= (cfg.persist_polls + 1) * cfg.every_s + 2
    assert firing.severity == "warning" and firing.evidence["ends"] == "both"
    assert 4e-5 < firing.evidence["peak_pre_fec_ber"] < 6e-5 and firing.evidence["fec_margin"] < 10
    assert "no frame lost yet" in firing.summary and "h003/mlx5_0 1 and leaf00" in firing.summary
    assert firing.hint.startswith("No frame is lost yet") and firing.jobs == ["dp"]
    (resolved,) = [a for a in events if a.status == "resolved"]  # 2 min of healthy checks after it
    assert 90.3 + DetectorConfig().fec_degrading.clear_after_s <= (resolved.ts_ns - T0) / NS <= 300


def test_one_end_degrading_is_rooted_at_the_far_transmitter(tmp_path):
    events = replayed(
        tmp_path,
        "  - {kind: degrading_link, device: h003, pre_fec_ber: 0.00003, one_way: true, start: 30.3,"
        " duration: 60}",
    )
    (firing,) = [a for a in events if a.status == "firing"]
    assert firing.root.device == "leaf00" and firing.evidence["ends"] == "one"
    assert f"optic at leaf00 {firing.root.port}" in firing.summary


def test_healthy_pam4_links_and_a_link_already_losing_frames_are_not_degrading(tmp_path):
    """Every port's FEC corrects a little all the time (the simulator's healthy 1e-9): no warning.
    A link past the FEC limit loses frames: link corruption, not a second incident beside it."""
    events = replayed(
        tmp_path, "  - {kind: lossy_link, device: h005, loss_rate: 0.0001, start: 30.3, duration: 60}"
    )
    assert {a.kind for a in events} == {"link_corruption"}


def _frame(ts_ns: int, corrected_bps: float, fec_lost: float = 0.0) -> RateFrame:
    specs = (
        CounterSpec("fec_corrected_bits", "counter", 64),
        CounterSpec("fec_uncorrectable_blocks", "counter", 64),
        CounterSpec("link_speed_mbps", "gauge", 64),
    )
    values = np.array([[corrected_bps, fec_lost, 400_000], [400.0, 0.0, 400_000]])
    return RateFrame("leaf00", "switch", ts_ns, 1.0, ["Ethernet0", "Ethernet8"], Layout.of(specs), values)


def test_checks_are_paced_and_unknown_checks_neither_clear_nor_extend():
    """Checked once every ``every_s`` of the device's time, whatever the polls show; a check whose
    counter is unknown keeps what was open, and 60 s of them end it for lack of data."""
    detector = LinkDegrading(LinkDegradingConfig(every_s=10.0))
    fabric, line = FabricMap(None), np.full(2, 5e10)  # 400 Gb/s

    def check(t: int, corrected: float) -> list | None:
        if not detector.due("leaf00", T0 + t * NS):
            return None
        return detector.update(Poll(_frame(T0 + t * NS, corrected), line, fabric))

    said = {t: check(t, 8e6) for t in range(0, 31)}  # 2e-5 of 400 Gb/s, every second
    assert [t for t, s in said.items() if s is not None] == [0, 10, 20, 30]
    assert said[0] == said[10] == [] and [s.port for s in said[20]] == ["Ethernet0"]
    assert said[20][0].evidence["pre_fec_ber"] == 2e-5
    # It began after the last check before its first (a check samples one poll): the earliest is said.
    assert said[20][0].start_ns == T0 - 10 * NS
    for t in range(40, 100, 10):
        assert [s.active for s in check(t, np.nan)] == [True], t
    (ended,) = check(100, np.nan)  # more than 60 s unknown: ended, and says why
    assert not ended.active and "no check could read its FEC counters" in str(ended.evidence["ended"])


def test_stage1_gives_a_paced_detector_calm_polls_it_is_due_and_no_others():
    """The batch path skips a calm NIC poll (no congestion or error signal) for every other
    detector, yet a paced detector still sees one such poll every ``every_s``."""
    stage = Stage1(DetectorConfig())
    specs = [
        CounterSpec("tx_bytes", "counter", 64),
        CounterSpec("rx_bytes", "counter", 64),
        CounterSpec("fec_corrected_bits", "counter", 64),
        CounterSpec("link_speed_mbps", "gauge", 64),
    ]
    found = []
    for t in range(0, 45):
        bits = t * 400_000_000 * 2e-5 * 1000  # 2e-5 of 400 Gb/s, cumulative
        snap = Snapshot(
            "h001/mlx5_0", "nic", T0 + t * NS, specs, ["1"], [[t * 10**9, t * 10**9, int(bits), 400_000]]
        )
        ((_, symptoms),) = stage.process_batch([snap])
        found += [(t, s.kind) for s in symptoms]
    assert found and {k for _, k in found} == {"fec_degrading"}
    assert [t for t, _ in found] == [21, 31, 41]  # checks at 1, 11, 21 (t=0 has no rate yet): third


def test_a_real_mlx5_reading_counts_corrected_bits_through_the_vendor_map():
    """The real ConnectX ``ethtool -S`` (``tests/fixtures/SOURCES.md``) has ``rx_corrected_bits_phy``
    17,750,739: the collector's name reaches the detector as ``fec_corrected_bits``. The later
    readings are derived from it, labelled so: each adds 8e6 corrected bits a second, 2e-5 of a
    400 Gb/s link, a link degrading. Checked every 10 s, it warns at the third check. Its speed
    comes from the IB port's ``rate`` beside it: without a speed, no BER is judged (an assumed one
    would make a 100G link read 4x healthier)."""
    real = parse_ethtool_stats((FIXTURES / "ethtool_mlx5_crc_errors_zh_ethtool_notes.txt").read_text()).values
    assert real["rx_corrected_bits_phy"] == 17_750_739
    pipeline, events = Pipeline(DetectorConfig()), []
    for second in range(36):
        derived = dict(real) | {
            "rx_corrected_bits_phy": real["rx_corrected_bits_phy"] + second * 8_000_000,
            "rx_packets_phy": real["rx_packets_phy"] + second * 1_000_000,
        }
        specs, values = map_counters("mlx5_ethtool", derived)
        rate, speed = map_counters("ib_counters", {"rate": 400_000})  # the port's "400 Gb/sec (4X NDR)"
        ts = T0 + second * NS
        snap = Snapshot(
            "h001/mlx5_0", "nic", ts, specs + rate, ["1"], [list(values) + speed], source="mlx5_ethtool"
        )
        events += pipeline.feed(topics.COUNTERS, ts, encode(snap))
    events += pipeline.finish()
    firing = [a for a in events if a.status == "firing"]
    assert [(a.kind, a.root.device) for a in firing] == [("link_degrading", "h001/mlx5_0")]
    assert firing[0].evidence["peak_pre_fec_ber"] == 2e-5


def test_a_lossy_link_seen_between_bursts_is_linked_to_its_corruption_not_paged_again(tmp_path):
    """Found in the suite (``noisy_counters_100ms_16h``, replayed here as it is): a link past the
    FEC limit loses frames only while it carries traffic, and a check landing between a job's
    bursts (or on a poll whose error counter a reset made unknown) saw its FEC working hard with
    nothing lost. Such a degrading incident fires linked to the link's corruption (``caused_by``),
    says frames are lost already, and is neither paged nor scored on its own."""
    trace = tmp_path / "noisy.trace.gz"
    simulate(load_scenario(SCENARIOS / "eval" / "noisy_counters_100ms_16h.yaml"), trace)
    events = replay_trace(trace, Pipeline(DetectorConfig())).anomalies
    corruption = {a.fingerprint for a in events if a.kind == "link_corruption"}
    degrading = [a for a in events if a.kind == "link_degrading" and a.status == "firing"]
    assert len(corruption) == 1 and degrading  # it does fire: the checks that saw nothing lost
    assert all(a.caused_by in corruption and "frames are lost on it already" in a.summary for a in degrading)
