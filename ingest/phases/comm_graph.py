"""A job's communication graph from a node's NCCL/RCCL INIT lines: which rank sends to which, on
which channel, through which NIC (``nccl_log.Connection``), sent as ``CommGraph`` per communicator.

NCCL prints a communicator's connections on the thread that sets it up, then, on that thread,
``comm 0x.. rank r nranks n ... commId 0x.. - Init COMPLETE`` (src/init.cc): so connections wait
per thread until that line names their communicator. Connections set up later, on the first
send/receive between two ranks (``Channel 00/1 ... /Shared`` on the caller's thread), have no init
line after them: once they have waited ``bind_after_s`` they join the process's latest
communicator in which the printing end is the process's own rank; if there is none, they are
counted, never guessed.

A connection ``via NET/IB/1`` names the NIC by its index in the process's ``NET/IB : Using [0]mlx5_0:1/RoCE
[1]mlx5_2:1/IB`` line; the edge carries the NIC's name when that line was seen.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from fabricwatch.ingest.phases.nccl_log import CommInit, Connection, NetDevices
from fabricwatch.schemas.messages import CommGraph, Edge

EDGES_PER_MESSAGE = 4096
"""A communicator of thousands of ranks prints tens of thousands of connections per host: split
into messages of this many edges, each well under a broker's message limit."""
REPEAT_AFTER_S = 300.0
"""A communicator still running has its whole graph sent again this often: a stage-2 worker that
restarts re-reads only the recent phases (``phases_lookback``), and a graph sent once at the job's
start would be long gone from them."""
FORGET_AFTER_S = 3600.0
"""A communicator nothing was heard of for this long is forgotten (its job ended): a long-running
collector's memory stays bounded. Were its connections printed again, they would be sent again,
which stage 2 takes as nothing new."""


@dataclass
class _Comm:
    comm_id: str
    host: str
    nranks: int
    ts_ns: int
    """When its init completed: a graph is stamped with it, so that replay puts it before the
    communicator's phases."""
    seen_ns: int
    """When it was last heard of (read time): its init, a connection, a collective running."""
    whole_ns: int = 0
    """When its whole graph was last sent."""
    rank_hosts: dict[int, str] = field(default_factory=dict)
    sent: set[Edge] = field(default_factory=set)
    new: list[Edge] = field(default_factory=list)


@dataclass
class GraphStats:
    connections: int = 0
    unbound: int = 0
    """Connections no communicator of their process could take, or naming a rank the communicator
    does not have (counted, left out)."""
    graphs: int = 0


