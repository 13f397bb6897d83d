"""gNMI telemetry from gnmic (event and json formats) and Telegraf (json serializer) into switch
snapshots: real samples, generated messages of the same shapes, and what goes wrong in streams
(interleaved devices, repeated and late updates, a device that stops, garbage)."""

from __future__ import annotations

import json
import math

import pytest
from helpers.paths import FIXTURES
from helpers.snapshots import Clock, cell

from fabricwatch.detectors.rates import RateEngine
from fabricwatch.ingest.gnmi.messages import parse_message, split_path
from fabricwatch.ingest.gnmi.snapshots import SnapshotAssembler

T0 = 1_795_000_000_000_000_000
OC = "/interfaces/interface/state/counters"
QUEUE = "/qos/interfaces/interface/output/queues/queue/state"


def event(source: str, ts_ns: int, path: str, value, **tags) -> dict:
    """One gnmic event-format message, as its Kafka output writes it."""
    return {"name": "sub1", "timestamp": ts_ns, "tags": {"source": source, **tags}, "values": {path: value}}


def assembled(
    fmt: str, messages: list, said: list | None = None, clock=None
) -> tuple[list, SnapshotAssembler]:
    assembler = SnapshotAssembler(warn=(said if said is not None else []).append, clock=clock or Clock())
    snaps = []
    for msg in messages:
        parsed = parse_message(fmt, json.dumps(msg).encode())
        snaps += assembler.add(parsed.points)
    return snaps + assembler.close(), assembler


def telegraf_json(line: str) -> dict:
    """An influx line-protocol line as Telegraf's JSON serializer writes the same metric."""
    head, fields, ts = line.split(" ")
    name, *tags = head.split(",")
    return {
        "fields": {k: int(v.rstrip("i")) for k, v in (f.split("=") for f in fields.split(","))},
        "name": name,
        "tags": dict(t.split("=", 1) for t in tags),
        "timestamp": int(ts) // 10**9,
    }


def test_paths_lose_their_keys_origin_and_module_prefixes():
    path = "openconfig:/interfaces/interface[name=Ethernet1/1]/openconfig-if-ethernet:ethernet/state"
    assert split_path(path) == ("/interfaces/interface/ethernet/state", {"interface_name": "Ethernet1/1"})


def test_gnmic_event_sample_of_an_sr_linux_interface():
    events = json.loads((FIXTURES / "gnmic_event_format_srl_interface_stats_docs.json").read_text())
    said: list[str] = []
    snaps, assembler = assembled("gnmic", [events], said)
    (snap,) = snaps
    assert (snap.device, snap.ports, snap.ts_ns) == ("clab-traps-srl1", ["mgmt0"], 1710890476202665500)
    assert cell(snap, "mgmt0", "rx_bytes") == 35284165
    assert cell(snap, "mgmt0", "tx_bytes") == 219527024
    assert cell(snap, "mgmt0", "rx_discards") == 6377
    assert cell(snap, "mgmt0", "rx_errors") == 128
    assert cell(snap, "mgmt0", "carrier_changes") == 1  # the link health detectors read it (issue 34)
    assert assembler.stats.unknown_paths == 8  # totals, broadcast, multicast, mirror: not ours
    assert len(said) == 8  # each said once


def test_junos_out_pkts_through_gnmic_is_the_port_s_packets():
    """Found (issue 33, 6): OpenConfig's out-pkts, all Junos sends, had no mapping row."""
    events = json.loads((FIXTURES / "gnmic_event_junos_out_pkts_issue261.json").read_text())
    (snap,), _ = assembled("gnmic", [events])
    assert (snap.device, snap.ports) == ("junos", ["em0"])
    assert cell(snap, "em0", "tx_packets") == 7114902


