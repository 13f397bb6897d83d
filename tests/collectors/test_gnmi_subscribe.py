"""`fabricwatch collect gnmi` against a real gRPC gNMI server on loopback (tests/helpers/gnmi_target.py,
built from the same gNMI protos): SAMPLE and ON_CHANGE subscriptions, rates equal to the counters'
rates, TLS with the site's CA, credentials checked, and a target that is down or refuses."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from helpers.gnmi_target import Interface, Server, Target
from helpers.snapshots import cell

from fabricwatch.detectors.rates import RateEngine
from fabricwatch.ingest.gnmi.snapshots import SnapshotAssembler
from fabricwatch.ingest.gnmi.subscribe import COUNTER_PATHS, GnmiTarget, stream_targets
from fabricwatch.ingest.nic.poll import CollectStats, ProblemLog
from fabricwatch.local.broker import free_port
from fabricwatch.local.processes import fabricwatch_command
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Snapshot, decode
from fabricwatch.schemas.trace import TraceReader

pytestmark = pytest.mark.processes
INTERVAL_S = 0.2


def collect(targets: list[GnmiTarget], until, said: list[str], timeout_s: float = 20) -> list[Snapshot]:
    """Snapshots assembled from the targets' streams until ``until(snapshots)`` or the timeout."""
    stop = threading.Event()
    stats = CollectStats()
    assembler = SnapshotAssembler(window_s=0.05, grace_s=1.0, warn=said.append)
    snaps: list[Snapshot] = []
    deadline = time.monotonic() + timeout_s
    for points in stream_targets(targets, INTERVAL_S, stop, ProblemLog(stats, said.append)):
        snaps += assembler.add(points) + assembler.due()
        if until(snaps) or time.monotonic() > deadline:
            stop.set()
    return snaps


def test_sample_subscription_gives_each_interface_s_rates():
    down = Interface("Ethernet1/1", 5_000, 0, oper_status="LOWER_LAYER_DOWN")
    target = Target([Interface("Ethernet0", 1_250_000_000, 10_000_000, rx_power_dbm=-14.1), down])
    with Server(target) as server:
        said: list[str] = []
        snaps = collect([GnmiTarget("leaf1", server.address)], lambda s: len(s) >= 6, said)
    (request,) = target.subscriptions
    assert request.prefix.origin == "openconfig"
    assert [s.sample_interval for s in request.subscription] == [int(INTERVAL_S * 1e9)] * len(COUNTER_PATHS)
    assert len(snaps) >= 6 and {s.device for s in snaps} == {"leaf1"}
    assert snaps[0].ports == ["Ethernet0", "Ethernet1/1"]
    assert cell(snaps[0], "Ethernet0", "rx_errors") == 7  # JSON-IETF "7": a uint64 as a string
    # The port states subscribed by default reach the link state detector's gauges.
    for port, state in (("Ethernet0", 0), ("Ethernet1/1", 1)):
        assert {cell(s, port, "oper_down") for s in snaps} - {None} == {state}
    # So do its transceiver's (a double and a decimal64, joined to the port by its reference).
    assert {cell(s, "Ethernet0", "optic_rx_power_nw") for s in snaps} - {None} == {38_905}
    assert {cell(s, "Ethernet0", "optic_rx_power_low_alarm_nw") for s in snaps} - {None} == {44_668}
    engine = RateEngine()
    frames = [f for f in (engine.update(s) for s in snaps) if f is not None]
    for frame in frames:
        tx = frame.values[:, frame.layout.col("tx_bytes")]
        assert tx[0] == pytest.approx(1_250_000_000, rel=1e-3) and tx[1] == pytest.approx(5_000, rel=0.05)


def test_on_change_leaves_arrive_when_they_change():
    interface = Interface("Ethernet8", 0, 0)
    target = Target([interface])
    with Server(target) as server:
        said: list[str] = []
        queues = ["/qos/interfaces/interface/output/queues/queue/state"]
        gnmi = GnmiTarget("leaf2", server.address, paths=queues, mode="on_change")

        def bump():
            for marks in (10, 25):
                time.sleep(0.5)
                interface.ecn_marks = marks
                target.changed.set()

        threading.Thread(target=bump, daemon=True).start()
        snaps = collect([gnmi], lambda s: len(s) >= 3, said)
    assert [cell(s, "Ethernet8", "queue_ecn_marked_packets", 3) for s in snaps[:3]] == [0, 10, 25]


def test_tls_with_the_site_s_ca_and_credentials(tmp_path: Path):
    target = Target([Interface("Ethernet0", 1000, 1000)], username="fabricwatch", password="s3cret")
    with Server(target, tls_dir=tmp_path) as server:
        good, bad = tmp_path / "good", tmp_path / "bad"
        good.write_text("s3cret\n")
        bad.write_text("guess\n")
        common = {
            "tls": True,
            "ca_file": str(server.ca_file),
            "server_name": "localhost",
            "username": "fabricwatch",
        }
        said: list[str] = []
        refused = collect(
            [GnmiTarget("leaf1", server.address, password_file=str(bad), **common)], bool, said, 3
        )
        assert refused == [] and any("UNAUTHENTICATED" in s for s in said), said
        snaps = collect([GnmiTarget("leaf1", server.address, password_file=str(good), **common)], bool, [])
    assert snaps and cell(snaps[0], "Ethernet0", "rx_bytes") is not None


def test_a_target_that_is_down_costs_only_itself_and_is_said_once():
    target = Target([Interface("Ethernet0", 1000, 1000)])
    with Server(target) as server:
        said: list[str] = []
        dead = GnmiTarget("leaf9", f"127.0.0.1:{free_port()}")

        def both(snaps: list[Snapshot]) -> bool:
            return len(snaps) >= 5 and any(s.startswith("leaf9") for s in said)

        snaps = collect([dead, GnmiTarget("leaf1", server.address)], both, said)
    assert {s.device for s in snaps} == {"leaf1"}
    assert len([s for s in said if s.startswith("leaf9")]) == 1, said


def test_the_command_writes_a_trace_of_the_target_s_snapshots(tmp_path: Path):
    target = Target([Interface("Ethernet0", 2_000_000, 1_000)])
    out = tmp_path / "gnmi.trace"
    with Server(target) as server:
        argv = ["collect", "gnmi", "--target", server.address, "--name", "spine1", "--out", str(out)]
        argv += ["--interval", str(INTERVAL_S), "--count", "4"]
        done = subprocess.run(
            [*fabricwatch_command(), *argv],
            capture_output=True,
            text=True,
            timeout=60,
            env=os.environ | {"PYTHONUNBUFFERED": "1"},
        )
    assert done.returncode == 0, done.stderr
    assert "collected 4 snapshots of 1 targets" in done.stdout
    with TraceReader(out) as reader:
        snaps = [decode(r.value(), Snapshot) for r in reader if r.topic == topics.COUNTERS]
    assert len(snaps) == 4 and {s.device for s in snaps} == {"spine1"}
