"""Jobs' phases for the attribution tests: a scenario's trace without one job, ranks that reduce, the
incasts a replay names."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Phase, PhaseMessage, decode
from fabricwatch.schemas.trace import TraceReader, TraceWriter


def without_job(src: Path, dest: Path, job: str) -> Phase:
    """``src`` without the phases and graphs of ``job``; returns the first of its phases (its hosts
    and times)."""
    taken = []
    with TraceReader(src) as reader, TraceWriter(dest, "test", 0, dict(reader.header.meta)) as writer:
        for rec in reader:
            if rec.topic == topics.PHASES and (msg := decode(rec.value(), PhaseMessage)).job == job:
                taken.append(msg)
                continue
            writer.write(rec.topic, rec.key, rec.ts_ns, rec.value())
    return next(m for m in taken if isinstance(m, Phase))


Rank = tuple[list[str], Callable[[int], str | None]]
"""A rank's log: its INIT lines, and its n-th COLL line (None: it is done)."""


def reduce_rank(rank: int, hosts: list[str], phase: Phase, calls: int) -> Rank:
    """A rank of ``phase``'s job as NCCL writes its log with NCCL_DEBUG_SUBSYS=INIT,COLL and
    NCCL_DEBUG_TIMESTAMP_LEVELS=INFO (default format ``[%F %T] ``, local time): the NICs, the
    connections of two rings (rank r sends to r+1 on channel 0 and to r-1 on channel 1, each end
    printing its side) and the init, 5 s before the phase; then ``calls`` Reduce calls to the
    receiver h010, spread from the phase's begin to its end."""
    n, root, pid, host = len(hosts), hosts.index("h010"), 7000 + rank, hosts[rank]
    who = f"{_stamp(phase.begin_ns - 5 * 10**9)} {host}:{pid}:{pid}"
    nics = f"[0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE; OOB eth0:10.0.0.{rank}<0>"
    head = [f"{who} [0] NCCL INFO NET/IB : Using {nics}"]
    for channel, step in ((0, 1), (1, -1)):
        head += [
            f"{who} [0] NCCL INFO Channel {channel:02d}/0 : {(rank - step) % n}[1b000] -> {rank}[1b000] "
            f"[receive] via NET/IB/{channel}/GDRDMA",
            f"{who} [0] NCCL INFO Channel {channel:02d}/0 : {rank}[1b000] -> {(rank + step) % n}[1b000] "
            f"[send] via NET/IB/{channel}/GDRDMA",
        ]
    head.append(
        f"{who} [0] NCCL INFO comm 0x{rank:x}0 rank {rank} nranks {n} "
        "cudaDev 0 busId 1b000 commId 0x5eed - Init COMPLETE"
    )
    spacing = (phase.end_ns - phase.begin_ns) // calls

    def call(k: int) -> str | None:
        if k >= calls:
            return None
        return (
            f"{_stamp(phase.begin_ns + k * spacing)} {host}:{pid}:{pid + 1} [0] NCCL INFO Reduce: "
            f"opCount {k:x} sendbuff 0x7f00 recvbuff 0x7f80 count 4194304 datatype 9 op 0 root {root} "
            f"comm 0x{rank:x}0 [nranks={n}] stream 0x9"
        )

    return head, call


def _stamp(t_ns: int) -> str:
    return time.strftime("[%Y-%m-%d %H:%M:%S]", time.localtime(t_ns // 10**9))


def incasts(capsys) -> list[dict]:
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    return [e for e in events if e.get("kind") == "incast" and e.get("status") == "firing"]