def test_gnmic_json_of_an_arista_interface_carries_its_carrier_transitions():
    """cEOSLab's Management1 streamed ON_CHANGE by gnmic (source in ``fixtures/SOURCES.md``): four
    JSON messages as printed, one after another. ``carrier-transitions`` is the flap counter the
    link state detector reads; ``in-fcs-errors`` the link corruption detector's. ON_CHANGE stamps
    each leaf with its last change (the carrier's is 23 minutes older than the rest), which a
    stream of samples calls late, so each message is assembled on its own here."""
    text = (FIXTURES / "gnmic_ceoslab_arlab_fcs_carrier.txt").read_text()
    decoder, messages, at = json.JSONDecoder(), [], 0
    while at < len(text.rstrip()):
        msg, at = decoder.raw_decode(text, at)
        messages.append(msg)
        at = len(text) - len(text[at:].lstrip())
    assert len(messages) == 4
    snaps = [snap for msg in messages for snap in assembled("gnmic", [msg])[0]]
    read = {c.name: cell(s, "Management1", c.name) for s in snaps for c in s.counters}
    assert read["carrier_changes"] == 3 and read["rx_crc_errors"] == 0


def test_telegraf_json_of_a_juniper_router_maps_leaves_under_the_subscription_path():
    lines = (FIXTURES / "telegraf_gnmi_ifcounters_juniper_issue11778.txt").read_text().splitlines()
    snaps, _ = assembled("telegraf", [telegraf_json(line) for line in lines])
    (snap,) = snaps
    assert snap.device == "1.1.1.10" and snap.ts_ns == 1662597699 * 10**9
    assert snap.ports == ["et-0/1/0", "xe-0/1/10:0", "xe-0/1/10:3", "xe-0/1/11:0"]
    assert cell(snap, "xe-0/1/10:3", "carrier_changes") == 5  # its only counter of ours: 5 transitions
    assert cell(snap, "et-0/1/0", "rx_bytes") == 1078808561883764
    assert cell(snap, "et-0/1/0", "tx_packets") == 8787288387003
    assert cell(snap, "xe-0/1/11:0", "tx_bytes") == 66215
    assert cell(snap, "xe-0/1/11:0", "rx_bytes") is None  # not in that line: unknown, not 0


def test_telegraf_batches_and_millisecond_timestamps():
    metric = {
        "name": "ifcounters",
        "tags": {"source": "leaf1:6030", "name": "Ethernet8"},
        "fields": {"out_octets": 5},
    }
    batch = {"metrics": [{**metric, "timestamp": 1_795_000_000_123}]}
    snaps, _ = assembled("telegraf", [batch])
    assert snaps[0].device == "leaf1" and snaps[0].ts_ns == 1_795_000_000_123 * 10**6
    assert cell(snaps[0], "Ethernet8", "tx_bytes") == 5


def test_gnmic_json_format_with_a_prefix_and_a_json_ietf_container():
    scalar = {
        "source": "spine1:57400",
        "subscription-name": "counters",
        "timestamp": T0,
        "time": "2026-11-18T10:13:20+00:00",
        "prefix": "openconfig:interfaces/interface[name=Ethernet1/1]/state/counters",
        "updates": [{"Path": "in-octets", "values": {"in-octets": "671552"}}],
    }
    container = {
        **scalar,
        "prefix": "",
        "updates": [
            {
                "Path": "interfaces/interface[name=Ethernet2/1]/state",
                "values": {
                    "interfaces/interface/state": {
                        "openconfig-interfaces:counters": {"out-octets": "9000", "in-errors": "2"},
                        "openconfig-interfaces:description": "to leaf7",
                    }
                },
            }
        ],
    }
    snaps, _ = assembled("gnmic", [scalar, container])
    (snap,) = snaps
    assert snap.device == "spine1"
    assert cell(snap, "Ethernet1/1", "rx_bytes") == 671552
    assert cell(snap, "Ethernet2/1", "tx_bytes") == 9000 and cell(snap, "Ethernet2/1", "rx_errors") == 2


