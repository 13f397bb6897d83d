"""A real NCCL log's job (tests/fixtures' nccl-tests gather) as the sink stores it: its communication graph
and one collective."""

from __future__ import annotations

from fabricwatch.ingest.phases.coalescer import PhaseCoalescer
from fabricwatch.ingest.phases.nccl_phases import NcclPhaseReader
from fabricwatch.schemas.messages import CommGraph, Edge, Phase
from helpers.paths import FIXTURES

INIT_LOG = (FIXTURES / "nccl_tests_gather_perf_roce_ib_init_and_table.log").read_text()

COMM = "0xb2f794396f6d0bd1"

S = 10**9


def read(text: str, read_ns: int = 1) -> list:
    reader = NcclPhaseReader(PhaseCoalescer("gather"), warn=lambda _: None)
    out = [m for line in text.splitlines() for m in reader.line(line, read_ns)]
    return out + reader.close_all()


def stored_gather(lo_ns: int) -> list[CommGraph | Phase]:
    """What the sink gets of the real log's job to draw it: n013's graph, n014's side (it sends on
    channels 0 and 1 to rank 0), sent twice as after a restart, and one AllGather from ``lo_ns``."""
    (n013,) = [m for m in read(INIT_LOG) if isinstance(m, CommGraph)]
    n013.ts_ns = lo_ns
    n014 = CommGraph(
        job="gather",
        comm=COMM,
        ts_ns=lo_ns,
        host="n014",
        edges=[Edge(1, 0, c, 0, "send", "NET", "mlx5_2") for c in (0, 1)],
        rank_hosts={1: "n014"},
    )
    hosts = ["n013", "n014"]
    gather = Phase("gather", COMM, "AllGather", lo_ns + S, bytes=10**15, hosts=hosts, end_ns=lo_ns + 9 * S)
    return [n013, n014, n014, gather]
