"""Which jobs and collectives an incident belongs to, from the phases the jobs publish, and which of
their ranks and host pairs, from their communication graphs (``CommGraph``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from fabricwatch.detectors.incident_state import NS, Incident
from fabricwatch.schemas.messages import CommGraph, Edge, Phase, PhaseMessage

MANY_TO_ONE = ("Reduce", "AllToAll", "Recv", "SendRecv", "ReduceScatter", "AllGather")
"""Collectives that converge on a receiver: the likely cause of an incast."""


@dataclass
class _Graph:
    """A communicator's connections as its hosts reported them, joined: a set, so a graph sent
    twice or late adds nothing twice."""

    edges: set[Edge] = field(default_factory=set)
    rank_hosts: dict[int, str] = field(default_factory=dict)
    updated_ns: int = 0


class JobAttribution:
    """The recent phases and the communication graphs of every job, and the matching of incidents
    to them."""

    def __init__(self) -> None:
        self.phases: list[Phase] = []
        self.graphs: dict[tuple[str, str], _Graph] = {}
        self._prune_at = 1024

    def on_phase(self, msg: PhaseMessage) -> None:
        if isinstance(msg, CommGraph):
            graph = self.graphs.setdefault((msg.job, msg.comm), _Graph())
            graph.edges.update(msg.edges)
            graph.rank_hosts.update(msg.rank_hosts)
            graph.updated_ns = max(graph.updated_ns, msg.ts_ns)
        elif isinstance(msg, Phase):
            self.phases.append(msg)

    def host_pairs(self, job: str, comm: str) -> dict[tuple[str, str], int]:
        """Connections over the network from host to host in one communicator (each counted once,
        whichever of its ends reported it): what the job sends between which hosts."""
        graph = self.graphs.get((job, comm))
        if graph is None:
            return {}
        hosts = self._rank_hosts(job, comm, graph)
        seen: dict[tuple[str, str], set[tuple[int, int, int, int]]] = {}
        for e in graph.edges:
            a, b = hosts.get(e.src), hosts.get(e.dst)
            if e.transport == "NET" and a and b and a != b:
                seen.setdefault((a, b), set()).add((e.src, e.dst, e.channel, e.conn))
        return {pair: len(conns) for pair, conns in sorted(seen.items())}

    def senders_into(self, job: str, comm: str, hosts: set[str]) -> list[int]:
        """Ranks on other hosts with a connection over the network into a rank on ``hosts``."""
        graph = self.graphs.get((job, comm))
        if graph is None:
            return []
        where = self._rank_hosts(job, comm, graph)
        return sorted(
            {
                e.src
                for e in graph.edges
                if e.transport == "NET" and where.get(e.dst) in hosts and where.get(e.src) not in hosts
            }
        )

    def crossing_pairs(self, job: str, comm: str, inside: set[str]) -> int | None:
        """Host pairs of a communicator with one end in ``inside`` and the other outside (traffic
        that must cross the uplinks of the switch ``inside`` hangs off); None without a graph."""
        if (job, comm) not in self.graphs:
            return None
        return sum(1 for a, b in self.host_pairs(job, comm) if (a in inside) != (b in inside))

    def _rank_hosts(self, job: str, comm: str, graph: _Graph) -> dict[int, str]:
        """Every rank's host known: each host's graph names its own ranks, phases name theirs."""
        hosts = dict(graph.rank_hosts)
        for ph in self.phases:
            if ph.job == job and ph.comm == comm:
                hosts.update(ph.rank_hosts)
        return hosts

    def attach(
        self,
        incident: Incident,
        hosts: set[str],
        at_ns: int,
        prefer: tuple[str, ...] = (),
        cross_from: set[str] | None = None,
    ) -> list[Phase]:
        """Jobs whose phases ran on these hosts when the incident started (preferring ``prefer`` ops);
        with ``cross_from``, only phases that also reach hosts outside that set (traffic that leaves),
        and, where a communicator's graph is known, only those with host pairs across it, most
        pairs first (their count in the evidence, ``crossing_host_pairs``). Otherwise the phase
        that began closest to the incident's start comes first: what changed is the likeliest
        cause, not the job that was already running. Returns the matching phases in that order."""
        if not hosts:
            return []
        slack = 2 * NS
        matches = []
        crossing: dict[tuple[str, str], int | None] = {}
        for ph in self.phases:
            end = ph.end_ns if ph.end_ns is not None else at_ns + slack
            if ph.begin_ns - slack > incident.last_ns or end + slack < at_ns:
                continue
            parts = set(ph.participants())
            if not parts & hosts or (cross_from is not None and not parts - cross_from):
                continue
            if cross_from is not None:
                key = (ph.job, ph.comm)
                if key not in crossing:
                    crossing[key] = self.crossing_pairs(ph.job, ph.comm, cross_from)
                if crossing[key] == 0:
                    continue
            matches.append(ph)
        if prefer and any(p.op in prefer for p in matches):
            matches = [p for p in matches if p.op in prefer]
        matches.sort(
            key=lambda p: (-(crossing.get((p.job, p.comm)) or 0), abs(p.begin_ns - at_ns), -p.bytes, p.job)
        )
        if matches and matches[0].step is not None:
            incident.evidence["step"] = matches[0].step
        if matches and crossing.get((matches[0].job, matches[0].comm)):
            incident.evidence["crossing_host_pairs"] = crossing[(matches[0].job, matches[0].comm)]
        for ph in matches:
            if ph.job not in incident.jobs:
                incident.jobs.append(ph.job)
            coll = f"{ph.op} comm {ph.comm}"
            if coll not in incident.collectives:
                incident.collectives.append(coll)
            if cross_from is None:  # traffic that crosses: its far ends are not the incident's hosts
                incident.hosts |= set(ph.participants())
        return matches

    def hosts_sharing_a_phase(self, host: str, at_ns: int) -> set[str]:
        return {
            h for ph in self._running(at_ns) if host in (parts := set(ph.participants())) for h in parts
        } - {host}

    def jobs_on(self, host: str, at_ns: int, since_ns: int | None = None) -> list[str]:
        """The jobs with a phase running on ``host`` at ``at_ns`` (and already at ``since_ns``:
        the same phase all along), by name."""
        running = self._running(at_ns, at_ns if since_ns is None else since_ns)
        return sorted({ph.job for ph in running if host in ph.participants()})

    def _running(self, at_ns: int, since_ns: int | None = None) -> Iterator[Phase]:
        begun = at_ns if since_ns is None else min(at_ns, since_ns)
        return (
            ph for ph in self.phases if ph.begin_ns <= begun and (ph.end_ns is None or ph.end_ns >= at_ns)
        )

    def prune(self, now_ns: int) -> None:
        """Keep phases that ended in the last ten minutes; amortised, so memory stays bounded."""
        if len(self.phases) < self._prune_at:
            return
        horizon = now_ns - 600 * NS
        self.phases = [p for p in self.phases if p.end_ns is None or p.end_ns >= horizon]
        running = {(p.job, p.comm) for p in self.phases}
        self.graphs = {k: g for k, g in self.graphs.items() if k in running or g.updated_ns >= horizon}
        self._prune_at = 2 * len(self.phases) + 1024
