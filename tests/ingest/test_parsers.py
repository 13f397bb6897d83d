"""Parsers of real tool output, and the host and switch snapshots built from them.

Fixtures are real tool output; tests/fixtures/SOURCES.md names where each one comes from.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from helpers.paths import FIXTURES

from fabricwatch.ingest.mapping import build_sonic_snapshot
from fabricwatch.ingest.nic.device import EthtoolError, collect_nic, detect_vendor, run_ethtool
from fabricwatch.ingest.nic.parsers import parse_ethtool_stats, parse_sonic_counters_db, read_sysfs_port
from fabricwatch.schemas.messages import CounterSpec, Snapshot

MLX5_ETHTOOL = FIXTURES / "ethtool_mlx5_cx6dx_k5.15_xdp_filtered.txt"
ETHTOOL_VALUES = parse_ethtool_stats(MLX5_ETHTOOL.read_text()).values
BNXT_ETHTOOL = FIXTURES / "ethtool_bnxt_en_rhel8_k4.18_go_ethtool_metrics.txt"
SONIC_FRAGMENTS = [
    "sonic_counters_db_name_maps_upstream_mock.json.txt",
    "sonic_counters_db_port_entry_upstream_mock.json.txt",
    "sonic_counters_db_queue_entries_upstream_mock.json.txt",
]
T0 = 1_700_000_000_000_000_000


def load_sonic_fragments() -> dict:
    """The fixtures are excerpts of one JSON object (``"key": {...},`` members): join them into one."""
    members = [(FIXTURES / name).read_text().strip().rstrip(",") for name in SONIC_FRAGMENTS]
    return json.loads("{" + ",".join(members) + "}")


def by_column(snap: Snapshot, port: str) -> dict[tuple[str, int | None], int | None]:
    row = snap.values[snap.ports.index(port)]
    return {(c.name, c.index): v for c, v in zip(snap.counters, row, strict=True)}


def spec_of(snap: Snapshot, name: str, index: int | None = None) -> CounterSpec:
    return next(c for c in snap.counters if (c.name, c.index) == (name, index))


# --- ethtool -S


def test_mlx5_ethtool_output_parses_every_line():
    stats, problems = parse_ethtool_stats(MLX5_ETHTOOL.read_text())
    assert problems == []
    assert len(stats) == len(MLX5_ETHTOOL.read_text().splitlines()) - 1
    assert stats["rx_discards_phy"] == 58591428329
    assert stats["tx_pause_ctrl_phy"] == 5745055
    assert stats["rx0_xdp_tx_cqes"] == 87229139


def test_bnxt_ring_counters_keep_their_ring_prefix():
    stats = parse_ethtool_stats(
        BNXT_ETHTOOL.read_text()
    ).values  # tab-indented, "[N]: name: value" ring lines
    assert stats["[0]: rx_discards"] == 0
    assert stats["[7]: tpa_aborts"] == 10244908
    assert stats["rx_stat_discard"] == 14
    assert stats["pfc_pri7_tx_transitions"] == 0


def test_ethtool_name_with_trailing_space_is_stripped():
    # some mlx5 kernels print the name "tx_pause_storm_warning_events " with a trailing space
    stats = parse_ethtool_stats("NIC statistics:\n     tx_pause_storm_warning_events : 3\n")
    assert stats == ({"tx_pause_storm_warning_events": 3}, [])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("Standard stats for eth0:\n     rx: 1\n", "line 1: expected 'NIC statistics:'"),
        ("NIC statistics:\n", "no counter"),
        ("NIC statistics:\n     rx_bytes: x\n", r"no counter \(line 2: value of 'rx_bytes'"),
    ],
)
def test_output_that_is_not_ethtool_stats_is_an_error(text, message):
    with pytest.raises(ValueError, match=message):
        parse_ethtool_stats(text)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("     rx_packets 5", "line 3: expected '<name>: <value>'"),
        ("     tx_bytes: 12a", "line 3: value of 'tx_bytes' is not an unsigned 64-bit integer"),
        ("     tx_bytes: -1", "line 3: value of 'tx_bytes' is not an unsigned"),
        (f"     tx_bytes: {2**64}", "line 3: value of 'tx_bytes' is not an unsigned 64-bit integer"),
        ("     : 4", "line 3: expected '<name>: <value>'"),
        ("     rx_\ufffdbytes: 4", "line 3: counter name is not text"),
        ("     rx_bytes: 2", "line 3: counter 'rx_bytes' appears twice; both values dropped"),
        # Found (issue 33, 6): a line cut and joined with the next read as a counter of another name.
        (
            "     rx_vport_unicast_pa     tx_bytes_phy: 9",
            "line 3: not one counter's name (a line cut and joined",
        ),
    ],
)
def test_a_bad_line_costs_only_itself(line, problem):
    text = f"NIC statistics:\n     rx_bytes: 1\n{line}\n     tx_packets: 7\n"
    stats, problems = parse_ethtool_stats(text)
    assert len(problems) == 1 and problems[0].startswith(problem)
    assert stats["tx_packets"] == 7  # the lines after it are read
    assert stats.get("rx_bytes") == (None if "twice" in problem else 1)  # a name twice: neither value


def test_output_cut_mid_number_loses_only_its_last_line():
    """A file cut mid-number ("rx_discards_phy: 58591" of 58591428329) would be a wrong value:
    a last line without its end of line is not taken."""
    text = MLX5_ETHTOOL.read_text()
    cut = text[: text.index("58591428329") + 5]
    stats, problems = parse_ethtool_stats(cut)
    assert "rx_discards_phy" not in stats and stats["rx_bytes_phy"] > 0
    assert problems == ["line 38: cut short (no end of line): 'rx_discards_phy: 58591'"]


# --- sysfs


def test_read_sysfs_port_reads_counters_and_hw_counters(sysfs):
    counters, hw = read_sysfs_port(sysfs / "class" / "infiniband" / "mlx5_0" / "ports" / "1")
    assert counters["port_rcv_data"] == 18126345378
    assert counters["port_xmit_data"] == 2880761508848
    assert counters["port_xmit_packets"] == 10907922116
    assert len(counters) == 21
    assert hw["local_ack_timeout_err"] == 131
    assert hw["out_of_sequence"] == 1
    assert len(hw) == 25  # including "lifespan", a setting the mapping ignores


def test_read_sysfs_port_skips_unreadable_and_non_integer_files(tmp_path):
    (tmp_path / "counters").mkdir()
    (tmp_path / "counters" / "port_rcv_data").write_text("42\n")
    (tmp_path / "counters" / "rate").write_text("25 Gb/sec (1X EDR)\n")
    (tmp_path / "counters" / "unsupported").mkdir()  # reading it fails like an EINVAL counter file
    assert read_sysfs_port(tmp_path) == ({"port_rcv_data": 42}, {})


def test_read_sysfs_port_refuses_a_directory_that_is_no_port(tmp_path):
    with pytest.raises(ValueError, match="no counters/ or hw_counters/"):
        read_sysfs_port(tmp_path)


# --- host collector


def test_collect_nic_from_ib_sysfs_alone(sysfs):
    snap = collect_nic(sysfs, "mlx5_0", None, None, T0, host="gpu-node-7")
    assert (snap.device, snap.device_kind, snap.ports) == ("gpu-node-7/mlx5_0", "nic", ["1"])
    assert snap.source == "mlx5_hw_counters+ib_counters"
    values = by_column(snap, "1")
    assert values[("rx_bytes", None)] == 18126345378
    assert spec_of(snap, "rx_bytes") == CounterSpec("rx_bytes", width=64, scale=4)
    assert values[("local_ack_timeout_err", None)] == 131
    assert spec_of(snap, "out_of_buffer").width == 32
    assert spec_of(snap, "link_downed").width == 8
    assert ("rx_pfc_frames", 0) not in values


def test_collect_nic_reads_the_ports_link_speed_and_state_from_its_attribute_files(sysfs, tmp_path):
    """procfs's real port files: ``rate`` "25 Gb/sec (1X EDR)", ``state`` "4: ACTIVE". A port whose
    link is down reads "1: DOWN"; one whose files say nothing we know is unknown, not up."""
    values = by_column(collect_nic(sysfs, "mlx5_0", None, None, T0, host="h"), "1")
    assert values[("link_speed_mbps", None)] == 25_000
    assert values[("oper_down", None)] == 0
    port = sysfs / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    (port / "state").write_text("1: DOWN\n")
    (port / "rate").write_text("garbled\n")
    values = by_column(collect_nic(sysfs, "mlx5_0", None, None, T0, host="h"), "1")
    assert values[("oper_down", None)] == 1
    assert ("link_speed_mbps", None) not in values
    (port / "state").write_text("2: INIT\n")
    assert ("oper_down", None) not in by_column(collect_nic(sysfs, "mlx5_0", None, None, T0, host="h"), "1")


def test_collect_nic_combines_ethtool_with_sysfs(sysfs):
    """The sysfs tree and the ethtool output come from two different real hosts: the test is about
    which source each column is taken from, not about one machine's numbers."""
    snap = collect_nic(sysfs, "mlx5_0", None, ETHTOOL_VALUES, T0, host="gpu-node-7")
    assert snap.source == "mlx5_hw_counters+mlx5_ethtool+ib_counters"
    values = by_column(snap, "1")
    assert values[("tx_bytes", None)] == 357657403514  # ethtool tx_bytes_phy beats PMA port_xmit_data
    assert spec_of(snap, "tx_bytes").scale == 1
    assert values[("rx_discards", None)] == 58591428329
    assert values[("tx_pause_frames", None)] == 5745055
    assert values[("out_of_buffer", None)] == 0  # the RDMA Q counter, not ethtool's rx_out_of_buffer
    assert values[("link_downed", None)] == 0  # PMA only: the sample has no link_down_events_phy
    assert len({(c.name, c.index) for c in snap.counters}) == len(snap.counters)