def test_queue_counters_take_their_index_from_the_queue_name():
    keys = {"interface_interface-id": "Ethernet8", "queue_name": "UC3"}
    snaps, _ = assembled("gnmic", [[event("leaf1", T0, f"{QUEUE}/ecn-marked-pkts", 77, **keys)]])
    assert cell(snaps[0], "Ethernet8", "queue_ecn_marked_packets", 3) == 77


def test_interleaved_devices_repeats_late_updates_and_a_device_that_stops():
    clock = Clock()
    said: list[str] = []
    messages = []
    for i in range(4):
        ts = T0 + i * 10**9
        for dev in ("leaf1", "leaf2"):
            if dev == "leaf2" and i == 3:
                continue  # leaf2 stops
            messages.append([event(dev, ts + 1000, f"{OC}/in-octets", 1000 * i, interface_name="Ethernet0")])
            messages.append([event(dev, ts + 2000, f"{OC}/out-octets", 2000 * i, interface_name="Ethernet0")])
        messages.append([event("leaf1", ts + 2000, f"{OC}/out-octets", 2000 * i, interface_name="Ethernet0")])
    messages.append([event("leaf1", T0 + 10**9, f"{OC}/in-octets", 1, interface_name="Ethernet0")])  # late
    assembler = SnapshotAssembler(warn=said.append, clock=clock)
    snaps = []
    for msg in messages:
        snaps += assembler.add(parse_message("gnmic", json.dumps(msg).encode()).points)
    clock.now = 5.0
    snaps += assembler.due()  # leaf2's last sample waits no longer than the grace period
    snaps += assembler.close()
    by_device = {d: [s for s in snaps if s.device == d] for d in ("leaf1", "leaf2")}
    assert len(by_device["leaf1"]) == 4 and len(by_device["leaf2"]) == 3
    assert [cell(s, "Ethernet0", "rx_bytes") for s in by_device["leaf2"]] == [0, 1000, 2000]
    assert assembler.stats.duplicates == 4 and assembler.stats.late == 1
    assert assembler.stats.closed_by_grace >= 1


def test_rates_of_assembled_snapshots_equal_the_counters_deltas_and_a_missing_leaf_is_unknown():
    messages = []
    for i in range(5):
        ts = T0 + i * 10**9
        messages.append([event("leaf1", ts, f"{OC}/out-octets", 125_000_000 * i, interface_name="Ethernet4")])
        if i != 2:  # one sample lacks this leaf
            messages.append([event("leaf1", ts, f"{OC}/in-octets", 50_000 * i, interface_name="Ethernet4")])
    snaps, _ = assembled("gnmic", messages)
    engine = RateEngine()
    frames = [f for f in (engine.update(s) for s in snaps) if f is not None]
    tx = [f.values[0, f.layout.col("tx_bytes")] for f in frames]
    rx = [f.values[0, f.layout.col("rx_bytes")] for f in frames]
    assert tx == [125_000_000.0] * 4
    assert rx[0] == 50_000.0 and math.isnan(rx[1]) and rx[2] == pytest.approx(50_000.0) and rx[3] == 50_000.0


@pytest.mark.parametrize(
    ("fmt", "raw", "problem"),
    [
        ("gnmic", b'{"name": "s", "tags": {"source": "a"}, "values": {"/x": 1}}', "without a timestamp"),
        ("gnmic", b'[{"timestamp": 5, "values": {"/x": 1}}]', "without a source"),
        ("telegraf", b'{"fields": {"in_octets": 1}, "tags": {"source": "a"}}', "without a timestamp"),
        ("gnmic", b"\xff\xfe", "not JSON"),
        ("telegraf", b"[1, 2]", "expected an object"),
    ],
)
def test_bad_messages_give_problems_never_an_exception(fmt, raw, problem):
    parsed = parse_message(fmt, raw)
    assert parsed.points == [] and any(problem in p for p in parsed.problems)


