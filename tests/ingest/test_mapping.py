"""Vendor-name mapping: the table itself, and what real tool output turns into.

Fixtures are real tool output; tests/fixtures/SOURCES.md names where each one comes from.
"""

from __future__ import annotations

import csv
import time
from importlib import resources

import pytest
from helpers.paths import FIXTURES

from fabricwatch.ingest.mapping import (
    build_combined_snapshot,
    build_snapshot,
    compile_table,
    known_sources,
    map_counters,
)
from fabricwatch.ingest.nic.parsers import parse_ethtool_stats
from fabricwatch.ingest.nic.vendors import nic_vendors
from fabricwatch.schemas.messages import CounterSpec, Snapshot, decode, encode
from fabricwatch.schemas.vocabulary import canonical

MLX5_ETHTOOL = FIXTURES / "ethtool_mlx5_cx6dx_k5.15_xdp_filtered.txt"
BNXT_ETHTOOL = FIXTURES / "ethtool_bnxt_en_rhel8_k4.18_go_ethtool_metrics.txt"
TELEGRAF_IB = FIXTURES / "telegraf_infiniband_lineprotocol_readme_mlx5_bond.txt"
T0 = 1_700_000_000_000_000_000
SOURCES = {
    "mlx5_ethtool",
    "bnxt_ethtool",
    "mlx5_hw_counters",
    "bnxt_re_hw_counters",
    "irdma_hw_counters",
    "ice_ethtool",
    "i40e_ethtool",
    "ionic_ethtool",
    "mlx4_ethtool",
    "ib_counters",
    "ethtool_module",
    "sonic_port",
    "sonic_queue",
    "sonic_pg",
    "openconfig",
    "srlinux",
}


def table_rows() -> list[dict[str, str]]:
    text = (
        resources.files("fabricwatch.schemas").joinpath("data", "vendor_map.csv").read_text(encoding="utf-8")
    )
    return list(csv.DictReader(line for line in text.splitlines() if line and not line.startswith("#")))


def columns(source: str, raw: dict[str, int]) -> dict[tuple[str, int | None], tuple[CounterSpec, int]]:
    specs, values = map_counters(source, raw)
    return {(s.name, s.index): (s, v) for s, v in zip(specs, values, strict=True)}


def telegraf_fields(line: str) -> dict[str, int]:
    """Fields of one influx line-protocol line whose values are all integers (``name=123i``)."""
    fields = line.split(" ")[1]
    return {name: int(value.rstrip("i")) for name, value in (f.split("=") for f in fields.split(","))}


# --- the table


def test_table_covers_the_sources_collectors_use():
    assert set(known_sources()) == SOURCES
    assert {row["source"] for row in table_rows()} == SOURCES
    used = {source for vendor in nic_vendors().values() for source in vendor.sources if source is not None}
    assert used <= SOURCES, "every vendor the host collector knows reads through rows of the table"


@pytest.mark.parametrize("row", table_rows(), ids=lambda r: f"{r['source']}:{r['vendor_name']}")
def test_every_row_names_a_canonical_counter_of_matching_scope(row):
    definition = canonical().get(row["canonical"])
    assert definition is not None, f"{row['canonical']} is not in counters.csv"
    indexed = definition.scope in ("priority", "queue")
    assert row["vendor_name"].count("{n}") == (1 if indexed else 0)
    assert int(row["width"]) in (8, 16, 32, 64)
    assert int(row["scale"]) >= 1


def test_vendor_names_are_unique_per_source():
    pairs = [(row["source"], row["vendor_name"]) for row in table_rows()]
    assert len(pairs) == len(set(pairs))


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ("mlx5_ethtool,rx_foo,no_such_counter,64,1", "not a canonical counter"),
        ("mlx5_ethtool,rx_prio_pause,rx_pfc_frames,64,1", "needs exactly one {n}"),
        ("mlx5_ethtool,rx_{n}_bytes,rx_bytes,64,1", "needs no {n}"),
        ("mlx5_ethtool,rx_bytes_phy,rx_bytes,24,1", "width '24'"),
        ("mlx5_ethtool,rx_bytes_phy,rx_bytes,64,0", "scale '0'"),
    ],
)
def test_a_bad_table_row_is_refused_with_its_line(row, reason):
    text = f"# comment\nsource,vendor_name,canonical,width,scale\n{row}\n"
    with pytest.raises(ValueError, match=r"line 3: .*") as err:
        compile_table(text)
    assert reason in str(err.value)