def test_collect_nic_attaches_ethtool_to_the_port_of_the_netdev(sysfs):
    ports = sysfs / "class" / "infiniband" / "mlx5_0" / "ports"
    (ports / "2" / "counters").mkdir(parents=True)
    (ports / "2" / "counters" / "port_xmit_data").write_text("5\n")
    (ports / "2" / "gid_attrs" / "ndevs").mkdir(parents=True)
    (ports / "2" / "gid_attrs" / "ndevs" / "0").write_text("ens2f1np1\n")
    snap = collect_nic(sysfs, "mlx5_0", "ens2f1np1", ETHTOOL_VALUES, T0, host="h")
    assert snap.ports == ["1", "2"]
    assert by_column(snap, "2")[("rx_discards", None)] == 58591428329
    assert by_column(snap, "1")[("rx_discards", None)] is None
    with pytest.raises(ValueError, match="cannot tell which of ports"):
        collect_nic(sysfs, "mlx5_0", "eth9", ETHTOOL_VALUES, T0, host="h")


def test_collect_nic_refuses_an_unknown_device_or_vendor(sysfs):
    with pytest.raises(ValueError, match="no such RDMA device"):
        collect_nic(sysfs, "mlx5_9", None, None, T0)
    (sysfs / "class" / "infiniband" / "mlx5_0").rename(sysfs / "class" / "infiniband" / "rocep1s0")
    with pytest.raises(
        ValueError, match=r"rocep1s0: no counter map for its driver \(unknown\); name one with --vendor"
    ):
        collect_nic(sysfs, "rocep1s0", None, None, T0)
    assert collect_nic(sysfs, "rocep1s0", None, None, T0, host="h", vendor="mlx5").ports == ["1"]
    plain = collect_nic(sysfs, "rocep1s0", None, None, T0, host="h", vendor="ib")
    assert plain.source == "ib_counters" and "rx_bytes" in {c.name for c in plain.counters}


