"""What ``fabric.phases`` carries: a job's collectives (``Phase``), its communicators' graphs
(``CommGraph``), each timed call (``Collectives``) and its steps (``Steps``), validated on decode
like every wire message (``messages.py``)."""

from __future__ import annotations

from typing import Literal

import msgspec

from fabricwatch.schemas.wire import SCHEMA_VERSION, check_stamp

Operation = Literal[
    "AllReduce",
    "AllGather",
    "ReduceScatter",
    "AllToAll",
    "Send",
    "Recv",
    "SendRecv",
    "Broadcast",
    "Reduce",
]


class Phase(msgspec.Struct, tag="phase", tag_field="type", omit_defaults=True):
    """A collective of one job: who took part, how much, when (``end_ns`` is None while running)."""

    job: str
    comm: str
    op: Operation
    begin_ns: int
    bytes: int = 0
    hosts: list[str] = msgspec.field(default_factory=list)
    rank_hosts: dict[int, str] = msgspec.field(default_factory=dict)
    root_rank: int | None = None
    end_ns: int | None = None
    source: str = ""
    step: int | None = None
    """The training step it began in, where the job marks its steps (``fabricwatch.phases.step``)."""
    v: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if not self.hosts and not self.rank_hosts:
            raise ValueError("a phase needs hosts or rank_hosts")
        if self.end_ns is not None and self.end_ns < self.begin_ns:
            raise ValueError("end_ns is before begin_ns")
        if self.bytes < 0:
            raise ValueError("bytes is negative")
        _check_ranks(self.rank_hosts)

    def participants(self) -> list[str]:
        """Hosts taking part, from ``hosts`` or the rank map."""
        return self.hosts or sorted(set(self.rank_hosts.values()))


class Edge(msgspec.Struct, frozen=True, array_like=True):
    """One connection of a communicator: rank ``src`` sends to rank ``dst`` on ``channel``, as the
    end on the reporting host saw it (``side``), through its NIC ``nic`` when it leaves the host."""

    src: int
    dst: int
    channel: int
    conn: int = 0
    side: Literal["send", "receive", ""] = ""
    transport: str = "NET"
    nic: str = ""


class CommGraph(msgspec.Struct, tag="comm_graph", tag_field="type", omit_defaults=True):
    """Who talks to whom in one communicator of a job, as one host's NCCL INIT lines say: its own
    ranks (``rank_hosts``) and the connections they set up. Stage 2 joins the hosts' graphs of a
    communicator, and its phases' rank maps, into host pairs; a graph sent twice, late or out of
    order adds nothing twice (edges are a set)."""

    job: str
    comm: str
    ts_ns: int
    host: str
    edges: list[Edge]
    rank_hosts: dict[int, str] = msgspec.field(default_factory=dict)
    nranks: int = 0
    source: str = ""
    v: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        check_stamp(self.ts_ns)
        _check_ranks(self.rank_hosts)
        top = self.nranks or _RANK_LIMIT
        for e in self.edges:
            if not (0 <= e.src < top and 0 <= e.dst < top):
                raise ValueError(f"edge {e.src} -> {e.dst} is outside ranks 0..{top - 1}")
            if not (0 <= e.channel < _CHANNEL_LIMIT and 0 <= e.conn < _CHANNEL_LIMIT):
                raise ValueError(
                    f"edge {e.src} -> {e.dst}: channel {e.channel}/{e.conn} is not one NCCL numbers"
                )


class Timed(msgspec.Struct, frozen=True, array_like=True, omit_defaults=True):
    """One collective call of one rank with its own time: what a job's metrics are made of."""

    op: Operation
    rank: int
    bytes: int
    """The buffer NCCL was given on this rank (its count times its datatype's size): for an
    AllGather its send buffer, for a ReduceScatter its receive buffer."""
    begin_ns: int
    dur_ns: int
    seq: int | None = None
    """Which call of the communicator it is, where the record says (the Inspector's ``coll_sn``):
    the ranks' records of one call, to tell which rank entered last."""
    completed: bool = True
    """False: the rank entered the call at ``begin_ns`` and had not completed it when its record
    was written (a Flight Recorder entry still scheduled or started); ``dur_ns`` is 0, unknown. Who
    entered a call that never completed names who did not (a hang's missing ranks)."""


