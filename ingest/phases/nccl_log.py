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
from datetime import datetime
from functools import lru_cache
from typing import NamedTuple

_WHO = (
    r"(?:\[(?P<ts>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)\] )?"
    r"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) \[\d+\]"
)
_PREFIX = re.compile(_WHO + r" NCCL (?:INFO|WARN) ")
_WHO_AT_END = re.compile(_WHO + "$")
_COLL = re.compile(
    r"(?P<op>[A-Za-z]+): opCount (?P<opcount>[0-9a-fA-F]+) sendbuff \S+ recvbuff \S+ "
    r"count (?P<count>\d+) datatype (?P<dtype>\d+) op (?P<redop>\d+) root (?P<root>-?\d+) "
    r"comm (?P<comm>0x[0-9a-fA-F]+) \[nranks=(?P<nranks>\d+)\]"
)
_COLL_RUN = re.compile(
    r"\n(?P<head>(?:[^\]\n]*\])+? NCCL INFO [A-Za-z]+: opCount )"
    r"[^ ]+ sendbuff [^ ]+ recvbuff [^ ]+ count (?P<count>\d+)"
    r"(?P<tail> datatype \d+ op \d+ root -?\d+ comm 0x[0-9a-fA-F]+ \[nranks=\d+\])"
    r"(?P<more>(?:[^\n]*\n(?P=head)[^ ]+ sendbuff [^ ]+ recvbuff [^ ]+ count \d+(?P=tail))*)"
)
"""A run of COLL lines of one process, communicator and collective, for ``findall`` over the text
with a newline put before it: the first line's ``head`` (who, the collective), ``count`` and
``tail`` (datatype, communicator, ...), and in ``more`` the lines after it that repeat them but for
their opCount, buffers and count. A training loop logs such runs, and the engine matches a later
line against the first with two back-references, where it would read each field of it (a line
of a run costs 0.45 against 1.0 us); the fields are read once per head and tail, not per line.
Each line starts at a newline, a literal the engine finds at C speed; the prefix stops at the
first ``]`` that `` NCCL INFO`` follows (``[^ ]+`` skips the buffers: one character compared,
where a class is tested). A match that ran across a cut line into the next would leave the counts
short, and the caller reads that text line by line."""
_HEAD = re.compile(r"(?P<prefix>.*?) NCCL INFO (?P<op>[A-Za-z]+): opCount ")
_TAIL = re.compile(r" datatype (\d+) op \d+ root (-?\d+) comm (\S+) \[nranks=(\d+)\]")
_COUNTS = re.compile(r" count (\d+) datatype ")
_INIT = re.compile(
    r"comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) .*?"
    r"commId (?P<commid>0x[0-9a-fA-F]+) - Init COMPLETE"
)
_CONNECTION = re.compile(
    r"(?:Channel (?P<channel>\d+)(?:/(?P<conn>\d+))?|Ring (?P<ring>\d+)) : "
    r"(?P<src>\d+)(?:\[\w+\])? -> (?P<dst>\d+)(?:\[\w+\])? (?:\[(?P<side>send|receive)\] )?"
    r"via (?P<transport>[A-Za-z0-9]+)/(?P<rest>.*)"
)
"""A connection NCCL set up between two ranks: ``Channel 00/0 : 1[81000] -> 0[81000] [receive] via
NET/IB/1/GDRDMA`` (2.12 and later, ``/Shared`` and a proxy rank ``NET/IB/0(1)`` when PXN relays it),
``Channel 01 : 2[c7000] -> 0[87000] [send] via NET/IB/5/GDRDMA`` (2.7-2.11), ``Ring 00 : 0 -> 1
[send] via NET/IB/0`` (before 2.7); ``via P2P/IPC`` and ``via SHM/direct/direct`` stay in the host
(src/transport/net.cc, p2p.cc, shm.cc)."""
_NET_DEV = re.compile(r"(?P<net>[^/]+)/(?P<dev>\d+)")
_NET_DEVICES = re.compile(r"NET/(?P<net>[^\s:]+) : Using (?P<list>.*)")
_NET_DEVICE = re.compile(r"\[(?P<index>\d+)\](?P<name>[^\s:\[\]<]+)")
"""``NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_2:1/IB [RO]; OOB ibp209s0f0:10.128.3.13<0>``: the NICs
NCCL numbers in ``via NET/IB/<n>`` (src/transport/net_ib.cc; the socket transport lists
``[0]eth0:10.0.0.1<0>``)."""
COLL_HINT = ": opCount "
_INIT_HINT = "Init COMPLETE"
CONNECTION_HINTS = (" via ", " : Using [")
"""Text in a connection or NIC-list line, and in no COLL line: a read holding either is read line
by line (init-time lines are few)."""

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
KNOWN_OPS = frozenset(OPS.values()) | {"SendRecv"}


