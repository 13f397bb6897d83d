"""NCCL and RCCL debug logs (``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL``) read line by line into
what the phase collector needs: each collective call, and which rank and communicator a process's
``comm`` pointer is.

A line as NCCL writes it (src/debug.cc ``ncclDebugLog``; RCCL, its fork, writes the same)::

    [2025-03-01 10:00:00] hopper01:191370:191425 [1] NCCL INFO AllGather: opCount d sendbuff
    0x7fa921200000 recvbuff 0x7fa915800000 count 2097152 datatype 7 op 0 root 0 comm 0x55fca23fc0f0
    [nranks=2] stream 0x55fca193e8e0

``host:pid:tid [cudaDev]`` names the process; the time in brackets is there only when
``NCCL_DEBUG_TIMESTAMP_LEVELS`` includes INFO (NCCL 2.26 and later; ``NCCL_DEBUG_TIMESTAMP_FORMAT``,
default ``[%F %T] ``, local time). Launchers put their own prefix before it: mpirun
``--tag-output`` ``[1,0]<stdout>:``, Slurm ``srun -l`` ``0: ``, torchrun ``[default0]:``, Ray
``(RayTrainWorker pid=123, ip=10.0.0.1)``; the NCCL part is found wherever it starts.

The INIT line that ties a process's ``comm`` pointer to the job-wide communicator::

    comm 0x72a6b00 rank 0 nranks 2 cudaDev 0 busId 81000 commId 0xb2f794396f6d0bd1 - Init COMPLETE

Lines that are neither are not NCCL's business here and are ignored; a COLL or INIT line that
cannot be read (cut short, an unknown layout) is a problem, counted by the caller.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache

_PREFIX = re.compile(
    r"(?:\[(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)\] )?"
    r"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):\d+ \[\d+\] (?:\S+ )?NCCL (?:INFO|WARN) "
)
_COLL = re.compile(
    r"(?P<op>[A-Za-z]+): opCount (?P<opcount>[0-9a-fA-F]+) sendbuff \S+ recvbuff \S+ "
    r"count (?P<count>\d+) datatype (?P<dtype>\d+) op (?P<redop>\d+) root (?P<root>-?\d+) "
    r"comm (?P<comm>0x[0-9a-fA-F]+) \[nranks=(?P<nranks>\d+)\]"
)
_INIT = re.compile(
    r"comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) .*?"
    r"commId (?P<commid>0x[0-9a-fA-F]+) - Init COMPLETE"
)
_COLL_HINT = ": opCount "
_INIT_HINT = "Init COMPLETE"

DTYPE_BYTES = (1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1)
"""Bytes per element of ``ncclDataType_t`` 0..11: int8, uint8, int32, uint32, int64, uint64,
float16, float32, float64, bfloat16, fp8 e4m3, fp8 e5m2 (nccl.h)."""

OPS = {
    "AllReduce": "AllReduce",
    "AllGather": "AllGather",
    "ReduceScatter": "ReduceScatter",
    "Broadcast": "Broadcast",
    "Reduce": "Reduce",
    "Send": "Send",
    "Recv": "Recv",
    "AllToAll": "AllToAll",
    "AlltoAll": "AllToAll",
}
"""NCCL's and RCCL's names of the collectives the phase vocabulary knows (``schemas.messages``)."""


@dataclass(frozen=True)
class CollCall:
    """One collective call of one process."""

    host: str
    pid: int
    comm: str
    """The process's ``comm`` pointer (``0x55fca23fc0f0``): unique only within the process."""
    op: str
    bytes: int
    """``count`` elements of ``datatype``: the buffer NCCL was given (per rank)."""
    nranks: int
    root: int
    ts_ns: int | None
    """The line's own time, when NCCL printed one."""


@dataclass(frozen=True)
class CommInit:
    """A process's communicator: its ``comm`` pointer, its rank, and the job-wide ``commId``."""

    host: str
    pid: int
    comm: str
    rank: int
    nranks: int
    comm_id: str


class LineError(ValueError):
    """A COLL or INIT line that cannot be read."""


def parse_line(line: str) -> CollCall | CommInit | None:
    """What one log line says: a collective call, a communicator's init, or nothing of ours (None).
    A line that looks like a COLL or INIT line but cannot be read raises LineError."""
    is_coll, is_init = _COLL_HINT in line, _INIT_HINT in line
    if not (is_coll or is_init):
        return None
    head = _PREFIX.search(line)
    if head is None:
        return None  # an opCount in someone else's text: not NCCL's line
    rest = line[head.end() :]
    host, pid = head.group("host"), int(head.group("pid"))
    if is_coll:
        m = _COLL.match(rest)
        if m is None:
            raise LineError(f"a COLL line of an unknown layout or cut short: {line.strip()[:120]!r}")
        dtype = int(m.group("dtype"))
        if dtype >= len(DTYPE_BYTES):
            raise LineError(f"datatype {dtype} is not one NCCL defines: {line.strip()[:120]!r}")
        op = OPS.get(m.group("op"))
        if op is None:
            raise LineError(f"collective {m.group('op')!r} is not one fabricwatch knows")
        ts = _stamp(head.group("ts")) if head.group("ts") else None
        return CollCall(
            host,
            pid,
            m.group("comm"),
            op,
            int(m.group("count")) * DTYPE_BYTES[dtype],
            int(m.group("nranks")),
            int(m.group("root")),
            ts,
        )
    m = _INIT.search(rest)
    if m is None:
        raise LineError(f"an Init COMPLETE line of an unknown layout: {line.strip()[:120]!r}")
    return CommInit(
        host, pid, m.group("comm"), int(m.group("rank")), int(m.group("nranks")), m.group("commid")
    )


@lru_cache(maxsize=64)
def _stamp(text: str) -> int:
    """NCCL's timestamp (local time, as NCCL prints it) in ns since the epoch. Thousands of lines
    share each second, hence the cache."""
    whole, _, fraction = text.replace(",", ".").partition(".")
    parsed = datetime.strptime(whole.replace("T", " "), "%Y-%m-%d %H:%M:%S")
    seconds = int(time.mktime(parsed.timetuple()))
    return seconds * 10**9 + (int(fraction.ljust(9, "0")[:9]) if fraction else 0)