def test_one_column_keeps_one_width_within_a_source():
    text = "source,vendor_name,canonical,width,scale\ns,a,out_of_buffer,32,1\ns,b,out_of_buffer,64,1\n"
    with pytest.raises(ValueError, match="line 3: s out_of_buffer has width/scale 64/1 but line 2 says 32/1"):
        compile_table(text)


def test_unknown_source_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown counter source 'mlx6_ethtool'") as err:
        map_counters("mlx6_ethtool", {"rx_bytes_phy": 1})
    for source in SOURCES:
        assert source in str(err.value)


# --- mlx5 ethtool -S (real ConnectX-6 Dx output)


@pytest.fixture(scope="module")
def mlx5() -> dict[tuple[str, int | None], tuple[CounterSpec, int]]:
    return columns("mlx5_ethtool", parse_ethtool_stats(MLX5_ETHTOOL.read_text()).values)


def test_mlx5_discards_and_pause_counters(mlx5):
    spec, value = mlx5[("rx_discards", None)]
    assert value == 58591428329
    assert (spec.kind, spec.width, spec.scale) == ("counter", 64, 1)
    assert mlx5[("tx_pause_frames", None)][1] == 5745055  # tx_pause_ctrl_phy
    assert mlx5[("tx_pause_duration_us", None)][1] == 771103810  # tx_global_pause_duration
    assert mlx5[("tx_bytes", None)][1] == 357657403514  # tx_bytes_phy, not the software tx_bytes
    assert mlx5[("rx_packets", None)][1] == 97052087562


def test_mlx5_rx_out_of_buffer_is_a_32_bit_queue_counter(mlx5):
    spec, value = mlx5[("out_of_buffer", None)]
    assert (spec.width, value) == (32, 990473555)


def test_mlx5_per_priority_drops_are_their_own_column(mlx5):
    # rx_prio0_discards 58591314012 must not be mistaken for a PFC counter or for rx_discards
    assert mlx5[("rx_prio_discards", 0)][1] == 58591314012
    assert [key for key, (_, value) in mlx5.items() if value == 58591314012] == [("rx_prio_discards", 0)]
    assert not any(name.startswith(("rx_pfc", "tx_pfc")) for name, _ in mlx5)


def test_mlx5_pfc_counters_get_their_priority_index():
    raw = {
        "rx_prio3_pause": 10,
        "rx_prio3_pause_duration": 20,
        "tx_prio3_pause": 30,
        "rx_prio3_pause_transition": 4,
    }
    mapped = columns("mlx5_ethtool", raw)
    assert {key: value for key, (_, value) in mapped.items()} == {
        ("rx_pfc_frames", 3): 10,
        ("rx_pfc_duration_us", 3): 20,
        ("tx_pfc_frames", 3): 30,
        ("rx_pfc_transitions", 3): 4,
    }


# --- bnxt ethtool -S (real bnxt_en output, RHEL 8 kernel 4.18)


@pytest.fixture(scope="module")
def bnxt() -> dict[tuple[str, int | None], tuple[CounterSpec, int]]:
    return columns("bnxt_ethtool", parse_ethtool_stats(BNXT_ETHTOOL.read_text()).values)


def test_bnxt_port_counters(bnxt):
    assert bnxt[("rx_bytes", None)][1] == 7258696030461
    assert bnxt[("tx_bytes", None)][1] == 15434985234825
    assert bnxt[("rx_packets", None)][1] == 3400498238  # rx_good_frames
    assert bnxt[("rx_discards", None)][1] == 14  # rx_stat_discard, not the per-ring "[0]: rx_discards" (0)
    assert bnxt[("tx_errors", None)][1] == 12  # tx_err
    assert bnxt[("rx_buffer_passed_thres", None)][1] == 417
    assert bnxt[("link_downed", None)] == (CounterSpec("link_downed", width=64), 2)