def test_a_message_of_the_other_format_is_a_problem_that_names_the_right_command():
    """Found (issue 33, 6): gnmic's events fed to `ingest telegraf` gave 0 points and 0 problems."""
    events = (FIXTURES / "gnmic_event_format_srl_interface_stats_docs.json").read_bytes()
    parsed = parse_message("telegraf", events)
    assert parsed.points == [] and len(parsed.problems) == 18
    assert all("gnmic's event format (use `fabricwatch ingest gnmic`)" in p for p in parsed.problems)
    line = (FIXTURES / "telegraf_gnmi_ifcounters_juniper_issue11778.txt").read_text().splitlines()[0]
    parsed = parse_message("gnmic", json.dumps(telegraf_json(line)).encode())
    assert parsed.points == [] and "Telegraf's JSON (use `fabricwatch ingest telegraf`)" in parsed.problems[0]


def test_values_that_are_not_counters_are_left_out():
    msg = [
        event("leaf1", T0, f"{OC}/in-octets", "12abc", interface_name="Ethernet0"),
        event("leaf1", T0, f"{OC}/out-octets", -5, interface_name="Ethernet0"),
        event("leaf1", T0, f"{OC}/in-errors", True, interface_name="Ethernet0"),
        event("leaf1", T0, f"{OC}/out-errors", "3", interface_name="Ethernet0"),
    ]
    assert [p.value for p in parse_message("gnmic", json.dumps(msg).encode()).points] == [3]


def test_port_states_become_the_link_gauges_and_a_state_neither_up_nor_down_is_unknown():
    """OpenConfig's oper-status and admin-status enumerations, and SR Linux's oper-state and
    admin-state, as gnmic event messages of the documented shape (generated: no real sample of a
    down port was found). The link state detector reads ``oper_down`` and ``admin_down``."""
    states = "/interfaces/interface/state"
    messages = [
        event("leaf1", T0, f"{states}/oper-status", "UP", interface_name="Ethernet1"),
        event("leaf1", T0, f"{states}/oper-status", "LOWER_LAYER_DOWN", interface_name="Ethernet2"),
        event("leaf1", T0, f"{states}/admin-status", "DOWN", interface_name="Ethernet2"),
        event("leaf1", T0, f"{states}/oper-status", "TESTING", interface_name="Ethernet3"),
        event("leaf1", T0, f"{OC}/in-octets", 10, interface_name="Ethernet3"),
        event("srl1", T0, "/interface/oper-state", "down", interface_name="ethernet-1/1"),
        event("srl1", T0, "/interface/admin-state", "enable", interface_name="ethernet-1/1"),
    ]
    snaps, assembler = assembled("gnmic", messages)
    by_device = {s.device: s for s in snaps}
    leaf, srl = by_device["leaf1"], by_device["srl1"]
    assert cell(leaf, "Ethernet1", "oper_down") == 0
    assert cell(leaf, "Ethernet2", "oper_down") == 1 and cell(leaf, "Ethernet2", "admin_down") == 1
    assert cell(leaf, "Ethernet3", "oper_down") is None  # TESTING: unknown, never up
    assert cell(srl, "ethernet-1/1", "oper_down") == 1 and cell(srl, "ethernet-1/1", "admin_down") == 0
    assert assembler.stats.unknown_paths == 0


