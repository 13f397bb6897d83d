"""`fabricwatch ingest gnmic|telegraf` as the translator stage it is: messages in gnmic's event
format and in Telegraf's JSON serializer's shape on a topic of a real broker (Tansu), two switches
interleaved, with repeated, late and broken messages and a switch that stops; the translator
process publishes snapshots that two workers turn into rates equal to the counters' deltas, and
leaf1's OpenConfig LLDP neighbours as its topology report."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from helpers.streaming import Collector
from helpers.waiting import wait_for

from fabricwatch.local.processes import fabricwatch_command
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Topology, decode, decode_rates
from fabricwatch.streams.kafka_io import Publisher, ensure_topics

pytestmark = pytest.mark.processes
SAMPLES = 6
OCTETS_PER_S = {"leaf1": 1_250_000_000, "leaf2": 400_000_000}
OC = "/interfaces/interface/state/counters"
LLDP = "/lldp/interfaces/interface/neighbors/neighbor/state"
UPLINKS = {"Ethernet1": ("spine-1", "Ethernet5"), "Ethernet2": ("spine-2", "Ethernet5")}
"""leaf1's LLDP neighbours, sent with its first sample."""


def gnmic_messages(device: str, ts_ns: int, octets: int) -> list[bytes]:
    """One sample of one switch as gnmic's Kafka output writes it in event format: one message per
    notification, one leaf each."""
    tags = {"source": f"{device}:6030", "subscription-name": "counters", "interface_name": "Ethernet8"}
    out = [
        json.dumps(
            [{"name": "counters", "timestamp": ts_ns + 1000 * i, "tags": tags, "values": {path: value}}]
        ).encode()
        for i, (path, value) in enumerate(
            [(f"{OC}/out-octets", str(octets)), (f"{OC}/in-octets", octets // 2), (f"{OC}/in-fcs-errors", 0)]
        )
    ]
    if device == "leaf1" and octets == 0:
        for port, (far, far_port) in UPLINKS.items():
            lldp_tags = {"source": f"{device}:6030", "interface_name": port, "neighbor_id": far}
            for leaf, value in (
                ("system-name", far),
                ("port-id", far_port),
                ("port-id-type", "INTERFACE_NAME"),
            ):
                event = {
                    "name": "lldp",
                    "timestamp": ts_ns,
                    "tags": lldp_tags,
                    "values": {f"{LLDP}/{leaf}": value},
                }
                out.append(json.dumps([event]).encode())
    return out


def telegraf_messages(device: str, ts_ns: int, octets: int) -> list[bytes]:
    """The same sample as Telegraf's gnmi input and Kafka output with the JSON serializer (one
    metric per message, timestamps in seconds unless json_timestamp_units says otherwise)."""
    metric = {
        "fields": {"out_octets": octets, "in_octets": octets // 2, "in_fcs_errors": 0},
        "name": "ifcounters",
        "tags": {
            "host": "telegraf-1",
            "name": "Ethernet8",
            "path": "/interfaces/interface",
            "source": device,
        },
        "timestamp": ts_ns // 10**6,
    }
    out = [json.dumps(metric).encode()]
    if device == "leaf1" and octets == 0:
        for port, (far, far_port) in UPLINKS.items():
            fields = {"system_name": far, "port_id": far_port, "port_id_type": "INTERFACE_NAME"}
            tags = {"source": device, "path": LLDP, "name": port, "id": far}
            out.append(
                json.dumps(
                    {"fields": fields, "name": "lldp", "tags": tags, "timestamp": ts_ns // 10**6}
                ).encode()
            )
    return out


@pytest.mark.parametrize(("fmt", "write"), [("gnmic", gnmic_messages), ("telegraf", telegraf_messages)])
def test_the_translator_turns_a_topic_of_gnmi_telemetry_into_the_switches_rates(broker, workers, fmt, write):
    source_topic = f"{fmt}-telemetry"
    ensure_topics(broker, [source_topic])
    for w in workers:
        w.wait_ready()
    rates = Collector(broker, topics.RATES)
    reports = Collector(broker, topics.TOPOLOGY)
    publisher = Publisher(broker)
    t0 = (int(time.time()) - SAMPLES - 5) * 10**9
    for i in range(SAMPLES):
        ts = t0 + i * 10**9
        for device, rate in OCTETS_PER_S.items():
            if device == "leaf2" and i >= SAMPLES - 2:
                continue  # leaf2 stops: its last sample is sent when the grace period ends
            for message in write(device, ts, rate * i):
                publisher.send(source_topic, device, message)
            if i == 2:  # the same sample again, and one of an earlier one
                publisher.send(source_topic, device, write(device, ts, rate * i)[0])
                publisher.send(source_topic, device, write(device, ts - 2 * 10**9, rate * (i - 2))[0])
    leaves = b'"fields": {"in_octets": 1}' if fmt == "telegraf" else b'"values": {"/x": 1}'
    publisher.send(source_topic, "x", b"{" + leaves + b', "tags": {"source": "leaf9"}}')  # no timestamp
    publisher.send(source_topic, "x", b"\x00garbage")
    publisher.close()

    argv = ["ingest", fmt, "--from-topic", source_topic, "--broker", broker.bootstrap, "--from-beginning"]
    argv += ["--grace", "1"]
    translator = subprocess.Popen(
        [*fabricwatch_command(), *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )
    want = (SAMPLES - 1) + (SAMPLES - 3)  # rates: one per sample after each switch's first
    try:
        assert wait_for(lambda: len(rates.rates()) >= want and reports.records, 90)
    finally:
        translator.send_signal(signal.SIGTERM)
        out, err = translator.communicate(timeout=30)
    assert translator.returncode == 0, err
    assert "snapshots (0 failed, 0 dropped)" in err, err  # the frame says what the broker took
    assert "without a timestamp" in err and "not JSON" in err
    points_per_message = {"gnmic": 1, "telegraf": 3}[fmt]  # a Telegraf metric carries the whole sample
    assert f"{2 * points_per_message} late, {2 * points_per_message} repeated" in out, out

    assert "topology: 1 reports from 6 LLDP values" in out, out
    (report,) = [decode(r.value, Topology) for r in reports.stop()]
    assert report.source == "switch:leaf1"
    assert {(link.a_port, link.b_device, link.b_port) for link in report.links} == {
        (port, *far) for port, far in UPLINKS.items()
    }
    assert [g.members for g in report.ecmp_groups] == [["Ethernet1", "Ethernet2"]]

    messages = [m for r in rates.stop() for m in decode_rates(r.value)]
    for device, rate in OCTETS_PER_S.items():
        mine = [m for m in messages if m.device == device]
        assert len(mine) == (SAMPLES - 1 if device == "leaf1" else SAMPLES - 3), (device, len(mine))
        for msg in mine:
            at = msg.ports.index("Ethernet8")
            assert msg.dt_s == pytest.approx(1.0, abs=0.01) and msg.device_kind == "switch"
            assert msg.column("tx_bps")[at] == pytest.approx(rate * 8)
            assert msg.column("rx_bps")[at] == pytest.approx(rate * 4)
