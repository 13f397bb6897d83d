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

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from fabricwatch.detectors.config import IncidentConfig
from fabricwatch.detectors.describe import Describer
from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.incident_state import (
    NS,
    Group,
    Incident,
    Seen,
    SymptomKey,
    fingerprint,
    outlier_features,
)
from fabricwatch.detectors.jobs import JobAttribution
from fabricwatch.detectors.outliers.detector import RETRANSMISSIONS
from fabricwatch.detectors.registry import REGISTRY, Registry
from fabricwatch.detectors.roots import Roots
from fabricwatch.schemas.messages import Anomaly, PhaseMessage, RootCause, Symptom

_FIRST_INTERVAL_MAX_NS = 60 * NS
"""A first symptom's interval is its streak's age so far, at most this (a restarted stage 2 meets
streaks minutes old: their polls are not minutes apart)."""


@dataclass
class Placement:
    """What a root rule or a ripeness test (``spec``) may ask while a tick groups the active
    symptoms: the fabric, the roots, the devices open rule incidents explain, the ports with an
    active symptom of a kind, and a storm's sticky membership."""

    correlator: Correlator
    explained: set[str]
    now_ns: int
    _ports: dict[str, set[tuple[str, str]]] = field(default_factory=dict, init=False)
    _devices: dict[str, set[str]] = field(default_factory=dict, init=False)
    _held: set[str] | None = field(default=None, init=False)

    @property
    def fabric(self) -> FabricMap:
        return self.correlator.fabric

    def hosts_held(self) -> set[str]:
        """``Correlator.hosts_held``, gathered once per tick."""
        if self._held is None:
            self._held = self.correlator.hosts_held(self.now_ns)
        return self._held

    @property
    def roots(self) -> Roots:
        return self.correlator.roots

    def ports_with(self, kind: str) -> set[tuple[str, str]]:
        """(device, port) of every active symptom of ``kind``, gathered once per tick."""
        found = self._ports.get(kind)
        if found is None:
            found = self._ports[kind] = {(k[1], k[2]) for k in self.correlator.active_keys() if k[0] == kind}
        return found

    def devices_with(self, kind: str) -> set[str]:
        """The devices of ``ports_with(kind)``, gathered once per tick."""
        found = self._devices.get(kind)
        if found is None:
            found = self._devices[kind] = {d for d, _ in self.ports_with(kind)}
        return found

    def storm_root(self, key: SymptomKey, sym: Symptom) -> RootCause:
        return self.correlator.storm_membership(key, sym, self)

    def jobs_on(self, host: str, at_ns: int, since_ns: int | None = None) -> list[str]:
        return self.correlator.jobs.jobs_on(host, at_ns, since_ns)


HELD_AFTER_S = 60.0
"""How long after an incident resolves its hosts are still held by it: what it did to their jobs
(a ring a storm stopped) is judged over half a minute or more, and shows until then."""

ECHO_FACTOR = 10.0
"""A NIC retransmitting more than this many times the loss ratio of a lossy link is not that
link's echo (a lost packet is counted about once by the counters the retransmission detector reads)."""


def _peak(group: Group, keys: tuple[str, ...], default: float) -> float:
    """The largest of these evidence numbers among a group's symptoms; ``default`` if none has one."""
    found = [float(m.evidence[k]) for m in group.members for k in keys if k in m.evidence]
    return max(found, default=default)


