"""What an incident says: severity, evidence, summary and remediation hint."""

from __future__ import annotations

from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.incident_state import Group, Incident, SymptomKey
from fabricwatch.detectors.jobs import JobAttribution
from fabricwatch.detectors.registry import Registry
from fabricwatch.detectors.roots import Roots


class Describer:
    """The part of every description that is not its kind's: the incident's devices, its evidence
    carried from update to update, and what the topology could not check. The kind's own part is
    its declaration's ``describe`` (``spec.IncidentKind``), given this object for the fabric, the
    roots and the jobs."""

    def __init__(self, roots: Roots, jobs: JobAttribution, registry: Registry) -> None:
        self.roots = roots
        self.jobs = jobs
        self.registry = registry

    @property
    def fabric(self) -> FabricMap:
        return self.roots.fabric

    def describe(self, incident: Incident, group: Group, active: set[SymptomKey]) -> None:
        """Fill in ``incident`` from its group; ``active`` holds the keys of every active symptom."""
        members = group.members
        incident.root = group.root
        incident.devices |= {s.device for s in members}
        latest = max(members, key=lambda s: s.ts_ns)
        kind = self.registry.incidents[incident.kind]
        carried = {k: incident.evidence[k] for k in kind.carried if k in incident.evidence}
        incident.evidence = dict(latest.evidence) | carried
        kind.describe(self, incident, group, latest, active)
        self._say_what_the_topology_lacks(incident)

    def _say_what_the_topology_lacks(self, incident: Incident) -> None:
        """A root the topology does not know, or a switch port it has no link for, is said to be
        unchecked: the incident may stop short of the real root, or split in two."""
        root, fabric = incident.root, self.fabric
        if root.group.startswith("job:"):
            return  # a job, not a device: no topology names it
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