def test_bnxt_pfc_counters_cover_all_eight_priorities(bnxt):
    for name in (
        "rx_pfc_frames",
        "tx_pfc_frames",
        "rx_pfc_duration_us",
        "tx_pfc_duration_us",
        "rx_pfc_transitions",
    ):
        assert sorted(index for n, index in bnxt if n == name) == list(range(8))
    assert sorted(index for n, index in bnxt if n == "queue_tx_bytes") == list(range(8))


# --- RDMA hw_counters and IB PMA counters


def test_mlx5_hw_counters_from_telegraf_sample():
    lines = TELEGRAF_IB.read_text().splitlines()
    mapped = columns("mlx5_hw_counters", telegraf_fields(lines[1]))
    for name in ("rx_ecn_marked_packets", "cnp_sent", "cnp_received", "cnp_ignored"):
        assert mapped[(name, None)][0].width == 64
    for name in ("out_of_buffer", "out_of_sequence", "packet_seq_err", "local_ack_timeout_err"):
        assert mapped[(name, None)][0].width == 32


def test_ib_data_counters_count_octets_divided_by_four():
    lines = TELEGRAF_IB.read_text().splitlines()
    mapped = columns("ib_counters", telegraf_fields(lines[0]))
    spec, value = mapped[("rx_bytes", None)]
    assert (spec.width, spec.scale, value) == (64, 4, 34600185253)  # port_rcv_data
    assert mapped[("tx_bytes", None)][0].scale == 4
    assert mapped[("tx_wait", None)][0].width == 32
    assert mapped[("symbol_errors", None)][0].width == 16
    assert mapped[("link_downed", None)][0].width == 8


def test_bnxt_re_old_and_new_names_give_the_same_columns():
    """Names from bnxt_re hw_counters.c before and after the 2025 rename to mlx5-style names."""
    old = {
        "rx_ecn_marked_pkts": 5,
        "tx_cnp_pkts": 6,
        "rx_cnp_pkts": 7,
        "oos_drop_count": 8,
        "to_retransmits": 9,
    }
    new = {
        "np_ecn_marked_roce_packets": 5,
        "np_cnp_pkts": 6,
        "rp_cnp_handled": 7,
        "out_of_sequence": 8,
        "local_ack_timeout_err": 9,
    }
    assert map_counters("bnxt_re_hw_counters", old) == map_counters("bnxt_re_hw_counters", new)
    specs, _ = map_counters("bnxt_re_hw_counters", new)
    assert [s.name for s in specs] == [
        "cnp_received",
        "cnp_sent",
        "local_ack_timeout_err",
        "out_of_sequence",
        "rx_ecn_marked_packets",
    ]
    assert {s.width for s in specs} == {64}


def test_when_both_spellings_appear_the_newer_wins_once():
    specs, values = map_counters("bnxt_re_hw_counters", {"rx_cnp_pkts": 1, "rp_cnp_handled": 2})
    assert ([s.name for s in specs], values) == (["cnp_received"], [2])


# --- snapshot building


def test_columns_are_sorted_by_name_then_index():
    specs, _ = map_counters(
        "sonic_port",
        {f"SAI_PORT_STAT_PFC_{n}_RX_PKTS": n for n in (7, 0, 3)} | {"SAI_PORT_STAT_IF_IN_OCTETS": 1},
    )
    assert [(s.name, s.index) for s in specs] == [
        ("rx_bytes", None),
        ("rx_pfc_frames", 0),
        ("rx_pfc_frames", 3),
        ("rx_pfc_frames", 7),
    ]


def test_build_snapshot_unions_columns_and_leaves_gaps_as_none():
    raw = parse_ethtool_stats(MLX5_ETHTOOL.read_text()).values
    partial = {"rx_discards_phy": 7, "rx_prio3_pause": 2}
    snap = build_snapshot("h1/mlx5_0", "nic", T0, "mlx5_ethtool", {"1": raw, "2": partial})
    names = [(c.name, c.index) for c in snap.counters]
    assert names == sorted(names, key=lambda k: (k[0], -1 if k[1] is None else k[1]))
    row1, row2 = (dict(zip(names, row, strict=True)) for row in snap.values)
    assert row1[("rx_pfc_frames", 3)] is None
    assert row2[("rx_pfc_frames", 3)] == 2
    assert (row1[("rx_discards", None)], row2[("rx_discards", None)]) == (58591428329, 7)
    assert row2[("tx_bytes", None)] is None
    assert snap.source == "mlx5_ethtool"
    assert decode(encode(snap), Snapshot) == snap.packed()


