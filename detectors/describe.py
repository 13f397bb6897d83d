"""What an incident says: severity, evidence, summary and remediation hint per kind."""

from __future__ import annotations

from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.incident_state import Group, Incident, SymptomKey
from fabricwatch.detectors.jobs import MANY_TO_ONE, JobAttribution
from fabricwatch.detectors.roots import Roots
from fabricwatch.schemas.messages import Phase, Symptom

HINTS = {
    "pfc_storm": (
        "Inspect the root NIC and its host (stalled receiver, driver or PCIe hang); enable the switch "
        "PFC watchdog and NIC pause-storm prevention so one stalled port cannot freeze the fabric."
    ),
    "incast": (
        "Many-to-one traffic into one port: check the job's collective algorithm (NCCL_ALGO, PXN), "
        "spread receivers, and DCQCN ECN thresholds / buffer headroom on that queue."
    ),
    "ecmp_collapse": (
        "Few long flows hash onto few uplinks: raise NCCL_IB_QPS_PER_CONNECTION, put the QPN in the "
        "ECMP hash (UDF / enhanced ECMP), or enable adaptive routing."
    ),
    "outlier": (
        "This port's counters left their learned baseline and no rule names why: compare the listed "
        "features with its peers (cable/optics errors, retransmissions, a NIC running below its rate)."
    ),
}
_TREE_EDGES_SHOWN = 12


