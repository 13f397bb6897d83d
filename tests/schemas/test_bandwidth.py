"""Issue 35, item 1: a collective's algorithm and bus bandwidth as nccl-tests and the NCCL Inspector
define them, reproduced from real outputs: the Inspector's README records (which carry the
bandwidths it computed) and two nccl-tests tables (a gather over 2 ranks on RoCE/IB, an AllReduce
over 16 H100s on 2 nodes), every row, out of place and in place."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.job_records import inspector_examples
from helpers.paths import FIXTURES

from fabricwatch.ingest.phases import nccl_tests
from fabricwatch.schemas.bandwidth import bandwidths, bucket_name, median_and_tail, size_bucket


def test_the_inspectors_own_bandwidths_are_reproduced_from_its_sizes_and_times():
    recs = inspector_examples()
    perf = [r["coll_perf"] for r in recs]
    algbw, busbw = bandwidths(
        np.array([p["coll"] for p in perf]),
        np.array([p["coll_msg_size_bytes"] for p in perf]),
        np.array([r["header"]["n_ranks"] for r in recs]),
        np.array([p["coll_exec_time_us"] * 1000 for p in perf]),
    )
    assert [p["coll"] for p in perf] == ["AllReduce", "ReduceScatter"]
    assert algbw == pytest.approx([p["coll_algobw_gbs"] for p in perf], abs=1e-6)
    assert busbw == pytest.approx([p["coll_busbw_gbs"] for p in perf], abs=1e-6)


@pytest.mark.parametrize(
    ("name", "op"),
    [
        ("nccl_tests_gather_perf_roce_ib_init_and_table.log", None),  # the output names its test
        ("nccl_tests_all_reduce_16rank_2node_h100_a3mega.log", "AllReduce"),  # its command says
    ],
)
def test_an_nccl_tests_tables_bandwidths_are_reproduced_from_its_sizes_and_times(name, op):
    run = nccl_tests.parse((FIXTURES / name).read_text())
    op = op or run.op
    assert run.rows and run.nranks in (2, 16) and op in ("Gather", "AllReduce")
    for half in ("out_of_place", "in_place"):
        printed = [getattr(r, half) for r in run.rows]
        algbw, busbw = bandwidths(
            np.array([op] * len(run.rows)),
            np.array([r.rank_bytes for r in run.rows]),
            np.full(len(run.rows), run.nranks),
            np.array([t.time_us * 1000 for t in printed]),
        )
        # nccl-tests prints a time of 4 or 5 digits and bandwidths to 0.01
        assert algbw == pytest.approx([t.algbw for t in printed], rel=1e-3, abs=0.006), half
        assert busbw == pytest.approx([t.busbw for t in printed], rel=1e-3, abs=0.006), half
    if run.avg_busbw is not None:  # the mean of every row's busbw, both halves
        both = [t.busbw for r in run.rows for t in (r.out_of_place, r.in_place)]
        assert np.mean(both) == pytest.approx(run.avg_busbw, abs=0.01)


def test_a_kineto_kernels_bandwidth_by_hand():
    """HolisticTraceAnalysis' AllReduce kernel: 6,637,568 floats over 2 ranks in 2,636.669 µs."""
    algbw, busbw = bandwidths(
        np.array(["AllReduce"]), np.array([6637568 * 4]), np.array([2]), np.array([2636669])
    )
    assert algbw[0] == pytest.approx(26550272 / 1e9 / 0.002636669)
    assert busbw[0] == pytest.approx(algbw[0] * 2 * 1 / 2)


def test_a_call_without_a_duration_has_no_bandwidth_rather_than_an_infinite_one():
    algbw, busbw = bandwidths(
        np.array(["AllGather", "Send"]), np.array([1 << 20, 1 << 20]), np.array([8, 2]), np.array([0, 1000])
    )
    assert np.isnan(algbw[0]) and np.isnan(busbw[0])
    assert algbw[1] == pytest.approx((1 << 20) / 1e9 / 1e-6) and busbw[1] == algbw[1]


def test_size_buckets_and_a_windows_median_and_tail():
    assert size_bucket(np.array([0, 1, 1023, 1024, (1 << 30) + 5])).tolist() == [0, 1, 512, 1024, 1 << 30]
    assert [bucket_name(b) for b in (8, 256 << 10, 1 << 30)] == ["8 B", "256 KiB", "1 GiB"]
    med, tail = median_and_tail(np.array([1.0, 2.0, np.nan, 3.0, 100.0]))
    assert med == 2.5 and 90 < tail < 100
    assert all(np.isnan(median_and_tail(np.array([np.nan]))))


def test_an_nccl_tests_table_behind_mpiruns_line_prefixes_reads_the_same():
    """``mpirun --tag-output`` prefixes every line with ``[1,0]<stdout>:`` (aws-k8s-tester#503)."""
    text = (FIXTURES / "nccl_tests_all_reduce_16rank_2node_h100_a3mega.log").read_text()
    tagged = "\n".join(f"[1,{i % 16}]<stdout>:{line}" for i, line in enumerate(text.splitlines()))
    assert nccl_tests.looks_like(tagged)
    assert nccl_tests.parse(tagged) == nccl_tests.parse(text)