def test_combined_snapshot_takes_each_column_from_the_first_source_that_has_it():
    per_port = {
        "1": {
            "mlx5_ethtool": {"tx_bytes_phy": 4000},
            "ib_counters": {"port_xmit_data": 1000, "link_downed": 1},
        },
        "2": {"ib_counters": {"port_xmit_data": 2000}},
    }
    snap = build_combined_snapshot("h/mlx5_0", "nic", T0, ["mlx5_ethtool", "ib_counters"], per_port)
    tx = next(i for i, c in enumerate(snap.counters) if c.name == "tx_bytes")
    assert snap.counters[tx] == CounterSpec("tx_bytes", width=64, scale=1)
    # port 2 has no ethtool value; a PMA value (scale 4) in a scale-1 column would be wrong
    assert [row[tx] for row in snap.values] == [4000, None]
    assert snap.source == "mlx5_ethtool+ib_counters"


def test_a_source_that_gave_nothing_is_not_named_as_the_snapshot_s_source():
    """Found (issue 33, 6): an i40iw device whose hw_counters all read N/A was said to come from
    them. Only the sources that gave a column are named."""
    per_port = {"1": {"mlx5_ethtool": {}, "ib_counters": {"port_xmit_data": 1000}}}
    snap = build_combined_snapshot("h/mlx5_0", "nic", T0, ["mlx5_ethtool", "ib_counters"], per_port)
    assert snap.source == "ib_counters"


def test_combined_snapshot_refuses_a_source_missing_from_the_order():
    with pytest.raises(ValueError, match="not in sources"):
        build_combined_snapshot("d", "nic", T0, ["ib_counters"], {"1": {"mlx5_ethtool": {}}})


def test_mapping_a_nics_counters_costs_well_under_a_millisecond():
    raw = parse_ethtool_stats(BNXT_ETHTOOL.read_text()).values  # ~330 raw counters
    assert len(raw) > 300
    map_counters("bnxt_ethtool", raw)  # first call resolves and caches every name
    runs = 200
    start = time.perf_counter()
    for _ in range(runs):
        map_counters("bnxt_ethtool", raw)
    per_call = (time.perf_counter() - start) / runs
    assert per_call < 1e-3, f"{per_call * 1e6:.0f} µs per call"


def test_counters_of_real_output_that_had_no_column_now_have_one():
    """Found: real mlx5 and bnxt output carried the lossless drop signal, per-priority traffic, CRC
    and FEC counters and the RDMA error counters, and the map dropped them all."""
    mlx5 = columns("mlx5_ethtool", parse_ethtool_stats(MLX5_ETHTOOL.read_text()).values)
    per_prio = {"rx_prio_discards", "rx_prio_bytes", "rx_prio_packets", "tx_prio_bytes", "tx_prio_packets"}
    assert {(name, 0) for name in per_prio} <= mlx5.keys()
    assert mlx5[("rx_prio_discards", 0)][0].width == 64
    hw = columns("mlx5_hw_counters", telegraf_fields(TELEGRAF_IB.read_text().splitlines()[1]))
    rdma = {
        "duplicate_requests",
        "req_cqe_errors",
        "resp_cqe_errors",
        "rx_icrc_errors",
        "roce_adaptive_retrans",
        "roce_adaptive_retrans_timeouts",
        "roce_slow_restarts",
        "roce_slow_restart_cnps",
        "roce_slow_restart_transitions",
    }
    assert {(name, None) for name in rdma} <= hw.keys()
    assert all(hw[(name, None)][0].width == 32 for name in rdma)  # Q counters: they wrap at 2^32
    bnxt = columns("bnxt_ethtool", parse_ethtool_stats(BNXT_ETHTOOL.read_text()).values)
    assert {
        ("rx_crc_errors", None),
        ("fec_corrected_blocks", None),
        ("fec_uncorrectable_blocks", None),
    } <= bnxt.keys()