def test_a_transceivers_openconfig_diagnostics_become_its_ports_optic_gauges():
    """openconfig-platform-transceiver's leaves as gnmic event messages of the documented shape
    (generated; values in dBm, mA and degrees C like sonic-utilities' mock module): Ethernet1
    names its transceiver component, whose lanes, temperature and thresholds (CRITICAL: alarm,
    WARNING: warning) become Ethernet1's gauges; lane 4 is dark (no bias, -40 dBm) and left out.
    Ethernet2 names no transceiver: no optics. The readings are kept for the next sample."""
    xcvr, comp = "/components/component/transceiver", "Ethernet1-transceiver"
    channel, threshold = f"{xcvr}/physical-channels/channel/state", f"{xcvr}/thresholds/threshold/state"
    messages = [
        event("leaf1", T0, "/interfaces/interface/state/transceiver", comp, interface_name="Ethernet1"),
        event("leaf1", T0, f"{OC}/in-octets", 10, interface_name="Ethernet1"),
        event("leaf1", T0, f"{OC}/in-octets", 10, interface_name="Ethernet2"),
        event("leaf1", T0, "/components/component/state/temperature/instant", 44.9, component_name=comp),
    ]
    for lane, (power, bias) in enumerate([(-1.2, 6.75), (-14.1, 6.8), (-2.0, 6.7), (-40.0, 0.0)], start=1):
        messages += [
            event(
                "leaf1", T0, f"{channel}/input-power/instant", power, component_name=comp, channel_index=lane
            ),
            event(
                "leaf1",
                T0,
                f"{channel}/laser-bias-current/instant",
                bias,
                component_name=comp,
                channel_index=lane,
            ),
        ]
    for severity, low_dbm, bias_ma in (
        ("CRITICAL", -13.5, 10.0),
        ("openconfig-alarm-types:WARNING", -9.5, 9.5),
    ):
        messages += [
            event(
                "leaf1",
                T0,
                f"{threshold}/input-power-lower",
                low_dbm,
                component_name=comp,
                threshold_severity=severity,
            ),
            event(
                "leaf1",
                T0,
                f"{threshold}/laser-bias-current-upper",
                bias_ma,
                component_name=comp,
                threshold_severity=severity,
            ),
        ]
    messages.append(event("leaf1", T0 + 10**9, f"{OC}/in-octets", 20, interface_name="Ethernet1"))
    snaps, assembler = assembled("gnmic", messages)
    first, second = snaps
    assert first.device == second.device == "leaf1"
    assert cell(first, "Ethernet1", "optic_rx_power_nw") == 38_905  # lane 2's -14.1 dBm, past its alarm
    assert cell(first, "Ethernet1", "optic_rx_power_low_alarm_nw") == 44_668
    assert cell(first, "Ethernet1", "optic_rx_power_low_warning_nw") == 112_202
    assert (
        cell(first, "Ethernet1", "optic_bias_ua") == 6_800
        and cell(first, "Ethernet1", "optic_bias_high_alarm_ua") == 10_000
    )
    assert cell(first, "Ethernet1", "optic_temperature_mc") == 44_900
    assert cell(first, "Ethernet2", "optic_rx_power_nw") is None
    assert cell(second, "Ethernet1", "optic_rx_power_nw") == 38_905  # kept as last said
    assert assembler.stats.unknown_paths == 0
    later = [event("leaf1", T0 + 301 * 10**9, f"{OC}/in-octets", 30, interface_name="Ethernet1")]
    stale = assembled("gnmic", messages + later)[0][-1]
    assert cell(stale, "Ethernet1", "optic_rx_power_nw") is None  # not heard of for 5 minutes: unknown


def test_the_negotiated_speed_becomes_the_speed_gauge_and_an_unknown_speed_says_nothing():
    """openconfig-if-ethernet's ``ETHERNET_SPEED`` identities, with and without their module
    prefix, as gnmic event messages of the documented shape (generated)."""
    speed = "/interfaces/interface/ethernet/state/negotiated-port-speed"
    messages = [
        event("leaf1", T0, speed, "openconfig-if-ethernet:SPEED_200GB", interface_name="Ethernet1"),
        event("leaf1", T0, speed, "SPEED_400GB", interface_name="Ethernet2"),
        event("leaf1", T0, speed, "SPEED_UNKNOWN", interface_name="Ethernet3"),
        event("leaf1", T0, f"{OC}/in-octets", 10, interface_name="Ethernet3"),
    ]
    (leaf,), assembler = assembled("gnmic", messages)
    assert cell(leaf, "Ethernet1", "link_speed_mbps") == 200_000
    assert cell(leaf, "Ethernet2", "link_speed_mbps") == 400_000
    assert cell(leaf, "Ethernet3", "link_speed_mbps") is None
    assert assembler.stats.unknown_paths == 0
