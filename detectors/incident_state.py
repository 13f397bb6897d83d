"""What stage 2 keeps of an incident and of the symptoms grouped under it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from fabricwatch.schemas.messages import RootCause, Symptom

NS = 1_000_000_000

SymptomKey = tuple[str, str, str, int | None, str]


@dataclass
class Incident:
    """An open incident: its identity (kind, root, fingerprint) and what it says so far."""

    kind: str
    root: RootCause
    fingerprint: str
    start_ns: int
    last_ns: int
    severity: str = "warning"
    devices: set[str] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    jobs: list[str] = field(default_factory=list)
    collectives: list[str] = field(default_factory=list)
    evidence: dict[str, float | int | str] = field(default_factory=dict)
    summary: str = ""
    hint: str = ""
    """What to do, where it is not the kind's usual remedy (its declaration's ``hint``)."""
    quiet_since_ns: int | None = None
    interval_ns: int = NS
    caused_by: str = ""
    """The fingerprint of the incident that causes this one (its kind's ``caused_by``), if any."""
    cause: str = ""
    """That incident in words (its title and root), said in this one's summary and evidence."""
    finding: bool = False
    """Said as a finding though its kind pages (a link taken down on purpose): routed apart from
    incident pages. It still holds its hosts (``Correlator.hosts_held``): it explains their
    traffic stopping."""


@dataclass
class Seen:
    symptom: Symptom
    interval_ns: int


@dataclass
class Group:
    """The active symptoms of one candidate incident, and the longest poll interval among them."""

    kind: str
    root: RootCause
    members: list[Symptom] = field(default_factory=list)
    interval_ns: int = 0

    def add(self, seen: Seen) -> None:
        self.members.append(seen.symptom)
        self.interval_ns = max(self.interval_ns, seen.interval_ns)

    @property
    def start_ns(self) -> int:
        return min(s.start_ns for s in self.members)


def fingerprint(kind: str, root: RootCause) -> str:
    ident = f"{kind}|{root.device}|{root.port}|{root.priority}|{root.group}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def outlier_features(group: Group) -> set[str]:
    """Counter names behind a group's outlier evidence (``"out_of_sequence/rx_packets 100 ppm, ..."``)."""
    text = ", ".join(str(m.evidence.get("features", "")) for m in group.members)
    return {part.strip().split(" ")[0].split("/")[0] for part in text.split(",") if part.strip()}