class Describer:
    def __init__(self, roots: Roots, jobs: JobAttribution) -> None:
        self.roots = roots
        self.jobs = jobs

    @property
    def fabric(self) -> FabricMap:
        return self.roots.fabric

    def describe(self, incident: Incident, group: Group, active: set[SymptomKey]) -> None:
        """Fill in ``incident`` from its group; ``active`` holds the keys of every active symptom."""
        members = group.members
        incident.root = group.root
        incident.devices |= {s.device for s in members}
        latest = max(members, key=lambda s: s.ts_ns)
        carried = {k: incident.evidence[k] for k in _CARRIED if k in incident.evidence}
        incident.evidence = dict(latest.evidence) | carried
        if incident.kind == "pfc_storm":
            self._describe_storm(incident, members)
        elif incident.kind == "incast":
            self._describe_incast(incident, latest, active)
        elif incident.kind == "ecmp_collapse":
            self._describe_ecmp(incident, latest)
        else:
            self._describe_outlier(incident, group)
        self._say_what_the_topology_lacks(incident)

    def _say_what_the_topology_lacks(self, incident: Incident) -> None:
        """A root the topology does not know, or a switch port it has no link for, is said to be
        unchecked: the incident may stop short of the real root, or split in two."""
        root, fabric = incident.root, self.fabric
        if fabric.lacks(root.device):
            incident.evidence["root_in_topology"] = 0
            incident.summary += (
                f" [{root.device} is not in the topology: its links, host and job could not be"
                " checked; publish a topology that has it]"
            )
        elif (
            root.port
            and not fabric.is_nic(root.device)
            and fabric.peer(root.device, root.port) is None
            and fabric.nic_behind(root.device, root.port) is None
            and fabric.neighbours(root.device)
        ):
            incident.evidence["root_port_in_topology"] = 0
            incident.summary += (
                f" [{root.device} port {root.port} has no link in the topology: what is behind it is not"
                " known, and may be the real root]"
            )

    def _describe_storm(self, incident: Incident, members: list[Symptom]) -> None:
        root = incident.root
        stalled = incident.evidence.get("stalled_egress") == 1 or (  # sticky, like its severity
            not self.fabric.is_nic(root.device)
            and any(
                s.kind == "pfc_pausing" and (s.device, s.port) == (root.device, root.port) for s in members
            )
        )
        behind = self.fabric.host_behind(root.device, root.port) if stalled else None
        host = behind or self.fabric.host_of(root.device)
        if stalled:
            incident.evidence["stalled_egress"] = 1
            incident.hint = STALLED_EGRESS_HINT
        incident.hosts.add(host)
        incident.severity = "critical"
        paused = [s for s in members if s.kind == "pfc_storm"]
        incident.evidence["paused_ports"] = len({(s.device, s.port) for s in paused})
        incident.evidence["paused_devices"] = len({s.device for s in paused})
        incident.evidence.update(self._pause_tree(paused))
        self.jobs.attach(incident, {host}, incident.start_ns)
        job = f"; job {', '.join(incident.jobs)}" if incident.jobs else ""
        where = f"host {host}"
        if stalled:
            where = f"{f'toward host {behind}; ' if behind else ''}its egress stalled unpaused"
        incident.summary = (
            f"PFC storm on priority {root.priority} rooted at {root.device} port {root.port} "
            f"({where}): {incident.evidence['paused_ports']} ports paused on "
            f"{incident.evidence['paused_devices']} devices{job}"
        )

    def _pause_tree(self, paused: list[Symptom]) -> dict[str, int | str]:
        """The propagation tree, hop by hop from the root: each paused port and the port pausing it."""
        storming = {(s.device, s.port) for s in paused}
        edges = []
        for s in paused:
            _, hops = self.roots.walk_to_root(s.device, s.port, storming)
            peer = self.fabric.peer(s.device, s.port)
            by = f"{peer[0]}:{peer[1]}" if peer else "?"
            edges.append((hops, f"{s.device}:{s.port}<-{by}"))
        edges.sort()
        shown = [f"hop {h}: {e}" for h, e in edges[:_TREE_EDGES_SHOWN]]
        if len(edges) > _TREE_EDGES_SHOWN:
            shown.append(f"+{len(edges) - _TREE_EDGES_SHOWN} more")
        return {"hops": max((h for h, _ in edges), default=0), "tree": "; ".join(shown)}

    def _describe_incast(self, incident: Incident, latest: Symptom, active: set[SymptomKey]) -> None:
        root = incident.root
        receiver = self.fabric.host_behind(root.device, root.port)
        if receiver:
            incident.hosts.add(receiver)
            nic = self.fabric.nic_behind(root.device, root.port)
            if nic and any(k[0] == "ecn_received" and k[1] == nic for k in active):
                incident.evidence["receiver_nic_ecn_cnp"] = "rising"
        hurting = (
            float(latest.evidence.get("drops_pps", 0)) > 0 or latest.evidence.get("pausing_ingress") == 1
        )
        if hurting:
            incident.severity = "critical"  # and stays: see _describe_ecmp
        to = {receiver} if receiver else set()
        matched = self.jobs.attach(incident, to, incident.start_ns, MANY_TO_ONE)
        ranks = self._sending_ranks(matched, receiver)
        senders = sorted(incident.hosts - {receiver})
        if senders:
            incident.evidence["senders"] = len(senders)
            incident.evidence["sender_hosts"] = capped(senders)
            throttled = {self.fabric.host_of(k[1]) for k in active if k[0] == "cnp_received"}
            incident.evidence["senders_receiving_cnp"] = len(throttled & set(senders))
        job = f"; job {', '.join(incident.jobs)} {', '.join(incident.collectives)}" if incident.jobs else ""
        if ranks:
            incident.evidence["sending_ranks"] = ranks
            job += f" from ranks {ranks}"
        # The peak over the incident's life, not the latest poll's: one figure, growing only, so
        # the firing line, the updates, the stored event and the report never disagree about it.
        peak = max(
            float(incident.evidence.get("peak_queue_bytes", 0)),
            float(latest.evidence.get("queue_watermark_bytes", 0)),
        )
        incident.evidence["peak_queue_bytes"] = peak
        incident.summary = (
            f"Incast into {root.device} {root.port} queue {root.priority}"
            f"{f' (host {receiver})' if receiver else ''}: peak queue {peak / 1e3:.0f} KB, "
            f"{latest.evidence.get('fan_in_ports', '?')} ingress ports{job}"
        )

    def _sending_ranks(self, matched: list[Phase], receiver: str | None) -> str:
        """The ranks of the likeliest collective whose connections lead into the receiver, from
        its communication graph (``""`` without one): who is sending, not only which job."""
        for ph in matched[:1]:
            ranks = self.jobs.senders_into(ph.job, ph.comm, {receiver} if receiver else set())
            if ranks:
                return capped([str(r) for r in ranks], 16)
        return ""

    def _describe_ecmp(self, incident: Incident, latest: Symptom) -> None:
        root = incident.root
        under = self.fabric.hosts_under(root.device)
        if float(latest.evidence.get("hot_utilisation", 0)) >= 0.9:
            # The incident's worst, like its peak queue: a hot member swinging around 90% would
            # otherwise flip the severity, and every receiver's alert with it, every few polls.
            incident.severity = "critical"
        matched = self.jobs.attach(incident, under, incident.start_ns, cross_from=under)
        job = f"; job {', '.join(incident.jobs)}" if incident.jobs else ""
        pairs = incident.evidence.get("crossing_host_pairs")
        if matched and pairs:
            job += f" ({pairs} host pairs of {matched[0].job} cross {root.device})"
        incident.summary = (
            f"ECMP collapse on {root.group}: entropy {latest.evidence.get('entropy')}, "
            f"max/mean {latest.evidence.get('max_over_mean')} ({latest.evidence.get('shares')}){job}"
        )

    def _describe_outlier(self, incident: Incident, group: Group) -> None:
        own = [m for m in group.members if self.roots.outlier_root(m) == incident.root]
        latest = max(own or group.members, key=lambda m: m.ts_ns)
        root = incident.root
        host = self.fabric.host_of(root.device)
        if host != root.device:
            incident.hosts.add(host)
        self.jobs.attach(incident, incident.hosts, incident.start_ns)
        features = latest.evidence.get("features", "")
        echoes = sorted({self.fabric.host_of(m.device) for m in group.members if m not in own})
        if echoes:
            incident.evidence["retransmitting_peers"] = capped(echoes)
            incident.hosts |= set(echoes)
        incident.summary = f"Unusual counters on {root.device} {root.port}: {features}".rstrip(": ")


STALLED_EGRESS_HINT = (
    "A switch egress queue holds data and sends nothing without being paused (a PFC deadlock, or a "
    "stuck port): check the switch (PFC watchdog action, buffer and routing loops, the port's state); "
    "the host behind the port is a victim, not the cause."
)

_CARRIED = ("peak_queue_bytes", "stalled_egress")
"""Evidence that is the incident's over its life, not its latest symptom's: kept from update to update."""


def capped(names: list[str], shown: int = 8) -> str:
    more = f" +{len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more