class CollCall(NamedTuple):
    """One collective call of one process (a tuple: thousands a second are made)."""

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
    n: int = 1
    """Calls this stands for: ``scan`` folds the lines of a read that differ only in their
    opCount, buffers and element count into one, their bytes summed."""
    dur_ns: int = 0
    """How long the call ran, where the record says (a profiler's kernel); a log line does not."""
    seq: int | None = None
    """Which call of the communicator it is, where the record says (the Inspector's ``coll_sn``)."""
    pending: bool = False
    """The rank entered the call and had not completed it when the record was written (a Flight
    Recorder entry still scheduled or started): it has no duration."""


class CommInit(NamedTuple):
    """A process's communicator: its ``comm`` pointer, its rank, and the job-wide ``commId``."""

    host: str
    pid: int
    comm: str
    rank: int
    nranks: int
    comm_id: str
    tid: int = 0
    """The thread that printed it: the one that printed the communicator's connections before."""
    ts_ns: int | None = None
    """The line's own time, when NCCL printed one."""


class Connection(NamedTuple):
    """One connection of a communicator's graph, as the process at one end printed it at init."""

    host: str
    pid: int
    tid: int
    channel: int
    conn: int
    src: int
    dst: int
    side: str
    """``send`` or ``receive`` for a connection over the network (each end prints its own), else ''."""
    transport: str
    """``NET`` (leaves the host), ``P2P``, ``SHM`` (stay in it), ...."""
    net_dev: int | None
    """The index of the NIC in the process's ``NET/... : Using`` list, for ``NET``."""


class NetDevices(NamedTuple):
    """The NICs a process's network transport uses, by the index ``via NET/IB/<n>`` names."""

    host: str
    pid: int
    names: dict[int, str]


class LineError(ValueError):
    """A COLL or INIT line that cannot be read."""


def parse_line(line: str) -> CollCall | CommInit | Connection | NetDevices | None:
    """What one log line says: a collective call, a communicator's init, one of its connections,
    the NICs of the process, or nothing of ours (None). A line that looks like a COLL or INIT line
    but cannot be read raises LineError."""
    is_coll, is_init = COLL_HINT in line, _INIT_HINT in line
    if not (is_coll or is_init or any(hint in line for hint in CONNECTION_HINTS)):
        return None
    head = _PREFIX.search(line)
    if head is None:
        return None  # an opCount in someone else's text: not NCCL's line
    rest = line[head.end() :]
    host, pid = head.group("host"), int(head.group("pid"))
    if not (is_coll or is_init):
        return _connection(host, pid, int(head.group("tid")), rest)
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
        host,
        pid,
        m.group("comm"),
        int(m.group("rank")),
        int(m.group("nranks")),
        m.group("commid"),
        int(head.group("tid")),
        _stamp(head.group("ts")) if head.group("ts") else None,
    )