def test_vendor_comes_from_the_kernel_driver_before_the_device_name(sysfs):
    dev_dir = sysfs / "class" / "infiniband" / "mlx5_0"
    assert detect_vendor(dev_dir) == "mlx5"
    driver = sysfs / "bus" / "pci" / "drivers" / "bnxt_en"
    driver.mkdir(parents=True)
    (dev_dir / "device").mkdir()
    (dev_dir / "device" / "driver").symlink_to(driver)
    assert detect_vendor(dev_dir) == "bnxt"


def fake_ethtool(directory: Path, script: str) -> None:
    path = directory / "ethtool"
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_run_ethtool_runs_the_real_command(tmp_path, monkeypatch):
    fake_ethtool(tmp_path, f'[ "$1" = "-S" ] && [ "$2" = "eth0" ] && cat "{MLX5_ETHTOOL}"')
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert parse_ethtool_stats(run_ethtool("eth0")).values["rx_discards_phy"] == 58591428329


def test_run_ethtool_explains_a_missing_or_failing_ethtool(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EthtoolError, match="ethtool is not installed"):
        run_ethtool("eth0")
    fake_ethtool(
        tmp_path, 'echo "Cannot get stats strings information: Operation not supported" >&2; exit 94'
    )
    with pytest.raises(EthtoolError, match=r"ethtool -S eth0 failed \(exit 94\): Cannot get stats"):
        run_ethtool("eth0")


