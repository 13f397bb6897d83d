"""Stage 2: symptoms of many devices, phases and topology in; incidents with a lifecycle out.

One incident per root cause, not one per symptom (and a learned outlier on a device a rule
incident already explains is not another incident): every port in a PFC storm's pause tree walks back
(link peer by link peer, through devices that are themselves paused) to the port that pauses others
without being paused, and they all join the incident of that root. Incast and ECMP incidents name
the job and collective whose phases were running on the hosts involved.

Grouping runs in ``tick``, after a poll's worth of symptoms arrived, so the order in which devices
of one poll are processed does not change the answer. The fingerprint is a hash of the incident's
identity (kind and root), as Alertmanager's is of its labels: stable from firing to resolved.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from fabricwatch.detectors.config import IncidentConfig
from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.schemas.messages import Anomaly, Phase, RootCause, Symptom

_NS = 1_000_000_000
_HINTS = {
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
_LINK_ERRORS = frozenset({"symbol_errors", "rx_errors", "link_error_recovery", "link_downed"})
_RETRANSMISSIONS = frozenset(
    {"out_of_sequence", "packet_seq_err", "implied_nak_seq_err", "local_ack_timeout_err"}
)
_MANY_TO_ONE = ("Reduce", "AllToAll", "Recv", "SendRecv", "ReduceScatter", "AllGather")

SymptomKey = tuple[str, str, str, int | None, str]


@dataclass
class _Incident:
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
    quiet_since_ns: int | None = None
    interval_ns: int = _NS


@dataclass
class _Seen:
    symptom: Symptom
    interval_ns: int


@dataclass
class _Group:
    """The active symptoms of one candidate incident, and the longest poll interval among them."""

    kind: str
    root: RootCause
    members: list[Symptom] = field(default_factory=list)
    interval_ns: int = 0

    def add(self, seen: _Seen) -> None:
        self.members.append(seen.symptom)
        self.interval_ns = max(self.interval_ns, seen.interval_ns)

    @property
    def start_ns(self) -> int:
        return min(s.start_ns for s in self.members)


class Correlator:
    def __init__(self, config: IncidentConfig | None = None, fabric: FabricMap | None = None) -> None:
        self.config = config or IncidentConfig()
        self.fabric = fabric or FabricMap(None)
        self._active: dict[SymptomKey, _Seen] = {}
        self._incidents: dict[str, _Incident] = {}
        self._phases: list[Phase] = []
        self._prune_at = 1024
        self._storm_roots: dict[SymptomKey, RootCause] = {}
        self._pending: dict[str, int] = {}
        self._echoes: dict[str, str] = {}

    def set_fabric(self, fabric: FabricMap) -> None:
        self.fabric = fabric

    def on_phase(self, phase: Phase) -> None:
        self._phases.append(phase)

    def on_symptom(self, symptom: Symptom) -> None:
        key = (symptom.kind, symptom.device, symptom.port, symptom.priority, symptom.group)
        if not symptom.active:
            self._forget(key)
            return
        seen = self._active.get(key)
        interval = symptom.ts_ns - seen.symptom.ts_ns if seen else _NS
        self._active[key] = _Seen(symptom, max(interval, 1))

    def tick(self, now_ns: int) -> list[Anomaly]:
        """Group the active symptoms into incidents; return what changed since the last tick."""
        self._expire(now_ns)
        groups = self._group()
        out = []
        for fp, group in groups.items():
            incident = self._incidents.get(fp)
            if incident is None:
                if not self._ripe(fp, group, now_ns):
                    continue
                incident = self._incidents[fp] = _Incident(group.kind, group.root, fp, group.start_ns, now_ns)
                self._describe(incident, group)
                out.append(self._anomaly(incident, "firing", now_ns))
                continue
            incident.quiet_since_ns = None
            incident.last_ns = now_ns
            before = (incident.severity, frozenset(incident.devices), tuple(incident.jobs), incident.root)
            self._describe(incident, group)
            if (
                incident.severity,
                frozenset(incident.devices),
                tuple(incident.jobs),
                incident.root,
            ) != before:
                out.append(self._anomaly(incident, "updated", now_ns))
        self._pending = {fp: t for fp, t in self._pending.items() if fp in groups}
        out += self._resolve(groups, now_ns)
        self._prune_phases(now_ns)
        return out

    def _ripe(self, fp: str, group: _Group, now_ns: int) -> bool:
        """Whether a new incident may fire. A storm whose pause tree ends at a switch port waits one
        poll: within a poll, the devices' snapshots arrive in any order, and a port paused by a
        switch whose own paused port is not in yet would name that switch as root. Once its
        symptom is in, the port re-homes and the false root never fires. A NIC root, the common
        case, fires at once. So does a learned outlier, unless all it shows is retransmissions: those
        wait a poll for the lossy link they may echo."""
        if group.kind == "pfc_storm":
            waits = not self.fabric.is_nic(group.root.device)
        else:
            # Retransmissions alone may be a lossy link's echo whose source has not reported yet.
            waits = (
                group.kind == "outlier"
                and bool(_outlier_features(group))
                and _outlier_features(group) <= _RETRANSMISSIONS
            )
        if not waits:
            return True
        first = self._pending.setdefault(fp, now_ns)
        return now_ns - first >= group.interval_ns

    def _expire(self, now_ns: int) -> None:
        """Forget symptoms whose device stopped reporting (collector gone): they cannot clear."""
        stale = [k for k, s in self._active.items() if now_ns - s.symptom.ts_ns > 3 * max(s.interval_ns, _NS)]
        for k in stale:
            self._forget(k)

    def _forget(self, key: SymptomKey) -> None:
        self._active.pop(key, None)
        self._storm_roots.pop(key, None)

    def _group(self) -> dict[str, _Group]:
        groups: dict[str, _Group] = {}
        storming = {(k[1], k[2]) for k in self._active if k[0] == "pfc_storm"}
        paused_devices = {d for d, _ in storming}
        explained = {
            d for i in self._incidents.values() if i.kind != "outlier" for d in (*i.devices, i.root.device)
        }
        for key, seen in self._active.items():
            sym = seen.symptom
            if key[0] == "pfc_storm":
                kind, root = "pfc_storm", self._storm_membership(key, sym, storming, paused_devices)
            elif key[0] == "pfc_pausing":
                kind, root = "pfc_storm", RootCause(sym.device, sym.port, sym.priority)
            elif key[0] == "incast":
                kind, root = "incast", self._incast_identity(sym)
            elif key[0] == "ecmp_imbalance":
                kind, root = "ecmp_collapse", RootCause(sym.device, group=sym.group)
            elif key[0] == "outlier":
                kind, root = "outlier", self._outlier_root(sym)
                if {sym.device, root.device} & explained:
                    continue
            else:
                continue
            group = groups.setdefault(fingerprint(kind, root), _Group(kind, root))
            group.add(seen)
        for group in groups.values():
            if group.kind == "incast":
                group.root = self._first_rail(group)
        self._fold_retransmission_echoes(groups)
        return groups

    def _fold_retransmission_echoes(self, groups: dict[str, _Group]) -> None:
        """A lossy link makes its peers retransmit: NICs whose only oddity is retransmissions
        (out-of-sequence, NAKs, ack timeouts) while a job they share runs on a host with link errors
        are that link's echo, part of its incident rather than incidents of their own."""
        lossy = {
            self.fabric.host_of(g.root.device): fp
            for fp, g in groups.items()
            if g.kind == "outlier" and _outlier_features(g) & _LINK_ERRORS
        }
        self._echoes = {e: t for e, t in self._echoes.items() if t in self._incidents or t in lossy.values()}
        for fp, group in list(groups.items()):
            if group.kind != "outlier" or fp in lossy.values():
                continue
            target = self._echoes.get(fp) or self._echo_source(group, lossy)
            if target is None:
                continue
            # Sticky, like storm membership: the echo may outlast the errors that caused it.
            self._echoes[fp] = target
            into = groups.setdefault(
                target,
                _Group("outlier", self._incidents[target].root if target in self._incidents else group.root),
            )
            into.members.extend(group.members)
            into.interval_ns = max(into.interval_ns, group.interval_ns)
            del groups[fp]

    def _echo_source(self, group: _Group, lossy: dict[str, str]) -> str | None:
        """The lossy link's incident this retransmission-only group echoes, if any."""
        features = _outlier_features(group)
        if not lossy or not features or not features <= _RETRANSMISSIONS:
            return None
        host = self.fabric.host_of(group.root.device)
        now = max(m.ts_ns for m in group.members)
        peers = sorted(self._hosts_sharing_a_phase(host, now) & lossy.keys())
        return lossy[peers[0]] if peers else None

    def _hosts_sharing_a_phase(self, host: str, at_ns: int) -> set[str]:
        running = (
            ph for ph in self._phases if ph.begin_ns <= at_ns and (ph.end_ns is None or ph.end_ns >= at_ns)
        )
        return {h for ph in running if host in (parts := set(ph.participants())) for h in parts} - {host}

    def _outlier_root(self, sym: Symptom) -> RootCause:
        """A link is one thing with two ends: an outlier on a host-facing switch port is rooted at
        the NIC behind it, where the other end's symptom (a lossy cable, a slowed NIC) lands too."""
        peer = self.fabric.peer(sym.device, sym.port)
        if peer is not None and self.fabric.is_nic(peer[0]):
            return RootCause(peer[0], peer[1])
        return RootCause(sym.device, sym.port)

    def _incast_identity(self, sym: Symptom) -> RootCause:
        """An incast is into a host: a host with a NIC per rail is congested on every rail's leaf
        port at once, and that is one incident. Without topology, the port is the identity."""
        receiver = self.fabric.host_behind(sym.device, sym.port)
        if receiver is None:
            return RootCause(sym.device, sym.port, sym.priority)
        return RootCause(receiver, priority=sym.priority, group="receiver")

    def _first_rail(self, group: _Group) -> RootCause:
        """The victim port reported as root: the leaf port of the receiver's first congested NIC."""
        first = min(
            group.members, key=lambda s: (self.fabric.nic_behind(s.device, s.port) or "", s.device, s.port)
        )
        return RootCause(first.device, first.port, first.priority)

    def _storm_membership(
        self, key: SymptomKey, sym: Symptom, storming: set[tuple[str, str]], paused_devices: set[str]
    ) -> RootCause:
        """The root a paused port belongs to. Membership is sticky: when the root recovers first,
        the ports it paused unwind hop by hop and, cut off from it, would each look like a root of
        its own. A port re-homes only when its incident's root turns out to be paused itself."""
        root = self._storm_roots.get(key)
        if root is None or root.device in paused_devices:
            root = self._storm_roots[key] = self._join_open_storm(self._storm_root(sym, storming))
        return root

    def _join_open_storm(self, root: RootCause) -> RootCause:
        """A switch port found as root, on or next to a device of an open storm's tree, belongs to
        that storm: pauses spread from the tree one link at a time, and the walk stops short when a
        port on the way does not meet the watchdog's test (restored first, or never silent: a queue
        that still drains a trickle). A device in the tree outranks a neighbour of it."""
        if self.fabric.is_nic(root.device):
            return root
        storms = [i for i in self._incidents.values() if i.kind == "pfc_storm"]
        for incident in storms:
            if root.device in incident.devices:
                return incident.root
        near = self.fabric.neighbours(root.device)
        for incident in sorted(storms, key=lambda i: -i.start_ns):
            if near & incident.devices:
                return incident.root
        return root

    def _storm_root(self, sym: Symptom, storming: set[tuple[str, str]]) -> RootCause:
        (device, port), _ = self._walk_to_root(sym.device, sym.port, storming)
        return RootCause(device, port, sym.priority)

    def _walk_to_root(
        self, device: str, port: str, storming: set[tuple[str, str]]
    ) -> tuple[tuple[str, str], int]:
        """Walk from a paused port to whoever pauses it, while that device is itself paused; return
        the root (the first pauser that is not paused; the port itself if its peer is unknown) and
        the number of hops."""
        hops, visited = 1, {(device, port)}
        while True:
            peer = self.fabric.peer(device, port)
            if peer is None:
                return (device, port), hops
            upstream = sorted(p for d, p in storming if d == peer[0] and (d, p) not in visited)
            if not upstream:
                return peer, hops
            device, port, hops = peer[0], upstream[0], hops + 1
            visited.add((device, port))

    def _describe(self, incident: _Incident, group: _Group) -> None:
        members = group.members
        incident.root = group.root
        incident.devices |= {s.device for s in members}
        latest = max(members, key=lambda s: s.ts_ns)
        incident.evidence = dict(latest.evidence)
        if incident.kind == "pfc_storm":
            self._describe_storm(incident, members)
        elif incident.kind == "incast":
            self._describe_incast(incident, latest)
        elif incident.kind == "ecmp_collapse":
            self._describe_ecmp(incident, latest)
        else:
            self._describe_outlier(incident, group)

    def _describe_storm(self, incident: _Incident, members: list[Symptom]) -> None:
        root = incident.root
        host = self.fabric.host_of(root.device)
        incident.hosts.add(host)
        incident.severity = "critical"
        paused = [s for s in members if s.kind == "pfc_storm"]
        incident.evidence["paused_ports"] = len({(s.device, s.port) for s in paused})
        incident.evidence["paused_devices"] = len({s.device for s in paused})
        incident.evidence.update(self._pause_tree(paused))
        self._attach_jobs(incident, {host}, incident.start_ns)
        incident.summary = (
            f"PFC storm on priority {root.priority} rooted at {root.device} port {root.port} "
            f"(host {host}): {incident.evidence['paused_ports']} ports paused on "
            f"{incident.evidence['paused_devices']} devices"
        )

    def _pause_tree(self, paused: list[Symptom]) -> dict[str, int | str]:
        """The propagation tree, hop by hop from the root: each paused port and the port pausing it."""
        storming = {(s.device, s.port) for s in paused}
        edges = []
        for s in paused:
            _, hops = self._walk_to_root(s.device, s.port, storming)
            peer = self.fabric.peer(s.device, s.port)
            by = f"{peer[0]}:{peer[1]}" if peer else "?"
            edges.append((hops, f"{s.device}:{s.port}<-{by}"))
        edges.sort()
        shown = [f"hop {h}: {e}" for h, e in edges[:_TREE_EDGES_SHOWN]]
        if len(edges) > _TREE_EDGES_SHOWN:
            shown.append(f"+{len(edges) - _TREE_EDGES_SHOWN} more")
        return {"hops": max((h for h, _ in edges), default=0), "tree": "; ".join(shown)}

    def _describe_incast(self, incident: _Incident, latest: Symptom) -> None:
        root = incident.root
        receiver = self.fabric.host_behind(root.device, root.port)
        if receiver:
            incident.hosts.add(receiver)
            nic = self.fabric.nic_behind(root.device, root.port)
            if nic and any(k[0] == "ecn_received" and k[1] == nic for k in self._active):
                incident.evidence["receiver_nic_ecn_cnp"] = "rising"
        hurting = (
            float(latest.evidence.get("drops_pps", 0)) > 0 or latest.evidence.get("pausing_ingress") == 1
        )
        incident.severity = "critical" if hurting else "warning"
        self._attach_jobs(incident, {receiver} if receiver else set(), incident.start_ns, _MANY_TO_ONE)
        senders = sorted(incident.hosts - {receiver})
        if senders:
            incident.evidence["senders"] = len(senders)
            incident.evidence["sender_hosts"] = _capped(senders)
            throttled = {self.fabric.host_of(k[1]) for k in self._active if k[0] == "cnp_received"}
            incident.evidence["senders_receiving_cnp"] = len(throttled & set(senders))
        job = f"; job {', '.join(incident.jobs)} {', '.join(incident.collectives)}" if incident.jobs else ""
        incident.summary = (
            f"Incast into {root.device} {root.port} queue {root.priority}"
            f"{f' (host {receiver})' if receiver else ''}: peak queue "
            f"{float(latest.evidence.get('queue_watermark_bytes', 0)) / 1e3:.0f} KB, "
            f"{latest.evidence.get('fan_in_ports', '?')} ingress ports{job}"
        )

    def _describe_ecmp(self, incident: _Incident, latest: Symptom) -> None:
        root = incident.root
        under = self.fabric.hosts_under(root.device)
        incident.severity = (
            "critical" if float(latest.evidence.get("hot_utilisation", 0)) >= 0.9 else "warning"
        )
        self._attach_jobs(incident, under, incident.start_ns, cross_from=under)
        job = f"; job {', '.join(incident.jobs)}" if incident.jobs else ""
        incident.summary = (
            f"ECMP collapse on {root.group}: entropy {latest.evidence.get('entropy')}, "
            f"max/mean {latest.evidence.get('max_over_mean')} ({latest.evidence.get('shares')}){job}"
        )

    def _describe_outlier(self, incident: _Incident, group: _Group) -> None:
        own = [m for m in group.members if self._outlier_root(m) == incident.root]
        latest = max(own or group.members, key=lambda m: m.ts_ns)
        root = incident.root
        host = self.fabric.host_of(root.device)
        if host != root.device:
            incident.hosts.add(host)
        self._attach_jobs(incident, incident.hosts, incident.start_ns)
        features = latest.evidence.get("features", "")
        echoes = sorted({self.fabric.host_of(m.device) for m in group.members if m not in own})
        if echoes:
            incident.evidence["retransmitting_peers"] = _capped(echoes)
            incident.hosts |= set(echoes)
        incident.summary = f"Unusual counters on {root.device} {root.port}: {features}".rstrip(": ")

    def _attach_jobs(
        self,
        incident: _Incident,
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
        slack = 2 * _NS
        matches = []
        for ph in self._phases:
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

    def _resolve(self, groups: dict[str, _Group], now_ns: int) -> list[Anomaly]:
        """Resolve incidents quiet for ``resolve_after_s`` and over two of their polls, so that one
        missed or calm poll at 10 s polling does not split an incident in two. An incident on a
        device inside an active storm's pause tree waits for the storm to end."""
        out = []
        frozen = {
            d
            for fp, i in self._incidents.items()
            if i.kind == "pfc_storm" and fp in groups
            for d in i.devices
        }
        for fp, incident in list(self._incidents.items()):
            if fp in groups:
                incident.interval_ns = groups[fp].interval_ns
                continue
            if incident.kind != "pfc_storm" and incident.devices & frozen:
                # Traffic through a storm's tree is frozen: its silence says nothing about this fault.
                incident.quiet_since_ns = None
                continue
            if incident.quiet_since_ns is None:
                incident.quiet_since_ns = now_ns
            # Two and a half polls: decided between polls, never racing the next poll's symptoms.
            wait_ns = max(self.config.resolve_after_s * _NS, 5 * incident.interval_ns // 2)
            if now_ns - incident.quiet_since_ns >= wait_ns:
                out.append(self._anomaly(incident, "resolved", now_ns, end_ns=incident.last_ns))
                del self._incidents[fp]
        return out

    def _prune_phases(self, now_ns: int) -> None:
        """Keep phases that ended in the last ten minutes; amortised, so memory stays bounded."""
        if len(self._phases) < self._prune_at:
            return
        horizon = now_ns - 600 * _NS
        self._phases = [p for p in self._phases if p.end_ns is None or p.end_ns >= horizon]
        self._prune_at = 2 * len(self._phases) + 1024

    @staticmethod
    def _anomaly(incident: _Incident, status: str, now_ns: int, end_ns: int | None = None) -> Anomaly:
        return Anomaly(
            fingerprint=incident.fingerprint,
            kind=incident.kind,  # type: ignore[arg-type]
            severity=incident.severity,  # type: ignore[arg-type]
            status=status,  # type: ignore[arg-type]
            start_ns=incident.start_ns,
            ts_ns=now_ns,
            end_ns=end_ns,
            root=incident.root,
            summary=incident.summary,
            hint=_HINTS[incident.kind],
            devices=sorted(incident.devices),
            hosts=sorted(incident.hosts),
            jobs=list(incident.jobs),
            collectives=list(incident.collectives),
            evidence=dict(incident.evidence),
        )


def fingerprint(kind: str, root: RootCause) -> str:
    ident = f"{kind}|{root.device}|{root.port}|{root.priority}|{root.group}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def _outlier_features(group: _Group) -> set[str]:
    """Counter names behind a group's outlier evidence (``"out_of_sequence/rx_packets 100 ppm, ..."``)."""
    text = ", ".join(str(m.evidence.get("features", "")) for m in group.members)
    return {part.strip().split(" ")[0].split("/")[0] for part in text.split(",") if part.strip()}


def _capped(names: list[str], shown: int = 8) -> str:
    more = f" +{len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more