class Collectives(msgspec.Struct, tag="collectives", tag_field="type", omit_defaults=True):
    """Collective calls of one communicator of a job, each with its own time and duration, as the
    job's records give them (the NCCL Inspector's, Kineto's kernels, the Flight Recorder's). A
    phase says who ran what when; these say how long each call took, which job metrics need
    (``schemas/bandwidth.py``). A source that gives no duration (an NCCL log) sends none."""

    job: str
    comm: str
    nranks: int
    ts_ns: int
    """The first call's begin."""
    calls: list[Timed]
    rank_hosts: dict[int, str] = msgspec.field(default_factory=dict)
    source: str = ""
    upper_bound: bool = False
    """Durations that include the time a call waited to start (the Flight Recorder's created to
    completed): an upper bound of the collective's time, not the time itself."""
    v: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        check_stamp(self.ts_ns)
        _check_ranks(self.rank_hosts)
        if not 0 < self.nranks < _RANK_LIMIT:
            raise ValueError(f"nranks {self.nranks} is not one NCCL numbers")
        if not self.calls:
            raise ValueError("no calls")
        for c in self.calls:
            if not 0 <= c.rank < self.nranks:
                raise ValueError(f"rank {c.rank} is outside ranks 0..{self.nranks - 1}")
            if c.bytes < 0 or c.dur_ns < 0:
                raise ValueError(f"a call of rank {c.rank} has negative bytes or duration")
            check_stamp(c.begin_ns)


class Step(msgspec.Struct, frozen=True, array_like=True, omit_defaults=True):
    """One training step of one rank: how long it took and, where the source times the step's
    kernels too (Kineto), how much of it the rank spent in collectives."""

    step: int
    rank: int
    begin_ns: int
    dur_ns: int
    coll_ns: int | None = None
    """Time within the step when a collective kernel ran (their union, clipped to the step)."""
    exposed_ns: int | None = None
    """Of ``coll_ns``, the time no other kernel ran beside it: communication the step waited for,
    not hidden behind compute (what the network costs the step)."""


class Steps(msgspec.Struct, tag="steps", tag_field="type", omit_defaults=True):
    """Training steps of a job's ranks, as its records mark them (Kineto's ``ProfilerStep#N``,
    the API's ``step()``): step time, and the share of it spent in collectives."""

    job: str
    ts_ns: int
    """The first step's begin."""
    steps: list[Step]
    rank_hosts: dict[int, str] = msgspec.field(default_factory=dict)
    source: str = ""
    v: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        check_stamp(self.ts_ns)
        _check_ranks(self.rank_hosts)
        if not self.steps:
            raise ValueError("no steps")
        for s in self.steps:
            check_stamp(s.begin_ns)
            if not 0 <= s.rank < _RANK_LIMIT or s.step < 0:
                raise ValueError(f"step {s.step} of rank {s.rank} is not one a job numbers")
            if s.dur_ns <= 0:
                raise ValueError(f"step {s.step} of rank {s.rank} has no duration")
            for part in (s.coll_ns, s.exposed_ns):
                if part is not None and not 0 <= part <= s.dur_ns:
                    raise ValueError(f"step {s.step} of rank {s.rank}: time in collectives outside the step")


_RANK_LIMIT = 1 << 32
_CHANNEL_LIMIT = 1 << 16
"""Ranks and channels as NCCL numbers them (and the store keeps them: UInt32, UInt16)."""


def _check_ranks(rank_hosts: dict[int, str]) -> None:
    for rank in rank_hosts:
        if not 0 <= rank < _RANK_LIMIT:
            raise ValueError(f"rank {rank} is not one NCCL numbers")


PhaseMessage = Phase | CommGraph | Collectives | Steps
"""What ``fabric.phases`` carries."""


def phase_time(msg: PhaseMessage) -> int:
    """A message's time on ``fabric.phases``: a phase's first call, a graph's init, the first
    timed call or step."""
    return msg.begin_ns if isinstance(msg, Phase) else msg.ts_ns
