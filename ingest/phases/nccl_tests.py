"""An nccl-tests run's output (``all_reduce_perf`` and its siblings): the test, its ranks and hosts,
and its table of sizes, times and bandwidths.

A benchmark is not a job: it has no time per row, so ``phases import`` does not make phases of it;
it says what the run measured and checks its bus bandwidth against the definitions of
``schemas/bandwidth.py`` (nccl-tests' ``doc/PERFORMANCE.md``), which job metrics share.

Read as nccl-tests prints it (``src/common.cu``, ``src/util.cu``, 2.13 to 2.19): ``#`` header lines
(``# Collective test starting: all_reduce_perf`` since mid-2025, ``#  Rank  0 Group  0 Pid ... on
HOST device ...``), then rows of size, count, type, redop, root and, out of place and in place,
time (µs), algbw, busbw (GB/s) and ``#wrong`` (``N/A`` with ``-c 0``). NCCL's own log lines and
mpirun's ``[1,0]<stdout>:`` prefixes may be mixed in; they are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:)?")
_TEST = re.compile(r"^#\s*Collective test starting:\s*(\w+)")
_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device")
_HEADER = re.compile(r"^#\s+size\s+count\s+type\s+redop\s+root\s+time\s+algbw\s+busbw")
_NUMBER = r"[-+0-9.eE]+"
_ROW = re.compile(
    rf"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)"
    rf"\s+({_NUMBER})\s+({_NUMBER})\s+({_NUMBER})\s+(\S+)"
    rf"\s+({_NUMBER})\s+({_NUMBER})\s+({_NUMBER})\s+(\S+)\s*$"
)
_TABLE = re.compile(_PREFIX.pattern + _HEADER.pattern.removeprefix("^"), re.MULTILINE)
_AVG = re.compile(rf"^#\s*Avg bus bandwidth\s*:\s*({_NUMBER})")

TEST_OPS = {
    "all_reduce_perf": "AllReduce",
    "all_gather_perf": "AllGather",
    "reduce_scatter_perf": "ReduceScatter",
    "alltoall_perf": "AllToAll",
    "broadcast_perf": "Broadcast",
    "reduce_perf": "Reduce",
    "sendrecv_perf": "SendRecv",
    "gather_perf": "Gather",
    "scatter_perf": "Scatter",
    "hypercube_perf": "HyperCube",
}
"""nccl-tests' binaries and the collective each measures."""
TYPE_BYTES = {
    "int8": 1,
    "uint8": 1,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "half": 2,
    "float": 4,
    "double": 8,
    "bfloat16": 2,
    "f8e4m3": 1,
    "f8e5m2": 1,
}
"""Bytes of nccl-tests' type names (``test_typenames``): a row's count times it is the buffer
each rank gave NCCL."""


@dataclass(frozen=True)
class Timing:
    time_us: float
    algbw: float
    """GB/s (1e9 bytes a second), as nccl-tests prints it."""
    busbw: float


@dataclass(frozen=True)
class Row:
    size: int
    """Bytes of the whole array (nccl-tests' S): for an AllGather, every rank's share."""
    count: int
    type: str
    out_of_place: Timing
    in_place: Timing

    @property
    def rank_bytes(self) -> int | None:
        """The buffer each rank gave NCCL (count x the type's size), None for a type unknown here."""
        size = TYPE_BYTES.get(self.type)
        return None if size is None else self.count * size


@dataclass
class BenchRun:
    test: str = ""
    """The binary, where the output names it (``# Collective test starting:``, since mid-2025)."""
    rank_hosts: dict[int, str] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    avg_busbw: float | None = None

    @property
    def op(self) -> str | None:
        return TEST_OPS.get(self.test)

    @property
    def nranks(self) -> int:
        return len(self.rank_hosts)

    def describe(self) -> str:
        """One line: what ran where, and what it measured."""
        hosts = sorted(set(self.rank_hosts.values()))
        test = self.test or "a test it does not name"
        named = ", ".join(hosts[:4]) + (", ..." if len(hosts) > 4 else "")
        where = f"{self.nranks} ranks on {len(hosts)} hosts ({named})"
        if not self.rows:
            return f"an nccl-tests run of {test}, {where}, with no rows"
        peak = max(max(r.out_of_place.busbw, r.in_place.busbw) for r in self.rows)
        return (
            f"an nccl-tests run of {test}, {where}: {len(self.rows)} sizes from "
            f"{self.rows[0].size} to {self.rows[-1].size} bytes, bus bandwidth up to {peak:g} GB/s"
        )


def looks_like(text: str) -> bool:
    """Whether ``text`` holds an nccl-tests table (its column header line), in one scan."""
    return _TABLE.search(text) is not None


def parse(text: str) -> BenchRun:
    run = BenchRun()
    in_table = False
    for raw in text.splitlines():
        line = _PREFIX.sub("", raw)
        if m := _TEST.match(line):
            run.test = m.group(1)
        elif m := _RANK.match(line):
            run.rank_hosts[int(m.group(1))] = m.group(2)
        elif _HEADER.match(line):
            in_table = True
        elif m := _AVG.match(line):
            run.avg_busbw = float(m.group(1))
        elif in_table and (m := _ROW.match(line)):
            g = m.groups()
            run.rows.append(
                Row(
                    int(g[0]),
                    int(g[1]),
                    g[2],
                    Timing(float(g[5]), float(g[6]), float(g[7])),
                    Timing(float(g[9]), float(g[10]), float(g[11])),
                )
            )
    return run
