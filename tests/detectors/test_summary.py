"""The per-port projection that storage and dashboards use, on hand-made frames and a simulated one."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.paths import SCENARIOS

from fabricwatch.detectors.rates import Layout, RateEngine, RateFrame
from fabricwatch.detectors.summary import project, summarise, summarise_batch
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.schemas.messages import (
    PORT_RATE_COLUMNS,
    CounterSpec,
    DecodeError,
    PortRates,
    RatesBatch,
    Snapshot,
    decode,
    decode_rates,
    encode,
)
from fabricwatch.schemas.trace import TraceReader

COL = {c: i for i, c in enumerate(PORT_RATE_COLUMNS)}


def frame(specs: list[CounterSpec], rows: list[list[float]], kind: str = "switch") -> RateFrame:
    layout = Layout.of(tuple(specs))
    values = np.array(rows, dtype=np.float64)
    ports = [f"Ethernet{i}" for i in range(values.shape[0])]
    return RateFrame("leaf0", kind, 2_000_000_000, 1.0, ports, layout, values)


SWITCH = [
    CounterSpec("tx_bytes"),
    CounterSpec("rx_bytes"),
    CounterSpec("rx_pfc_frames", index=3),
    CounterSpec("rx_pfc_frames", index=4),
    CounterSpec("rx_pfc_duration_us", index=3),
    CounterSpec("rx_pfc_duration_us", index=4),
    CounterSpec("queue_ecn_marked_packets", index=3),
    CounterSpec("queue_drops", index=3),
    CounterSpec("rx_discards"),
    CounterSpec("queue_occupancy_bytes", kind="gauge", index=3),
    CounterSpec("queue_occupancy_bytes", kind="gauge", index=4),
    CounterSpec("queue_watermark_bytes", kind="watermark", index=3),
    CounterSpec("queue_watermark_bytes", kind="watermark", index=4),
]


def test_sums_over_priorities_and_queues_with_units():
    f = frame(
        SWITCH,
        [
            [1e9, 2e9, 10, 5, 300_000, 200_000, 7, 1, 2, 1000, 3000, 5000, 2000],
            [0, 0, np.nan, 4, np.nan, 100_000, np.nan, np.nan, np.nan, np.nan, 10, np.nan, np.nan],
        ],
    )
    out = project(f, np.array([50e9, 50e9]))  # 400 Gb/s in bytes per second
    p0, p1 = out
    assert p0[COL["tx_bps"]] == 8e9 and p0[COL["rx_bps"]] == 16e9
    assert p0[COL["tx_util"]] == pytest.approx(8e9 / 400e9)
    assert p0[COL["rx_pause_pps"]] == 15
    assert p0[COL["rx_pause_frac"]] == pytest.approx(0.5)
    assert p0[COL["ecn_marked_pps"]] == 7
    assert p0[COL["discards_pps"]] == 3
    assert p0[COL["queue_bytes_max"]] == 3000 and p0[COL["watermark_bytes_max"]] == 5000
    # unknown values do not contribute; a sum with no known part is unknown, never zero
    assert p1[COL["rx_pause_pps"]] == 4 and p1[COL["rx_pause_frac"]] == pytest.approx(0.1)
    assert np.isnan(p1[COL["ecn_marked_pps"]]) and np.isnan(p1[COL["discards_pps"]])
    assert p1[COL["queue_bytes_max"]] == 10 and np.isnan(p1[COL["watermark_bytes_max"]])
    # counters this device does not report at all are unknown
    assert np.isnan(p0[COL["cnp_sent_pps"]]) and np.isnan(p0[COL["tx_pps"]])


def test_a_poll_with_every_value_known_projects_as_it_does_beside_unknowns():
    """Such a poll takes a shorter path (one product); columns the device has no counter for stay
    unknown on it."""
    known = [1e9, 2e9, 10, 5, 300_000, 200_000, 7, 1, 2, 1000, 3000, 5000, 2000]
    partly = [0, 0, np.nan, 4, np.nan, 100_000, np.nan, np.nan, np.nan, np.nan, 10, np.nan, np.nan]
    alone = project(frame(SWITCH, [known]), np.array([50e9]))[0]
    beside = project(frame(SWITCH, [known, partly]), np.array([50e9, 50e9]))[0]
    np.testing.assert_allclose(alone, beside, rtol=1e-12)  # NaN alike; BLAS rounds one row and two apart
    assert np.isnan(alone[COL["cnp_sent_pps"]]) and alone[COL["rx_pause_pps"]] == 15


def test_utilisation_unknown_without_line_rate():
    out = project(frame(SWITCH[:2], [[1e9, 1e9]]))
    assert np.isnan(out[0, COL["tx_util"]]) and out[0, COL["tx_bps"]] == 8e9


def test_nic_counters_map_to_the_same_columns():
    specs = [
        CounterSpec("rx_ecn_marked_packets"),
        CounterSpec("cnp_sent"),
        CounterSpec("cnp_received"),
        CounterSpec("tx_pfc_duration_us", index=3),
        CounterSpec("tx_pause_duration_us"),
        CounterSpec("out_of_buffer", width=32),
    ]
    out = project(frame(specs, [[100, 50, 20, 250_000, 250_000, 9]], kind="nic"))[0]
    assert out[COL["ecn_marked_pps"]] == 100
    assert out[COL["cnp_sent_pps"]] == 50 and out[COL["cnp_received_pps"]] == 20
    assert out[COL["tx_pause_frac"]] == pytest.approx(0.5)
    assert out[COL["discards_pps"]] == 9


def test_message_round_trips_with_unknowns_as_nan():
    msg = summarise(frame(SWITCH[:2], [[1e9, np.nan]]))
    wire = encode(msg)
    back = decode(wire, PortRates)
    assert back.columns == list(PORT_RATE_COLUMNS)
    got = back.matrix()
    assert got.shape == (1, len(PORT_RATE_COLUMNS))
    assert got[0, COL["tx_bps"]] == 8e9 and np.isnan(got[0, COL["rx_bps"]])
    assert decode(wire).device == "leaf0"  # in the Message union too


def test_rows_of_numbers_from_an_earlier_build_are_still_read():
    wire = (
        b'{"type":"rates","device":"d","device_kind":"nic","ts_ns":1,"dt_s":1.0,"ports":["p","q"],'
        b'"columns":["tx_bps","rx_bps"],"values":[[1.5,null],[2.0,3.0]]}'
    )
    got = decode(wire, PortRates).matrix()
    assert got[0, 0] == 1.5 and np.isnan(got[0, 1]) and got[1].tolist() == [2.0, 3.0]


def test_ragged_message_is_a_clear_error():
    with pytest.raises(ValueError, match="values\\[0\\] has 1 entries but there are 2 columns"):
        PortRates("d", "nic", 1, 1.0, ["p"], ["tx_bps", "rx_bps"], [[1.0]])
    with pytest.raises(ValueError, match="values has 8 bytes but 1 ports x 2 columns of float64 take 16"):
        PortRates("d", "nic", 1, 1.0, ["p"], ["tx_bps", "rx_bps"], b"\0" * 8)
    short = b'{"type":"rates","device":"d","device_kind":"nic","ts_ns":1,"dt_s":1.0,"ports":["p"],'
    with pytest.raises(DecodeError, match="16"):
        decode(short + b'"columns":["a","b"],"values":"AAAAAAAAAAA="}', PortRates)


def test_every_frame_of_a_simulated_fabric(tmp_path):
    trace = tmp_path / "t.trace"
    simulate(load_scenario(SCENARIOS / "demo.yaml", {"duration": 4}), trace)
    engine = RateEngine()
    kinds = set()
    with TraceReader(trace) as reader:
        for rec in reader:
            if rec.topic != "fabric.counters":
                continue
            f = engine.update(decode(rec.value(), Snapshot))
            if f is None:
                continue
            out = project(f)
            assert out.shape == (len(f.ports), len(PORT_RATE_COLUMNS))
            tx = f.port("tx_bytes")
            assert np.array_equal(out[:, COL["tx_bps"]], tx * 8, equal_nan=True)
            known = out[~np.isnan(out)]
            assert (known >= 0).all()
            kinds.add(f.device_kind)
    assert kinds == {"nic", "switch"}


def test_a_batch_of_frames_is_each_frame_summarised_in_one_message():
    """Frames of different layouts and widths, with and without line rates, in one ``RatesBatch``:
    each device's rows are exactly what its own ``summarise`` gives, in the frames' order, read by
    column name (a column no frame's counters feed is not sent: unknown)."""
    nic_specs = [CounterSpec("tx_bytes"), CounterSpec("rx_bytes"), CounterSpec("cnp_sent")]
    frames = [
        frame(SWITCH, np.arange(26, dtype=float).reshape(2, 13)),
        frame(nic_specs, [[1e9, np.nan, 5]], kind="nic"),
        frame(SWITCH, [[np.nan] * 13]),
        frame(nic_specs, [[2e9, 3e9, 0]], kind="nic"),
    ]
    frames = [
        RateFrame(f"d{i}", f.device_kind, f.ts_ns + i, 0.5 + i, f.ports, f.layout, f.values)
        for i, f in enumerate(frames)
    ]
    lines = [np.array([50e9, 0.0]), np.array([25e9]), None, None]
    [batch] = summarise_batch(frames, lines)
    back = decode(encode(batch), RatesBatch)
    assert back.port_counts == [2, 1, 1, 1] and back.devices == ["d0", "d1", "d2", "d3"]
    for got, f, line in zip(back.split(), frames, lines, strict=True):
        want = summarise(f, line)
        assert (got.device, got.device_kind, got.ts_ns, got.dt_s, got.ports) == (
            want.device,
            want.device_kind,
            want.ts_ns,
            want.dt_s,
            want.ports,
        )
        by_name = dict(zip(got.columns, got.matrix().T, strict=True))
        nan = np.full(len(got.ports), np.nan)
        rows = np.column_stack([by_name.get(c, nan) for c in PORT_RATE_COLUMNS])
        np.testing.assert_array_equal(rows, want.matrix())
    assert [m.device for m in decode_rates(encode(batch))] == ["d0", "d1", "d2", "d3"]


def test_a_batch_sends_the_columns_its_counters_feed_and_no_others():
    """A NIC feeds no queue column and a switch no CNP column: a column NaN in every row for want
    of a counter is not sent. One fed but unknown in every row (no line rate, no reading) is."""
    nic_specs = [CounterSpec("tx_bytes"), CounterSpec("cnp_sent")]
    nic = frame(nic_specs, [[1e9, 5]], kind="nic")
    [batch] = summarise_batch([nic], [None])
    assert batch.columns == ["tx_bps", "tx_util", "cnp_sent_pps"]  # PORT_RATE_COLUMNS order
    switch = frame(SWITCH, [[np.nan] * 13])  # read nothing this time
    [batch] = summarise_batch([nic, switch], [None, None])
    assert {"cnp_sent_pps", "watermark_bytes_max", "discards_pps"} <= set(batch.columns)
    assert not {"pg_drops_pps", "crc_errors_pps", "cnp_received_pps"} & set(batch.columns)
    assert batch.columns == [c for c in PORT_RATE_COLUMNS if c in batch.columns]  # in their order
    nic_rates, switch_rates = batch.split()
    assert nic_rates.column("tx_bps").tolist() == [8e9]  # read by name, wherever it is
    assert np.isnan(switch_rates.column("pg_drops_pps")).all()  # not sent: unknown, per port


def test_a_batch_is_cut_between_frames_at_its_row_limit():
    frames = [frame(SWITCH, np.ones((3, 13))) for _ in range(5)]
    batches = summarise_batch(frames, [None] * 5, max_rows=7)
    assert [b.port_counts for b in batches] == [[3, 3], [3, 3], [3]]


def test_an_inconsistent_batch_is_a_clear_error():
    cols = ["tx_bps"]
    with pytest.raises(ValueError, match="ts_ns has 1 entries but there are 2 devices"):
        RatesBatch(["a", "b"], ["nic", "nic"], [1], [1.0, 1.0], [1, 1], ["p", "p"], cols, b"\0" * 16)
    with pytest.raises(ValueError, match="port_counts sum to 3 but there are 2 ports"):
        RatesBatch(["a", "b"], ["nic", "nic"], [1, 1], [1.0, 1.0], [1, 2], ["p", "p"], cols, b"\0" * 16)
    with pytest.raises(ValueError, match="values has 8 bytes but 2 ports x 1 columns of float64 take 16"):
        RatesBatch(["a", "b"], ["nic", "nic"], [1, 1], [1.0, 1.0], [1, 1], ["p", "p"], cols, b"\0" * 8)
