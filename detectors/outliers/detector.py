"""The learned outliers as the registry knows them: their symptom, its incident and how stage 2
roots, holds and describes it. The model is loaded by whoever runs stage 1 (``load_detector``) and
given to it: without one, nothing emits ``outlier`` symptoms and the kind is not scored."""

from __future__ import annotations

from fabricwatch.detectors.evidence import capped
from fabricwatch.detectors.incident_state import Group, Incident, SymptomKey, outlier_features
from fabricwatch.detectors.outliers.config import OutlierConfig
from fabricwatch.detectors.spec import Describer, Detector, IncidentKind, Placement, SymptomKind
from fabricwatch.schemas.messages import RootCause, Symptom

LINK_ERRORS = frozenset({"symbol_errors", "rx_errors", "link_error_recovery", "link_downed"})
"""Features that say a link corrupts what it carries: the source of its peers' retransmissions."""
RETRANSMISSIONS = frozenset(
    {"out_of_sequence", "packet_seq_err", "implied_nak_seq_err", "local_ack_timeout_err"}
)
"""Features that a lossy link elsewhere causes: on their own, maybe that link's echo."""


def _root(placement: Placement, key: SymptomKey, sym: Symptom) -> RootCause | None:
    """At the NIC end of its link; left out where a rule incident already explains the device."""
    root = placement.roots.outlier_root(sym)
    return None if placement.explained & {sym.device, root.device} else root


def _ripe(placement: Placement, group: Group) -> bool:
    """Retransmissions alone wait a poll for the lossy link they may echo to report."""
    features = outlier_features(group)
    return not (features and features <= RETRANSMISSIONS)


def describe(
    d: Describer, incident: Incident, group: Group, latest: Symptom, active: set[SymptomKey]
) -> None:
    own = [m for m in group.members if d.roots.outlier_root(m) == incident.root]
    latest = max(own or group.members, key=lambda m: m.ts_ns)
    root = incident.root
    host = d.fabric.host_of(root.device)
    if host != root.device:
        incident.hosts.add(host)
    d.jobs.attach(incident, incident.hosts, incident.start_ns)
    features = latest.evidence.get("features", "")
    echoes = sorted({d.fabric.host_of(m.device) for m in group.members if m not in own})
    if echoes:
        incident.evidence["retransmitting_peers"] = capped(echoes)
        incident.hosts |= set(echoes)
    incident.summary = f"Unusual counters on {root.device} {root.port}: {features}".rstrip(": ")


OUTLIER = IncidentKind(
    name="outlier",
    title="Learned outlier",
    colour="tab:gray",
    hint=(
        "This port's counters left their learned baseline and no rule names why: compare the listed "
        "features with its peers (cable/optics errors, retransmissions, a NIC running below its rate)."
    ),
    describe=describe,
    needs_model=True,
    ripe=_ripe,
    explains_devices=False,
    loses_frames=lambda group: bool(outlier_features(group) & LINK_ERRORS),
)
DETECTOR = Detector(
    name="outliers",
    symptoms=(SymptomKind("outlier", "outlier", _root),),
    incidents=(OUTLIER,),
    config=("outliers", OutlierConfig),
)
