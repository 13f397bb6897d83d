"""The simulated jobs' communication graphs, as their ranks' NCCL INIT lines would give them: who
sends to whom, through which NIC, in each communicator (``CommGraph``).

The flows of a job's activities are the truth the INIT lines only announce: each distinct
(sending NIC, receiving NIC) of a communicator is one connection, numbered as a channel of its
host pair, from the sending end. One graph per communicator, for all its hosts at once (a real
fabric has one per host; stage 2 joins them the same way), stamped with its first phase's time
and delivered before it.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from fabricwatch.ingest.phases.comm_graph import EDGES_PER_MESSAGE
from fabricwatch.ingest.simulator.fabric import Fabric
from fabricwatch.ingest.simulator.traffic import ActivityRun
from fabricwatch.schemas.messages import CommGraph, Edge


def comm_graphs(fabric: Fabric, activities: list[ActivityRun]) -> list[CommGraph]:
    first: dict[tuple[str, str], int] = {}
    ranks: dict[tuple[str, str], dict[str, int]] = {}
    pairs: dict[tuple[str, str], set[tuple[int, int]]] = defaultdict(set)
    for a in activities:
        if a.phase is None or not len(a.flows.src):
            continue
        key = (a.phase.job, a.phase.comm)
        first[key] = min(first.get(key, a.phase.begin_ns), a.phase.begin_ns)
        ranks.setdefault(key, {h: r for r, h in enumerate(a.phase.hosts)})
        pairs[key] |= set(zip(a.flows.src.tolist(), a.flows.dst.tolist(), strict=True))
    return [g for key in sorted(pairs) for g in _graphs(fabric, key, first[key], ranks[key], pairs[key])]


def _graphs(
    fabric: Fabric,
    key: tuple[str, str],
    begin_ns: int,
    rank_of: dict[str, int],
    nic_pairs: set[tuple[int, int]],
) -> list[CommGraph]:
    """One communicator's graph, in messages of at most ``EDGES_PER_MESSAGE`` edges."""
    host_of = np.asarray(fabric.hosts)[fabric.nic_host]
    channels: dict[tuple[int, int], int] = defaultdict(int)
    edges = []
    for src, dst in sorted(nic_pairs):
        a, b = rank_of.get(str(host_of[src])), rank_of.get(str(host_of[dst]))
        if a is None or b is None or a == b:
            continue
        edges.append(Edge(a, b, channels[(a, b)], 0, "send", "NET", fabric.nics[src]))
        channels[(a, b)] += 1
    job, comm = key
    return [
        CommGraph(
            job=job,
            comm=comm,
            ts_ns=begin_ns,
            host="sim",
            edges=edges[at : at + EDGES_PER_MESSAGE],
            rank_hosts={r: h for h, r in rank_of.items()},
            nranks=len(rank_of),
            source="sim",
        )
        for at in range(0, len(edges), EDGES_PER_MESSAGE)
    ]
