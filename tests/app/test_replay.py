"""`fabricwatch replay` on a hand-made trace: bad input is reported with its line and skipped, and
the run completes with the anomalies of the good input."""

from __future__ import annotations

import base64
from pathlib import Path

import msgspec

from fabricwatch.cli.main import main
from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.replay import replay_trace
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import (
    CounterSpec,
    Device,
    Label,
    Link,
    NicAttachment,
    RootCause,
    Snapshot,
    Topology,
)
from fabricwatch.schemas.trace import TraceWriter

T0 = 1_800_000_000_000_000_000
COLS = [
    CounterSpec("tx_bytes"),
    CounterSpec("rx_pfc_frames", index=3),
    CounterSpec("rx_pfc_duration_us", index=3),
    CounterSpec("queue_tx_bytes", index=3),
    CounterSpec("queue_occupancy_bytes", kind="gauge", index=3),
]
TOPO = Topology(
    ts_ns=T0,
    devices=[Device("h1", "host"), Device("h1-nic", "nic", host="h1"), Device("leaf0", "leaf")],
    links=[Link("h1-nic", "1", "leaf0", "Ethernet0")],
    nics=[NicAttachment("h1", "h1-nic", "1", "leaf0", "Ethernet0")],
)


def storm_trace(path: Path) -> None:
    """leaf0 Ethernet0 is paused by h1's NIC from t=3 s to t=8 s and transmits nothing."""
    with TraceWriter(path, source="test", created_ns=T0, meta={"poll_interval_s": 1.0}) as w:
        w.write_message(topics.TOPOLOGY, "fabric", T0, TOPO)
        label = Label("pfc_storm", T0 + 2 * 10**9, T0 + 8 * 10**9, RootCause("h1-nic", "1", 3))
        w.write_message(topics.LABELS, "pfc_storm", T0, label)
        tx = pfc = dur = qtx = 0
        for t in range(1, 16):
            stormed = 3 <= t <= 8
            tx += 0 if stormed else 10**9
            qtx += 0 if stormed else 10**9
            pfc += 20_000 if stormed else 0
            dur += 10**6 if stormed else 0
            snap = Snapshot(
                device="leaf0",
                device_kind="switch",
                ts_ns=T0 + t * 10**9,
                counters=COLS,
                ports=["Ethernet0"],
                values=[[tx, pfc, dur, qtx, 2_000_000 if stormed else 0]],
            )
            w.write_message(topics.COUNTERS, "leaf0", snap.ts_ns, snap)


def test_replay_reports_and_skips_malformed_records_and_still_finds_the_storm(tmp_path, capsys):
    trace = tmp_path / "storm.trace"
    storm_trace(trace)
    lines = trace.read_bytes().splitlines(keepends=True)
    bad_json = b"{this is not json\n"
    bad_snapshot = msgspec.json.encode(
        {"topic": topics.COUNTERS, "key": "leaf0", "ts_ns": T0, "payload": {"type": "snapshot", "ts_ns": "x"}}
    )
    garbage = msgspec.json.encode(
        {"topic": topics.COUNTERS, "key": "x", "ts_ns": T0, "payload_b64": "/////w=="}
    )
    deep_line = b'{"topic":"x","payload":' + b"[" * 5000 + b"]" * 5000 + b"}\n"
    deep = b'{"type":"snapshot","x":' + b"[" * 5000 + b"]" * 5000 + b"}"
    deep_payload = msgspec.json.encode(
        {"topic": topics.COUNTERS, "key": "x", "ts_ns": T0, "payload_b64": base64.b64encode(deep).decode()}
    )
    trace.write_bytes(
        b"".join(
            [
                *lines[:5],
                bad_json,
                bad_snapshot + b"\n",
                garbage + b"\n",
                deep_line,
                deep_payload + b"\n",
                *lines[5:],
            ]
        )
    )

    assert main(["replay", str(trace)]) == 0
    out, err = capsys.readouterr()
    assert f"{trace}:6: skipped malformed record" in err
    assert f"{trace}:7: dead letter (fabric.counters)" in err and "ts_ns" in err
    assert f"{trace}:8: dead letter (fabric.counters): not valid JSON" in err
    assert f"{trace}:9: skipped malformed record" in err  # nested 5,000 deep: costs only itself
    assert f"{trace}:10: dead letter (fabric.counters): not valid JSON: nested too deeply" in err
    assert "2 malformed lines and 3 undecodable messages skipped" in out
    assert "FIRING   critical pfc_storm     h1-nic:1 prio 3" in out
    assert "RESOLVED" in out
    score = next(line for line in out.splitlines() if line.startswith("pfc_storm"))
    assert score.split()[1:7] == ["1", "1", "0", "1.00", "1.00", "1.00"]


def test_replay_json_prints_anomaly_lifecycle_as_messages(tmp_path, capsys):
    trace = tmp_path / "storm.trace.gz"
    storm_trace(trace)
    assert main(["replay", "--json", str(trace)]) == 0
    *events, score = [msgspec.json.decode(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["status"] for e in events] == ["firing", "resolved"]
    # the trace has labels: its score is the last line, as JSON (it once was printed only without --json)
    assert score["type"] == "score" and score["false_alerts"] == 0
    assert score["kinds"]["pfc_storm"] | {"delay_max_s": None} == {
        "labels": 1,
        "incidents": 1,
        "true_incidents": 1,
        "duplicates": 0,
        "detected": 1,
        "localised": 1,
        "precision": 1.0,
        "recall": 1.0,
        "localisation": 1.0,
        "delay_max_s": None,
    }
    assert len({e["fingerprint"] for e in events}) == 1
    assert events[0]["root"] == {"device": "h1-nic", "port": "1", "priority": 3}
    assert events[0]["start_ns"] == T0 + 2 * 10**9  # the first stormed interval began at t=2 s


def test_bad_config_names_the_key(tmp_path, capsys):
    trace = tmp_path / "t.trace"
    storm_trace(trace)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("detectors:\n  pfc_storm:\n    detection_time_s: soon\n")
    assert main(["replay", "--config", str(cfg), str(trace)]) == 2
    err = capsys.readouterr().err
    assert "detection_time_s" in err and "pfc_storm" in err


def test_a_long_replay_says_how_far_it_got(demo_trace, capsys):
    """On a terminal a large trace's replay prints where it is, instead of nothing for minutes."""
    from fabricwatch.cli.replay import _progress

    seen: list[tuple[int, int]] = []
    replay_trace(demo_trace, Pipeline(DetectorConfig()), on_progress=lambda n, ts: seen.append((n, ts)))
    assert len(seen) >= 2 and seen == sorted(seen)  # counts and trace times only move forward
    say = _progress(every_s=0.0)
    say(*seen[-1])
    line = capsys.readouterr().err
    assert line.startswith(f"replay: {seen[-1][0]:,} records, trace time ") and line.endswith(" s\n")
