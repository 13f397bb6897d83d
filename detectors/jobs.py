"""Which jobs and collectives an incident belongs to, from the phases the jobs publish."""

from __future__ import annotations

from fabricwatch.detectors.incident_state import NS, Incident
from fabricwatch.schemas.messages import Phase

MANY_TO_ONE = ("Reduce", "AllToAll", "Recv", "SendRecv", "ReduceScatter", "AllGather")
"""Collectives that converge on a receiver: the likely cause of an incast."""


class JobAttribution:
    """The recent phases of every job, and the matching of incidents to them."""

    def __init__(self) -> None:
        self.phases: list[Phase] = []
        self._prune_at = 1024

    def on_phase(self, phase: Phase) -> None:
        self.phases.append(phase)

    def attach(
        self,
        incident: Incident,
        hosts: set[str],
        at_ns: int,
        prefer: tuple[str, ...] = (),
        cross_from: set[str] | None = None,
    ) -> None:
        """Jobs whose phases ran on these hosts when the incident started (preferring ``prefer`` ops);
        with ``cross_from``, only phases that also reach hosts outside that set (traffic that leaves).
        The phase that began closest to the incident's start comes first: what changed is the
        likeliest cause, not the job that was already running."""
        if not hosts:
            return
        slack = 2 * NS
        matches = []
        for ph in self.phases:
            end = ph.end_ns if ph.end_ns is not None else at_ns + slack
            if ph.begin_ns - slack > incident.last_ns or end + slack < at_ns:
                continue
            parts = set(ph.participants())
            if not parts & hosts or (cross_from is not None and not parts - cross_from):
                continue
            matches.append(ph)
        if prefer and any(p.op in prefer for p in matches):
            matches = [p for p in matches if p.op in prefer]
        for ph in sorted(matches, key=lambda p: (abs(p.begin_ns - at_ns), -p.bytes, p.job)):
            if ph.job not in incident.jobs:
                incident.jobs.append(ph.job)
            coll = f"{ph.op} comm {ph.comm}"
            if coll not in incident.collectives:
                incident.collectives.append(coll)
            if incident.kind != "ecmp_collapse":
                incident.hosts |= set(ph.participants())

    def hosts_sharing_a_phase(self, host: str, at_ns: int) -> set[str]:
        running = (
            ph for ph in self.phases if ph.begin_ns <= at_ns and (ph.end_ns is None or ph.end_ns >= at_ns)
        )
        return {h for ph in running if host in (parts := set(ph.participants())) for h in parts} - {host}

    def prune(self, now_ns: int) -> None:
        """Keep phases that ended in the last ten minutes; amortised, so memory stays bounded."""
        if len(self.phases) < self._prune_at:
            return
        horizon = now_ns - 600 * NS
        self.phases = [p for p in self.phases if p.end_ns is None or p.end_ns >= horizon]
        self._prune_at = 2 * len(self.phases) + 1024