# --- SONiC COUNTERS_DB


def test_sonic_counters_db_gives_port_and_queue_counters():
    ports, queues = parse_sonic_counters_db(load_sonic_fragments())
    # the name maps list Ethernet4/8 and 90 queues, but only these objects have hashes in the sample
    assert list(ports) == ["Ethernet0"]
    assert list(queues) == ["Ethernet0:0", "Ethernet0:1"]
    assert ports["Ethernet0"]["SAI_PORT_STAT_PFC_3_RX_PKTS"] == 203
    assert queues["Ethernet0:1"]["SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES"] == 88


def test_sonic_snapshot_indexes_pfc_by_priority_and_queues_by_queue_id():
    ports, queues = parse_sonic_counters_db(load_sonic_fragments())
    snap = build_sonic_snapshot("leaf-1", T0, ports, queues)
    assert (snap.device_kind, snap.ports, snap.source) == ("switch", ["Ethernet0"], "sonic_port+sonic_queue")
    values = by_column(snap, "Ethernet0")
    assert [values[("rx_pfc_frames", n)] for n in range(8)] == [1200, 201, 202, 203, 204, 205, 206, 207]
    assert [values[("tx_pfc_frames", n)] for n in range(8)] == [1210, 211, 212, 213, 214, 215, 216, 217]
    assert spec_of(snap, "queue_watermark_bytes", 1).kind == "watermark"
    assert (values[("queue_watermark_bytes", 0)], values[("queue_watermark_bytes", 1)]) == (61, 88)
    assert values[("queue_tx_packets", 1)] == 60
    assert values[("queue_drops", 1)] == 39
    assert values[("queue_ecn_marked_packets", 1)] == 39
    assert (values[("rx_bytes", None)], values[("tx_bytes", None)]) == (800, 1000)
    assert values[("rx_discards", None)] == 100
    # SONiC's extrapolated EST_PORT_STAT_PFC_* are not hardware counters and stay unmapped
    assert not any(name in ("rx_pfc_duration_us", "rx_pfc_transitions") for name, _ in values)


def test_sonic_pfc_watchdog_state_fields_are_not_counters():
    obj = {
        "COUNTERS_PORT_NAME_MAP": {"Ethernet0": "oid:0x1"},
        "COUNTERS:oid:0x1": {"SAI_PORT_STAT_IF_IN_OCTETS": "5", "PFC_WD_STATUS": "stormed"},
    }
    assert parse_sonic_counters_db(obj) == ({"Ethernet0": {"SAI_PORT_STAT_IF_IN_OCTETS": 5}}, {})


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ([], "expected an object of hashes"),
        ({"COUNTERS:oid:0x1": {}}, "COUNTERS_PORT_NAME_MAP: missing"),
        ({"COUNTERS_PORT_NAME_MAP": {"Ethernet0": 5}}, "'Ethernet0' maps to 5"),
        (
            {"COUNTERS_PORT_NAME_MAP": {"Ethernet0": "oid:0x1"}, "COUNTERS:oid:0x1": "x"},
            r"COUNTERS:oid:0x1 \(Ethernet0\): expected a hash",
        ),
        (
            {
                "COUNTERS_PORT_NAME_MAP": {"Ethernet0": "oid:0x1"},
                "COUNTERS:oid:0x1": {"SAI_PORT_STAT_IF_IN_OCTETS": "12k"},
            },
            r"COUNTERS:oid:0x1 \(Ethernet0\) field SAI_PORT_STAT_IF_IN_OCTETS: not a non-negative integer",
        ),
    ],
)
def test_malformed_counters_db_names_the_key(obj, message):
    with pytest.raises(ValueError, match=message):
        parse_sonic_counters_db(obj)


def test_sonic_queue_names_must_carry_a_queue_index():
    with pytest.raises(ValueError, match="queue name 'Ethernet0': expected <port>:<queue index>"):
        build_sonic_snapshot("leaf-1", T0, {}, {"Ethernet0": {"SAI_QUEUE_STAT_PACKETS": 1}})