class GraphBuilder:
    """Feed ``devices``, ``connection`` and ``init``; ``due`` and ``close_all`` return the graphs
    (the edges not sent before) of the communicators that gained any."""

    def __init__(self, job: str, source: str, bind_after_s: float = 5.0) -> None:
        self.job = job
        self.source = source
        self.stats = GraphStats()
        self._bind_after_ns = int(bind_after_s * 1e9)
        self._forget_after_ns = int(FORGET_AFTER_S * 1e9)
        self._repeat_after_ns = int(REPEAT_AFTER_S * 1e9)
        self._nics: dict[tuple[str, int], tuple[dict[int, str], int]] = {}
        self._waiting: dict[tuple[str, int, int], list[tuple[Connection, int]]] = defaultdict(list)
        """Per thread, connections (and when they were read) that no init line has named yet."""
        self._waiting_since: dict[tuple[str, int, int], int] = {}
        self._comms: dict[tuple[str, str], _Comm] = {}
        """By commId and host: one reader may read several hosts' logs (``phases import``)."""
        self._process_comms: dict[tuple[str, int], list[tuple[tuple[str, str], int]]] = defaultdict(list)

    def devices(self, listed: NetDevices, read_ns: int) -> None:
        self._nics[(listed.host, listed.pid)] = (listed.names, read_ns)

    def connection(self, c: Connection, read_ns: int) -> None:
        self.stats.connections += 1
        thread = (c.host, c.pid, c.tid)
        self._waiting[thread].append((c, read_ns))
        self._waiting_since.setdefault(thread, read_ns)

    def init(self, info: CommInit, read_ns: int) -> None:
        """A communicator's init completed: its rank here, and the connections its thread printed."""
        key = (info.comm_id, info.host)
        comm = self._comms.get(key)
        if comm is None:
            comm = self._comms[key] = _Comm(
                info.comm_id, info.host, info.nranks, info.ts_ns or read_ns, read_ns
            )
        comm.seen_ns = max(comm.seen_ns, read_ns)
        comm.rank_hosts[info.rank] = info.host
        self._process_comms[(info.host, info.pid)].append((key, info.rank))
        thread = (info.host, info.pid, info.tid)
        self._waiting_since.pop(thread, None)
        self._bind(comm, self._waiting.pop(thread, []))

    def running(self, comm_ids: set[str], now_ns: int) -> None:
        """These communicators have collectives running (``PhaseCoalescer.running``)."""
        for (comm_id, _), comm in self._comms.items():
            if comm_id in comm_ids:
                comm.seen_ns = max(comm.seen_ns, now_ns)

    def due(self, now_ns: int) -> list[CommGraph]:
        stale = [t for t, since in self._waiting_since.items() if now_ns - since >= self._bind_after_ns]
        for thread in stale:
            self._bind_late(thread)
        for comm in self._comms.values():
            if not comm.whole_ns:
                comm.whole_ns = now_ns
            elif now_ns - comm.whole_ns >= self._repeat_after_ns and comm.seen_ns > comm.whole_ns:
                comm.new = list(comm.sent)
                comm.whole_ns = now_ns
        graphs = self._graphs()
        self._forget(now_ns - self._forget_after_ns)
        return graphs

    def close_all(self) -> list[CommGraph]:
        for thread in list(self._waiting):
            self._bind_late(thread)
        return self._graphs()

    def _bind_late(self, thread: tuple[str, int, int]) -> None:
        """Connections no init line followed: the process's latest communicator whose rank here is
        the printing end of each (the sender of a send, the receiver of a receive)."""
        self._waiting_since.pop(thread, None)
        host, pid, _ = thread
        known = self._process_comms.get((host, pid), [])
        for c, read_ns in self._waiting.pop(thread, []):
            mine = c.src if c.side == "send" else c.dst
            found = next((key for key, rank in reversed(known) if rank == mine), None)
            if found is None:
                self.stats.unbound += 1
                continue
            self._bind(self._comms[found], [(c, read_ns)])

    def _forget(self, before_ns: int) -> None:
        """Communicators not heard of since ``before_ns``, and the processes left with none."""
        old = {key for key, comm in self._comms.items() if comm.seen_ns < before_ns}
        for key in old:
            del self._comms[key]
        for process, comms in list(self._process_comms.items()):
            kept = [(key, rank) for key, rank in comms if key not in old]
            if kept:
                self._process_comms[process] = kept
            else:
                del self._process_comms[process]
        for process, (_, read_ns) in list(self._nics.items()):
            if read_ns < before_ns and process not in self._process_comms:
                del self._nics[process]

    def _bind(self, comm: _Comm, connections: list[tuple[Connection, int]]) -> None:
        for c, read_ns in connections:
            if comm.nranks and not (0 <= c.src < comm.nranks and 0 <= c.dst < comm.nranks):
                self.stats.unbound += 1
                continue
            comm.seen_ns = max(comm.seen_ns, read_ns)
            nic = ""
            if c.net_dev is not None:
                nic = self._nics.get((c.host, c.pid), ({}, 0))[0].get(c.net_dev, str(c.net_dev))
            edge = Edge(c.src, c.dst, c.channel, c.conn, c.side, c.transport, nic)  # type: ignore[arg-type]
            if edge not in comm.sent:
                comm.sent.add(edge)
                comm.new.append(edge)

    def _graphs(self) -> list[CommGraph]:
        out: list[CommGraph] = []
        for comm in self._comms.values():
            out += (
                CommGraph(
                    job=self.job,
                    comm=comm.comm_id,
                    ts_ns=comm.ts_ns,
                    host=comm.host,
                    edges=comm.new[at : at + EDGES_PER_MESSAGE],
                    rank_hosts=dict(sorted(comm.rank_hosts.items())),
                    nranks=comm.nranks,
                    source=self.source,
                )
                for at in range(0, len(comm.new), EDGES_PER_MESSAGE)
            )
            comm.new = []
        self.stats.graphs += len(out)
        return out