class Correlator:
    """Groups the active symptoms into incidents at each tick and owns their lifecycle (firing,
    updated, resolved). Where an incident is rooted is ``Roots``' job, what it says is
    ``Describer``'s, which job it belongs to ``JobAttribution``'s."""

    def __init__(
        self,
        config: IncidentConfig | None = None,
        fabric: FabricMap | None = None,
        registry: Registry = REGISTRY,
    ) -> None:
        self.config = config or IncidentConfig()
        self.registry = registry
        self.roots = Roots(fabric or FabricMap(None))
        self.jobs = JobAttribution()
        self.describer = Describer(self.roots, self.jobs, registry)
        self._active: dict[SymptomKey, Seen] = {}
        self._incidents: dict[str, Incident] = {}
        self._storm_roots: dict[SymptomKey, RootCause] = {}
        self._pending: dict[str, int] = {}
        self._echoes: dict[str, str] = {}
        self._ended: dict[tuple[str, str, str], str] = {}
        """Where a detector ended a symptom for lack of data, and why: the incident rooted there
        resolves saying so, not as if it had healed."""
        self._released: dict[str, int] = {}
        """Hosts of incidents that resolved lately, and when: held a while longer (``hosts_held``)."""

    @property
    def fabric(self) -> FabricMap:
        return self.roots.fabric

    def set_fabric(self, fabric: FabricMap) -> None:
        self.roots.fabric = fabric

    def on_phase(self, phase: PhaseMessage) -> None:
        self.jobs.on_phase(phase)

    def on_symptom(self, symptom: Symptom) -> None:
        key = (symptom.kind, symptom.device, symptom.port, symptom.priority, symptom.group)
        if not symptom.active:
            if "ended" in symptom.evidence:  # for lack of data: the incident it ends says so
                self._ended[(symptom.device, symptom.port, symptom.group)] = str(symptom.evidence["ended"])
            self._forget(key)
            return
        self._ended.pop((symptom.device, symptom.port, symptom.group), None)
        seen = self._active.get(key)
        if seen is not None:
            interval = symptom.ts_ns - seen.symptom.ts_ns
        else:
            # A first symptom spans at least the poll it was seen in: at 10 s polls, one second
            # would expire it at once when its switch's clock runs a few seconds behind the rest.
            interval = min(max(symptom.ts_ns - symptom.start_ns, NS), _FIRST_INTERVAL_MAX_NS)
        self._active[key] = Seen(symptom, max(interval, 1))

    def tick(self, now_ns: int, settled_ns: int | None = None) -> list[Anomaly]:
        """Group the active symptoms into incidents; return what changed since the last tick.

        ``settled_ns``: the time up to which every input is in (streaming: the slowest input's
        own watermark, where ``now_ns`` may run ahead of it on the wall clock); by default
        ``now_ns``, as in process, where input comes in time order. A new incident that waits
        for evidence (``_ripe``) waits in settled time: evidence late on its way is not absent."""
        self._expire(now_ns)
        placement = Placement(self, self._explained(), now_ns)
        groups = self._group(placement)
        out = []
        kinds = self.registry.incidents
        # Kinds that another may cause come last, so that a cause found this tick is open first.
        for fp, group in sorted(groups.items(), key=lambda item: bool(kinds[item[1].kind].caused_by)):
            incident = self._incidents.get(fp)
            if incident is None:
                if not self._ripe(fp, group, now_ns, now_ns if settled_ns is None else settled_ns, placement):
                    continue
                self._pending.pop(fp, None)
                incident = self._incidents[fp] = Incident(group.kind, group.root, fp, group.start_ns, now_ns)
                self._link_cause(incident, group, groups)
                self._describe(incident, group)
                out.append(self._anomaly(incident, "firing", now_ns))
                continue
            incident.quiet_since_ns = None
            incident.last_ns = now_ns
            before = self._news(incident)
            self._describe(incident, group)
            if self._news(incident) != before:
                out.append(self._anomaly(incident, "updated", now_ns))
        self._pending = {fp: t for fp, t in self._pending.items() if fp in groups}
        out += self._resolve(groups, now_ns)
        self.jobs.prune(now_ns)
        return out

    def _describe(self, incident: Incident, group: Group) -> None:
        self.describer.describe(incident, group, set(self._active))
        if incident.caused_by:
            incident.evidence["caused_by"] = incident.cause
            incident.summary += f"; caused by the {incident.cause}"

    def _link_cause(self, incident: Incident, group: Group, groups: dict[str, Group]) -> None:
        """Link a new incident of a kind that declares ``caused_by`` to the open incident of one of
        those kinds that shares a port with it (a root's or a symptom's port, either end of a
        link), the earliest such. Decided once, when it fires: what paged stays paged."""
        causes = self.registry.incidents[group.kind].caused_by
        if not causes:
            return
        ports = self._ports(group.root, group.members)
        devices = {d for d, _ in ports}

        def shares(fp: str, i: Incident) -> bool:
            if i.root.group and not i.root.port:  # a group's incident (ECMP): any port of its device
                return i.root.device in devices
            return bool(ports & self._ports(i.root, groups[fp].members if fp in groups else []))

        found = [(i.start_ns, fp) for fp, i in self._incidents.items() if i.kind in causes and shares(fp, i)]
        if found:
            fp = min(found)[1]
            cause = self._incidents[fp]
            at = f"{cause.root.device} {cause.root.port}".strip()
            incident.caused_by = fp
            incident.cause = f"{self.registry.incidents[cause.kind].title.lower()} at {at}"

    def _ports(self, root: RootCause, members: list[Symptom]) -> set[tuple[str, str]]:
        """The ports of an incident, and those cabled to them: drops at either end of a link."""
        ends = {(root.device, root.port)} | {(m.device, m.port) for m in members}
        ends = {e for e in ends if e[1]}
        peers = {self.fabric.peer(*e) for e in ends}
        return ends | {p for p in peers if p is not None}

    def _news(self, incident: Incident) -> tuple:
        """What, changed, makes an ``updated`` event: the rest (a peak, a rate) changes every poll."""
        said = tuple(incident.evidence.get(k) for k in self.registry.incidents[incident.kind].updated_on)
        return incident.severity, frozenset(incident.devices), tuple(incident.jobs), incident.root, said

    def _ripe(self, fp: str, group: Group, now_ns: int, settled_ns: int, placement: Placement) -> bool:
        """Whether a new incident may fire: at once, unless its kind's ``ripe`` test says it may
        still be wrong (a storm's root not proven yet, retransmissions that may be another
        incident's echo); then it waits until one poll of its group has settled since it was
        first seen. Found (issue 34): through two workers under load, a link's symptoms reached
        stage 2 after a poll of projected time had passed, and the retransmissions they explain
        fired alone."""
        ripe = self.registry.incidents[group.kind].ripe
        if ripe is None or ripe(placement, group):
            return True
        first = self._pending.setdefault(fp, now_ns)
        return min(now_ns, settled_ns) - first >= group.interval_ns

    @property
    def waiting(self) -> bool:
        """Whether a new incident waits for evidence (``_ripe``): a later settled time may fire it."""
        return bool(self._pending)

    def _expire(self, now_ns: int) -> None:
        """Forget symptoms whose device stopped reporting (collector gone): they cannot clear. The
        device's silence is an incident of its own (``silence``), whose symptom is held until cleared."""
        held = {name for name, kind in self.registry.symptoms.items() if kind.until_cleared}
        wait_ns = int(self.config.unrefreshed_s * NS)
        stale = [
            k
            for k, s in self._active.items()
            if k[0] not in held and now_ns - s.symptom.ts_ns > max(3 * s.interval_ns, wait_ns)
        ]
        for k in stale:
            self._forget(k)

    def _forget(self, key: SymptomKey) -> None:
        self._active.pop(key, None)
        self._storm_roots.pop(key, None)

    def adopt(self, events: Iterable[Anomaly], owns: Callable[[str], bool]) -> int:
        """Take over the open incidents another stage 2 published for devices this one now owns
        (their symptoms come here: a rebalance, a restart): the latest event of each
        fingerprint, unless resolved. Without them a new owner sees a storm's unwinding leaves
        cut off from their root and opens a storm at each, and an incident that ended during the
        handover never resolves.
        An adopted incident waits ``unrefreshed_s`` for its symptoms before it resolves."""
        latest: dict[str, Anomaly] = {}
        for a in events:
            if a.fingerprint not in latest or a.ts_ns >= latest[a.fingerprint].ts_ns:
                latest[a.fingerprint] = a
        taken = 0
        for fp, a in latest.items():
            if a.status == "resolved" or fp in self._incidents or a.kind not in self.registry.incidents:
                continue
            if not any(owns(d) for d in (a.root.device, *a.devices)):
                continue
            self._incidents[fp] = Incident(
                a.kind,
                a.root,
                fp,
                a.start_ns,
                a.ts_ns,
                severity=a.severity,
                devices=set(a.devices),
                hosts=set(a.hosts),
                jobs=list(a.jobs),
                collectives=list(a.collectives),
                evidence=dict(a.evidence),
                summary=a.summary,
                hint=a.hint,
                caused_by=a.caused_by,
                cause=str(a.evidence.get("caused_by", "")),
                interval_ns=int(self.config.unrefreshed_s * NS * 2 / 5),
            )
            taken += 1
        return taken

    def release(self, owns: Callable[[str], bool]) -> int:
        """Forget, without resolving them, the incidents and symptoms of devices another stage 2
        owns now: it carries them on (``adopt``), and a resolution from here would be false."""
        gone = [
            fp for fp, i in self._incidents.items() if not any(owns(d) for d in (i.root.device, *i.devices))
        ]
        for fp in gone:
            del self._incidents[fp]
        for key in [k for k in self._active if not owns(k[1])]:
            self._forget(key)
        return len(gone)

    def active_keys(self) -> list[SymptomKey]:
        return list(self._active)

    def hosts_held(self, now_ns: int) -> set[str]:
        """The hosts (victims, jobs' hosts) of every open incident that is not a finding, and of
        those resolved less than ``HELD_AFTER_S`` ago: a job a storm stopped takes a while to be
        seen running again."""
        kinds = self.registry.incidents
        self._released = {h: t for h, t in self._released.items() if now_ns - t < HELD_AFTER_S * NS}
        held = {h for i in self._incidents.values() if not kinds[i.kind].finding for h in i.hosts}
        return held | self._released.keys()

    def _explained(self) -> set[str]:
        """Devices of open incidents whose kind explains what else their devices show."""
        kinds = self.registry.incidents
        return {
            d
            for i in self._incidents.values()
            if kinds[i.kind].explains_devices
            for d in (*i.devices, i.root.device)
        }

    def _group(self, placement: Placement) -> dict[str, Group]:
        """Each active symptom under the incident its kind's root rule names; evidence-only kinds
        (and kinds this build does not know: a newer stage 1's) stay evidence for the others."""
        groups: dict[str, Group] = {}
        symptoms = self.registry.symptoms
        for key, seen in self._active.items():
            rule = symptoms.get(key[0])
            if rule is None or rule.incident is None or rule.root is None:
                continue
            root = rule.root(placement, key, seen.symptom)
            if root is None:
                continue
            group = groups.setdefault(fingerprint(rule.incident, root), Group(rule.incident, root))
            group.add(seen)
        for group in groups.values():
            settle = self.registry.incidents[group.kind].reported_root
            if settle is not None:
                group.root = settle(placement, group)
        self._fold_retransmission_echoes(groups)
        return groups

    def _fold_retransmission_echoes(self, groups: dict[str, Group]) -> None:
        """A lossy link makes its peers retransmit: NICs whose only oddity is retransmissions
        (out-of-sequence, NAKs, ack timeouts: an ``rdma_retransmission`` group, or a learned
        outlier on those features only) at a host whose traffic crosses a link that loses frames
        (a kind's ``loses_frames``: link corruption, packet loss, a learned outlier with link
        errors), or that shares a running job with such a host, are that link's echo, part of its
        incident rather than incidents of their own."""
        kinds = self.registry.incidents
        lossy: dict[str, str] = {}
        loss_ratio: dict[str, float] = {}
        for fp, g in groups.items():
            test = kinds[g.kind].loses_frames
            if test is not None and test(g):
                lossy.update((host, fp) for host in sorted(self._hosts_at(g)))
                loss_ratio[fp] = _peak(g, ("peak_error_ratio", "peak_loss_ratio"), math.inf)
        self._echoes = {e: t for e, t in self._echoes.items() if t in self._incidents or t in lossy.values()}
        for fp, group in list(groups.items()):
            if group.kind not in ("outlier", "rdma_retransmission") or fp in lossy.values():
                continue
            target = self._echoes.get(fp) or self._echo_source(group, lossy, loss_ratio)
            if target is None:
                continue
            # Sticky, like storm membership: the echo may outlast the errors that caused it.
            self._echoes[fp] = target
            into = groups.get(target)
            if into is None:
                into = groups[target] = Group(self._incidents[target].kind, self._incidents[target].root)
            into.members.extend(group.members)  # its interval stays the link's: echoes do not pace it
            del groups[fp]

    def _hosts_at(self, group: Group) -> set[str]:
        """The hosts whose traffic crosses a lossy link: at its NIC ends, or under its switch ends
        (a leaf's uplink carries its hosts' traffic to the rest of the fabric)."""
        ends = {group.root.device} | {m.device for m in group.members}
        far = self.fabric.peer(group.root.device, group.root.port)
        ends |= {far[0]} if far else set()
        nics = {self.fabric.host_of(d) for d in ends if self.fabric.is_nic(d)}
        return nics | {h for d in ends if not self.fabric.is_nic(d) for h in self.fabric.hosts_under(d)}

    def _echo_source(self, group: Group, lossy: dict[str, str], loss_ratio: dict[str, float]) -> str | None:
        """The lossy link's incident this retransmission-only group echoes, if any."""
        if not lossy:
            return None
        if group.kind == "outlier":
            features = outlier_features(group)
            if not features or not features <= RETRANSMISSIONS:
                return None
        host = self.fabric.host_of(group.root.device)
        # A link losing 1e-5 of its frames cannot make a NIC resend 1e-3 of its packets: retransmitting
        # far more than the link loses is the NIC's own doing, whoever it shares a job with.
        resent = _peak(group, ("peak_retransmit_ratio",), 0.0)
        explains = {h: fp for h, fp in lossy.items() if resent <= ECHO_FACTOR * loss_ratio.get(fp, math.inf)}
        if host in explains:
            return explains[host]  # its own link, or its leaf's
        now = max(m.ts_ns for m in group.members)
        peers = sorted(self.jobs.hosts_sharing_a_phase(host, now) & explains.keys())
        return explains[peers[0]] if peers else None

    def storm_membership(self, key: SymptomKey, sym: Symptom, placement: Placement) -> RootCause:
        """The root a paused port belongs to. Membership is sticky: when the root recovers first,
        the ports it paused unwind hop by hop and, cut off from it, would each look like a root of
        its own. A port re-homes only when its incident's root turns out to be paused itself, or
        its root switch turns out to have a stalled egress port (the pauses began there)."""
        storming, pausing = placement.ports_with("pfc_storm"), placement.ports_with("pfc_pausing")
        paused_devices = placement.devices_with("pfc_storm")
        root = self._storm_roots.get(key)
        stalled_there = root is not None and any(d == root.device and p != root.port for d, p in pausing)
        if root is None or root.device in paused_devices or stalled_there:
            found = self.roots.storm_root(sym, storming, pausing)
            root = self._storm_roots[key] = self._join_open_storm(found)
        elif not self.fabric.is_nic(root.device) and not self._roots_a_storm(root):
            # A switch root that has not fired yet (it waits a poll to be proven) joins a storm that
            # opened meanwhile next to it. Found (issue 33, 3): at 2 s polls with snapshots missing,
            # spine ports paused from the far side were found in the same tick as the NIC's storm,
            # before it was open, and kept their own roots: three incidents for one storm.
            root = self._storm_roots[key] = self._join_open_storm(root)
        return root

    def _roots_a_storm(self, root: RootCause) -> bool:
        return any(i.kind == "pfc_storm" and i.root == root for i in self._incidents.values())

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

    def _resolve(self, groups: dict[str, Group], now_ns: int) -> list[Anomaly]:
        """Resolve incidents quiet for ``resolve_after_s`` and over two of their polls, so that one
        missed or calm poll at 10 s polling does not split an incident in two. An incident on a
        device inside an active storm's pause tree waits for the storm to end, and one on a device
        gone silent waits for it to report again."""
        out = []
        kinds = self.registry.incidents
        frozen = {
            d
            for fp, i in self._incidents.items()
            if kinds[i.kind].freezes_traffic and fp in groups
            for d in i.devices
        }
        blind = {i.root.device for fp, i in self._incidents.items() if kinds[i.kind].blinds and fp in groups}
        for fp, incident in list(self._incidents.items()):
            if fp in groups:
                incident.interval_ns = groups[fp].interval_ns
                continue
            if not kinds[incident.kind].blinds and (incident.devices | {incident.root.device}) & blind:
                incident.quiet_since_ns = None  # nothing is known of its device: not over
                continue
            if not kinds[incident.kind].freezes_traffic and incident.devices & frozen:
                # Traffic through a storm's tree is frozen: its silence says nothing about this fault.
                incident.quiet_since_ns = None
                continue
            if incident.quiet_since_ns is None:
                incident.quiet_since_ns = now_ns
            # Two and a half polls: decided between polls, never racing the next poll's symptoms.
            wait_ns = max(self.config.resolve_after_s * NS, 5 * incident.interval_ns // 2)
            if now_ns - incident.quiet_since_ns >= wait_ns:
                why = self._why_ended(incident)
                if why is not None:
                    incident.summary += f"; ended for lack of data ({why}), not seen to recover"
                out.append(self._anomaly(incident, "resolved", now_ns, end_ns=incident.last_ns))
                if not kinds[incident.kind].finding:
                    self._released |= dict.fromkeys(incident.hosts, now_ns)
                del self._incidents[fp]
        return out

    def _why_ended(self, incident: Incident) -> str | None:
        """Why a detector ended the incident's symptoms for lack of data, if it did: at its root,
        or at another of its devices (a link's far end, rooted at the end that sends the damage).
        Every such note on its devices goes with it."""
        root = incident.root
        why = self._ended.pop((root.device, root.port, root.group), None)
        for key in [k for k in self._ended if k[0] in incident.devices]:
            why = why or self._ended[key]
            del self._ended[key]
        return why

    def _anomaly(self, incident: Incident, status: str, now_ns: int, end_ns: int | None = None) -> Anomaly:
        return Anomaly(
            fingerprint=incident.fingerprint,
            kind=incident.kind,
            severity=incident.severity,  # type: ignore[arg-type]
            status=status,  # type: ignore[arg-type]
            start_ns=incident.start_ns,
            ts_ns=now_ns,
            end_ns=end_ns,
            root=incident.root,
            summary=incident.summary,
            hint=incident.hint or self.registry.incidents[incident.kind].hint,
            devices=sorted(incident.devices),
            hosts=sorted(incident.hosts),
            jobs=list(incident.jobs),
            collectives=list(incident.collectives),
            evidence=dict(incident.evidence),
            caused_by=incident.caused_by,
            finding=self.registry.incidents[incident.kind].finding or incident.finding,
        )
