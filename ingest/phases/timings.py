"""Each call a job's records time kept with its own begin and duration (``Collectives``), beside the
phases the calls are coalesced into: a phase says who ran which collective when; a job's metrics
(collective time, bus bandwidth, stragglers) need each call.

Calls are grouped per communicator (the job-wide ``commId`` an init names) into messages of at most
``MAX_CALLS`` calls spanning at most ``SPAN_S`` seconds, in time order, so a message stays small and
a consumer that reads them in order sees each communicator's calls in order. A call whose process
never said which communicator and rank it is (no init) cannot be placed in a job's ranks: counted
(``unbound``), not sent.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from fabricwatch.ingest.phases.nccl_log import CollCall, CommInit
from fabricwatch.schemas.messages import Collectives, Timed

MAX_CALLS = 2000
SPAN_S = 1.0


def timed_messages(
    job: str,
    source: str,
    calls: Iterable[CollCall],
    comms: Mapping[tuple[str, int, str], CommInit],
    upper_bound: bool = False,
) -> tuple[list[Collectives], int]:
    """The ``Collectives`` messages of the timed calls among ``calls`` (those with their own time
    and a duration, or entered and not completed), and how many timed calls had no communicator to
    place them in."""
    by_comm: dict[str, list[tuple[CommInit, CollCall]]] = defaultdict(list)
    unbound = 0
    for c in calls:
        if c.ts_ns is None or (c.dur_ns <= 0 and not c.pending):
            continue
        init = comms.get((c.host, c.pid, c.comm))
        if init is None:
            unbound += 1
            continue
        by_comm[init.comm_id].append((init, c))
    out = []
    for comm_id, placed in sorted(by_comm.items()):
        placed.sort(key=lambda ic: ic[1].ts_ns or 0)
        nranks = max(max(i.nranks, i.rank + 1) for i, _ in placed)
        chunks: list[list[tuple[CommInit, CollCall]]] = []
        for ic in placed:
            if (
                not chunks
                or len(chunks[-1]) >= MAX_CALLS
                or _begin(ic) - _begin(chunks[-1][0]) >= SPAN_S * 1e9
            ):
                chunks.append([])
            chunks[-1].append(ic)
        out += [_message(job, comm_id, nranks, source, upper_bound, chunk) for chunk in chunks]
    return out, unbound


def _begin(placed: tuple[CommInit, CollCall]) -> int:
    return placed[1].ts_ns or 0


def _message(
    job: str, comm: str, nranks: int, source: str, upper_bound: bool, placed: list[tuple[CommInit, CollCall]]
) -> Collectives:
    return Collectives(
        job=job,
        comm=comm,
        nranks=nranks,
        ts_ns=_begin(placed[0]),
        calls=[_timed(i, c) for i, c in placed],
        rank_hosts=dict(sorted({i.rank: i.host for i, _ in placed}.items())),
        source=source,
        upper_bound=upper_bound,
    )


def _timed(init: CommInit, c: CollCall) -> Timed:
    return Timed(c.op, init.rank, c.bytes, c.ts_ns or 0, c.dur_ns, c.seq, not c.pending)  # type: ignore[arg-type]
