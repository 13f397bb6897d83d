"""RDMA retransmissions (``detectors/retransmissions.py``): a NIC resending on its own is an
incident at the NIC (host side); NICs resending because a link on their paths loses frames join
that link's incident; a NIC resending far more than such a link loses is not its echo."""

from __future__ import annotations

from helpers import small_fabric
from helpers.paths import FIXTURES

from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.ingest.mapping import map_counters
from fabricwatch.ingest.nic.parsers import parse_rdma_statistic
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import CounterSpec, Snapshot, encode

NS = 1_000_000_000
T0 = 1_767_225_600 * NS


def firing(events: list, kind: str) -> list:
    return [a for a in events if a.kind == kind and a.status == "firing"]


def test_a_nic_resending_on_its_own_is_an_incident_at_the_nic(tmp_path):
    faults = "  - {kind: nic_retransmit, nic: h003, rate: 0.001, start: 30.3, duration: 40}"
    events = small_fabric.replayed(tmp_path, "resend", faults, 11, 120)
    (a,) = firing(events, "rdma_retransmission")
    assert (a.root.device, a.severity) == ("h003/mlx5_0", "critical")
    assert (a.ts_ns - T0) / NS - 30.3 <= 4.0  # (persist_polls + 2) polls
    assert "the host side" in a.summary and "PCIe" in a.hint and a.jobs == ["dp"]
    assert [x.status for x in events if x.fingerprint == a.fingerprint][-1] == "resolved"


def test_nics_resending_across_a_lossy_uplink_join_its_incident_and_a_worse_one_does_not(tmp_path):
    """A leaf uplink's optic damages 1e-4 of what the spine receives: hosts under that leaf resend
    about as much, and are its echo. h012 resends 1e-2 of its packets meanwhile: a hundred times
    what the link loses, its own fault."""
    faults = (
        "  - {kind: lossy_link, device: spine01, port: Ethernet0, loss_rate: 0.0001, one_way: true,"
        " start: 30.3, duration: 40}\n"
        "  - {kind: nic_retransmit, nic: h012, rate: 0.01, start: 40.2, duration: 20}"
    )
    events = small_fabric.replayed(tmp_path, "echo", faults, 11, 100)
    (link,) = firing(events, "link_corruption")
    echoes = [a for a in events if a.fingerprint == link.fingerprint and "retransmitting_peers" in a.evidence]
    assert echoes and "its peers retransmit" in echoes[-1].summary
    (own,) = firing(events, "rdma_retransmission")
    assert own.root.device == "h012/mlx5_0"


def test_a_real_rdma_statistic_reading_with_resends_derived_from_it_is_found():
    """The first reading is a real ``rdma statistic show`` of a ConnectX-4 Lx port
    (``tests/fixtures/SOURCES.md``: its transport counters all 0, 135 out-of-buffer drops). The
    next ones are derived from it, labelled so: each second adds 500 packet sequence NAKs and 20
    ACK timeouts in a million packets sent. The collector's names reach the detector through the
    vendor map; without a topology or a lossy link, it is the host side."""
    text = (FIXTURES / "rdma_statistic_show_mlx5_cx4lx_mlnx_ofed.txt").read_text()
    real = parse_rdma_statistic(text).links[("mlx5_0", 1)]
    assert real["out_of_buffer"] == 135 and real["packet_seq_err"] == 0
    pipeline, events = Pipeline(DetectorConfig()), []
    for second in range(6):
        derived = dict(real)
        derived["packet_seq_err"] = real["packet_seq_err"] + 500 * second
        derived["local_ack_timeout_err"] = real["local_ack_timeout_err"] + 20 * second
        specs, values = map_counters("mlx5_hw_counters", derived)
        specs = [*specs, CounterSpec("tx_packets"), CounterSpec("rx_packets")]
        values = [*values, 10**9 + 10**6 * second, 10**9 + 10**6 * second]
        ts = T0 + second * NS
        snap = Snapshot("h001/mlx5_0", "nic", ts, specs, ["1"], [values], source="mlx5_hw_counters")
        events += pipeline.feed(topics.COUNTERS, ts, encode(snap))
    events += pipeline.finish()
    (a,) = firing(events, "rdma_retransmission")
    assert a.root.device == "h001/mlx5_0" and a.evidence["peak_retransmit_ratio"] == 0.00052


def test_nics_resending_behind_a_dropping_port_are_named_in_its_packet_loss(tmp_path):
    faults = (
        "  - {kind: headroom_drops, device: leaf00, port: Ethernet64, drop_rate: 0.0001,"
        " start: 30.3, duration: 40}"
    )
    events = small_fabric.replayed(tmp_path, "drops_echo", faults, 11, 100)
    assert not firing(events, "rdma_retransmission")
    (loss,) = firing(events, "packet_loss")
    named = [a for a in events if a.fingerprint == loss.fingerprint and "retransmitting_peers" in a.evidence]
    assert named and "its peers retransmit" in named[-1].summary
