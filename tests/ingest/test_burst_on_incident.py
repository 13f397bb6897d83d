"""Issue 36, item 3: a burst capture started when an incident opens on the host, published to the
broker and stored beside the poll-rate view. Against a real broker (Tansu): the watcher ignores
incidents on other hosts and ones that are not firing, captures once for the one that fires on
its host (then waits out its cooldown), and the sink stores the profile with its trigger."""

from __future__ import annotations

import subprocess
import time

import pytest
from helpers.waiting import wait_for

from fabricwatch.dashboards.capture_report import capture_chart, capture_table
from fabricwatch.local.processes import fabricwatch_command
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Anomaly, BurstProfile, RootCause, decode, encode
from fabricwatch.storage.captures import captures
from fabricwatch.storage.consumer import StoreConsumer
from fabricwatch.storage.store import Store
from fabricwatch.streams.kafka_io import Publisher, ensure_topics

pytestmark = pytest.mark.processes  # a broker and a collector process

TANSU = {"session_timeout_ms": 6000, "max_poll_interval_ms": 6000, "heartbeat_interval_ms": 1000}


def incident(fingerprint: str, host: str, status: str = "firing") -> Anomaly:
    now = time.time_ns()
    root = RootCause("leaf00", port="Ethernet8")
    return Anomaly(fingerprint, "microbursts", "info", status, now, now, root, "", hosts=[host])


def test_an_incident_on_the_host_starts_one_capture_that_is_published_and_stored(broker, tmp_path):
    ensure_topics(broker, [topics.ANOMALIES, topics.BURSTS])
    out = tmp_path / "watcher.log"
    with out.open("w") as log:
        watcher = subprocess.Popen(
            fabricwatch_command(
                *("collect", "burst", "lo", "--on-incident", "--host", "h007", "--broker", broker.bootstrap),
                *("--seconds", "0.2", "--line-gbps", "100", "--max-captures", "2", "--cooldown", "600"),
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        assert wait_for(lambda: "watching fabric.anomalies" in out.read_text(), 60), out.read_text()
        pub = Publisher(broker)
        for a in (
            incident("other-host", "h001"),
            incident("not-firing", "h007", "resolved"),
            incident("mine", "h007"),
            incident("within-cooldown", "h007"),
        ):
            pub.send(topics.ANOMALIES, a.fingerprint, encode(a), a.ts_ns)
        pub.send(topics.ANOMALIES, "bad", b"{not json", time.time_ns())
        pub.close()
        assert wait_for(lambda: "captured lo for microbursts mine" in out.read_text(), 60), out.read_text()
        time.sleep(2)  # time for a second, wrong, capture to show
        assert watcher.poll() is None, "the cooldown holds: no second capture, so it still waits"
    finally:
        watcher.terminate()
        assert watcher.wait(timeout=30) == 0, out.read_text()
    text = out.read_text()
    assert text.count("captured ") == 1 and "malformed incident skipped" in text

    with Store.open(tmp_path / "store") as store:
        sink = StoreConsumer(broker, store, "sink-bursts", consumer_options=TANSU)
        sink.run(idle_exit_s=3.0)
        rows = store.query(
            "SELECT host, netdev, trigger, samples, length(tx_per_bin_Bps), line_Bps FROM burst_profiles"
        )
        (taken,) = captures(store, 0, 2**63 - 1)
    ((host, netdev, trigger, samples, bins, line),) = rows
    assert (host, netdev, trigger, bins, line) == ("h007", "lo", "mine", 200, 100e9 / 8)
    assert samples >= 150
    # The report's view: the incident that asked for it, by kind and root, and each millisecond.
    assert taken.incident == "microbursts at leaf00 Ethernet8"
    assert len(taken.per_bin["tx"]) == 200
    assert taken.mean["tx"] == pytest.approx(taken.per_bin["tx"].mean(), rel=1e-3)
    row = capture_table([taken])
    assert "h007 lo" in row and "microbursts at leaf00 Ethernet8" in row
    chart = capture_chart(taken, tmp_path / "capture.png", (800, 600))
    assert chart.stat().st_size > 10_000


def test_a_profile_round_trips_the_wire_with_its_host_and_trigger():
    import msgspec

    from fabricwatch.ingest.nic.burst import capture, profile

    prof = msgspec.structs.replace(
        profile(capture("lo", 0.001, 0.05), 1.25e10, 0.001), host="h1", trigger="f"
    )
    assert decode(encode(prof), BurstProfile) == prof