def _connection(host: str, pid: int, tid: int, rest: str) -> Connection | NetDevices | None:
    """A connection line or the NIC list (``_CONNECTION``, ``_NET_DEVICES``); other lines that
    happen to hold `` via `` are not ours (None)."""
    m = _CONNECTION.match(rest)
    if m is not None:
        dev = None
        if m["transport"] == "NET":
            net = _NET_DEV.match(m["rest"])
            if net is None:
                raise LineError(f"a connection over NET without a NIC index: {rest.strip()[:120]!r}")
            dev = int(net["dev"])
        channel = m["channel"] if m["channel"] is not None else m["ring"]
        return Connection(
            host,
            pid,
            tid,
            int(channel),
            int(m["conn"] or 0),
            int(m["src"]),
            int(m["dst"]),
            m["side"] or "",
            m["transport"],
            dev,
        )
    listed = _NET_DEVICES.match(rest)
    if listed is None:
        return None
    names = {int(d["index"]): d["name"] for d in _NET_DEVICE.finditer(listed["list"])}
    return NetDevices(host, pid, names) if names else None


class Scanned(NamedTuple):
    calls: list[CollCall]
    lines: int
    """Lines that have a COLL line's layout."""
    kept: int
    """Of those, the calls in ``calls``: the others name a collective or a datatype not known."""


def scan(text: str) -> Scanned:
    """The well-formed COLL lines of ``text`` (many lines) in one regex pass: what ``parse_line``
    gives for each, except that the calls of one process, communicator and collective with one
    time (a line's own, or none) are folded into one (``n`` calls, bytes summed), in the order
    each first came. So a read of interleaved collectives (FSDP's AllGather and ReduceScatter,
    layer after layer) is one call per collective, not per line. Lines it cannot read it leaves
    out: the caller compares the counts with the lines of the text."""
    runs: dict[tuple[str, str], list[int]] = {}
    lines = 0
    for head, count, tail, more in _COLL_RUN.findall("\n" + text):
        if more:
            n = more.count("\n") + 1
            elements = _elements(count, more, n)
        else:  # interleaved collectives: a run of one, the most lines a read can cost
            n, elements = 1, int(count)
        lines += n
        same = runs.get((head, tail))
        if same is None:
            runs[head, tail] = [elements, n]
        else:
            same[0] += elements
            same[1] += n
    calls: list[CollCall] = []
    kept = 0
    for (head, tail), (elements, n) in runs.items():
        call = _call(head, tail, elements, n)
        if call is not None:
            calls.append(call)
            kept += n
    return Scanned(calls, lines, kept)


def _elements(count: str, more: str, n: int) -> int:
    """The elements of a run of ``n`` calls, the first of ``count``: a training step repeats one
    buffer size, so a run whose later lines all say that count is it times the calls, without
    reading each."""
    if more.count(f" count {count} datatype ") == n - 1:
        return int(count) * n
    return int(count) + sum(map(int, _COUNTS.findall(more)))


def _call(head: str, tail: str, elements: int, n: int) -> CollCall | None:
    """``n`` calls of ``elements`` in all, from their shared head and tail; None for a collective
    or a datatype not known, or a prefix that names no process."""
    h, t = _HEAD.match(head), _TAIL.match(tail)
    who = _who(h["prefix"]) if h and t else None
    name = OPS.get(h["op"]) if h else None
    if who is None or name is None or t is None or int(t[1]) >= len(DTYPE_BYTES):
        return None
    host, pid, ts = who
    nbytes = elements * DTYPE_BYTES[int(t[1])]
    return CollCall(host, pid, t[3], name, nbytes, int(t[4]), int(t[2]), ts, n)


def _who(prefix: str) -> tuple[str, int, int | None] | None:
    """Host, pid and the line's time, from what stands before `` NCCL INFO``."""
    w = _WHO_AT_END.search(prefix)
    if w is None:
        return None
    return w["host"], int(w["pid"]), _stamp(w["ts"]) if w["ts"] else None


@lru_cache(maxsize=64)
def _stamp(text: str) -> int:
    """NCCL's timestamp (local time, as NCCL prints it) in ns since the epoch. Thousands of lines
    share each second, hence the cache."""
    whole, _, fraction = text.replace(",", ".").partition(".")
    parsed = datetime.strptime(whole.replace("T", " "), "%Y-%m-%d %H:%M:%S")
    seconds = int(time.mktime(parsed.timetuple()))
    return seconds * 10**9 + (int(fraction.ljust(9, "0")[:9]) if fraction else 0)
