"""Injected faults and benign look-alikes: the traffic they add, the conditions they impose, their labels.

Traffic faults (incast, ECMP collapse, the benign look-alikes) are ordinary activities with a
particular shape; condition faults (a stalled NIC, a lossy link, a slow NIC) change how the fabric
carries traffic and are handed to the congestion model as ``Condition`` objects whose ``stage`` at a
time is part of the cached fabric state. Every fault that starts within the run yields one Label.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import msgspec
import numpy as np

from fabricwatch.ingest.simulator import fault_kinds
from fabricwatch.ingest.simulator.fabric import NIC_PORT, Fabric
from fabricwatch.ingest.simulator.scenario import Scenario
from fabricwatch.ingest.simulator.traffic import (
    NS,
    ActivityRun,
    build_flows,
    host_pairs,
    make_activity,
    select_hosts,
)
from fabricwatch.schemas.messages import Cause, Label, RootCause

LOSSLESS_PRIORITY = 3
STORM_HOPS = 4  # enough to cross a two-tier fabric: leaf, spine, far leaf, far NICs
STALLS = ("stall", "switch_stall")


@dataclass(frozen=True)
class Condition:
    """A fault that changes the fabric itself between ``start`` and ``end`` (seconds).

    ``kind`` is ``stall`` (NIC ``nic`` stops draining and pauses its leaf), ``switch_stall`` (the
    switch egress feeding directed link ``links[0]`` stops draining, unpaused), ``loss`` (directed
    links ``links`` damage ``amount`` of their packets), ``drop`` (their receiving switch drops
    ``amount`` at ingress, on the lossless priority), ``down`` (directed links ``links`` carry
    nothing; ``amount`` 1: taken down on purpose at the end whose outward link is ``links[0]``) or
    ``slow`` (NIC ``nic`` runs at ``amount`` of its line rate). A stall spreads one hop per
    ``step`` seconds, so its stage is the hop count reached.
    """

    kind: str
    start: float
    end: float
    nic: int = -1
    links: tuple[int, ...] = ()
    amount: float = 0.0
    step: float = 0.0

    def stage_at(self, t: float) -> int | None:
        if not self.start <= t < self.end:
            return None
        if self.kind not in STALLS:
            return 0
        return min(int((t - self.start) / self.step), STORM_HOPS)

    def edges(self) -> list[float]:
        hops = [self.start + h * self.step for h in range(1, STORM_HOPS + 1)] if self.kind in STALLS else []
        return [self.start, self.end, *(t for t in hops if t < self.end)]


@dataclass(frozen=True)
class Impulse:
    """A one-off counter increment (a firmware event, a carrier change), at ``t`` seconds on the
    port ``port`` (a global port id: a NIC's is its index)."""

    t: float
    port: int
    counter: str
    amount: int = 1


@dataclass
class FaultPlan:
    activities: list[ActivityRun] = field(default_factory=list)
    conditions: list[Condition] = field(default_factory=list)
    labels: list[Label] = field(default_factory=list)
    impulses: list[Impulse] = field(default_factory=list)
    silences: list[tuple[str, float, float]] = field(default_factory=list)
    """(device, start, end): devices not read between those seconds."""


def plan_faults(sc: Scenario, fabric: Fabric, jobs: list[ActivityRun]) -> FaultPlan:
    """Turn the scenario's ``faults`` into activities, conditions and labels; ``jobs`` names victims."""
    plan = FaultPlan()
    context = _Context(sc, fabric, plan, jobs)
    for i, fault in enumerate(sc.faults):
        if fault.start >= sc.duration:
            continue  # a run cut short (duration override) never reaches this fault
        end = min(fault.start + fault.duration, sc.duration)
        job = getattr(fault, "job", "") or f"{fault.__struct_config__.tag}-{i}"
        label = _ADDERS[type(fault)](context, fault, i, job, end)
        plan.labels += [label, *_job_effects(context, fault, label)]
    return plan


def _job_effects(c: _Context, fault: fault_kinds.Fault, cause: Label) -> list[Label]:
    """What the fault does to the timed calls (``calls.py``) of the jobs it touches, each labelled
    as its effect: a NIC or a switch egress that stops draining stops every ring through it (a
    hang: the suite's storms outlast the hang bound), an incast into a job's host slows the
    job's flows into it, a straggler slows its own job. Jobs without timed calls have nothing to
    show; other faults' effects on calls are not labelled (no scenario times calls beside them)."""
    if isinstance(fault, fault_kinds.StepStretch):
        return _stretched_steps(c, fault, cause)
    if isinstance(fault, fault_kinds.PfcStorm):
        nic = c.fabric.nic_index(fault.root)
        kind, hosts, only = "job_hang", {c.fabric.hosts[int(c.fabric.nic_host[nic])]}, ""
    elif isinstance(fault, fault_kinds.SwitchStall):
        kind, hosts, only = "job_hang", {fault.toward}, ""
    elif isinstance(fault, fault_kinds.Incast):
        kind, hosts, only = "job_slowdown", {fault.receiver}, ""
    elif isinstance(fault, fault_kinds.Straggler):
        kind, hosts, only = "job_slowdown", {fault.host}, fault.job
    else:
        return []
    start_s, end_s = (cause.start_ns - c.sc.start_ns) / NS, (cause.end_ns - c.sc.start_ns) / NS
    spans: dict[str, tuple[float, float]] = {}
    for a in c.jobs:
        if not (a.calls and a.phase and hosts & set(a.phase.hosts) and _overlaps(a, start_s, end_s)):
            continue
        if only and a.job != only:
            continue
        first, last = spans.get(a.job, (end_s, start_s))
        spans[a.job] = (
            min(first, max(start_s, float(a.starts[0]))),
            max(last, min(end_s, float(a.ends[-1]))),
        )
    what = "stop" if kind == "job_hang" else "slow down"
    return [
        msgspec.structs.replace(
            _label(
                c.sc, kind, first, last, RootCause(job, group=f"job:{job}"), [job], f"{job}'s calls {what}"
            ),
            cause=Cause(cause.kind, cause.root),
        )
        for job, (first, last) in sorted(spans.items())
    ]


def _stretched_steps(c: _Context, f: fault_kinds.StepStretch, cause: Label) -> list[Label]:
    """A job whose records mark its steps (``steps.py``) shows the stretch there too: its
    slowdown, as its own step times say it (``job_slowdown``, rooted at the job)."""
    if not any(a.steps and a.job == f.job for a in c.jobs):
        return []
    root = RootCause(f.job, group=f"job:{f.job}")
    start_s, end_s = (cause.start_ns - c.sc.start_ns) / NS, (cause.end_ns - c.sc.start_ns) / NS
    note = f"{f.job}'s steps take {f.factor:g} times as long, as its records mark them"
    return [_label(c.sc, "job_slowdown", start_s, end_s, root, [f.job], note)]


@dataclass(frozen=True)
class _Context:
    sc: Scenario
    fabric: Fabric
    plan: FaultPlan
    jobs: list[ActivityRun]


SATURATED = 0.9
"""Utilisation from which a polarised uplink is saturated: its flows are held back."""


def _label(
    sc: Scenario, kind: str, start: float, end: float, root: RootCause, jobs: list[str], note: str
) -> Label:
    t0 = sc.start_ns
    return Label(kind, t0 + round(start * NS), t0 + round(end * NS), root, jobs=jobs, note=note)


def _leaf_port_root(fabric: Fabric, host: str) -> RootCause:
    nic = fabric.host_nics(host)[0]
    return RootCause(
        fabric.leaves[int(fabric.nic_leaf[nic])], fabric.leaf_port_of_nic(nic), LOSSLESS_PRIORITY
    )


def _group_root(fabric: Fabric, leaf: int) -> RootCause:
    name = fabric.leaves[leaf]
    return RootCause(name, group=f"{name}/uplinks")


def _add_storm(c: _Context, f: fault_kinds.PfcStorm, i: int, job: str, end: float) -> Label:
    sc, fabric, plan = c.sc, c.fabric, c.plan
    nic = fabric.nic_index(f.root)
    host = fabric.hosts[int(fabric.nic_host[nic])]
    plan.conditions.append(Condition("stall", f.start, end, nic=nic, step=f.propagation_delay))
    plan.impulses.append(Impulse(f.start, nic, "pause_storm_warning_events"))
    victims = sorted(
        {a.job for a in c.jobs if a.phase and host in a.phase.hosts and _overlaps(a, f.start, end)}
    )
    root = RootCause(fabric.nics[nic], NIC_PORT, LOSSLESS_PRIORITY)
    note = f"{fabric.nics[nic]} stops draining priority {LOSSLESS_PRIORITY}; pauses spread one hop per "
    return _label(sc, "pfc_storm", f.start, end, root, victims, note + f"{f.propagation_delay}s")


def _overlaps(a: ActivityRun, start: float, end: float) -> bool:
    return bool(len(a.starts)) and a.starts[0] < end and a.ends[-1] > start


def _add_incast(c: _Context, f: fault_kinds.Incast, i: int, job: str, end: float) -> Label:
    sc, fabric, plan = c.sc, c.fabric, c.plan
    senders = select_hosts(fabric, f.senders, "spread", _next_host(fabric, f.receiver), (f.receiver,))
    hosts = [*senders, f.receiver]
    flows = build_flows(fabric, host_pairs("Reduce", hosts, f.receiver), f.load, f.qps)
    root_host = f.receiver if f.op == "Reduce" else None
    plan.activities.append(
        make_activity(sc, job, f"fault{i}", f.op, hosts, flows, f.start, end, root=root_host)
    )
    note = f"{len(senders)} senders x {f.load:.0%} of line rate into {f.receiver}"
    return _label(sc, "incast", f.start, end, _leaf_port_root(fabric, f.receiver), [job], note)


def _add_switch_stall(c: _Context, f: fault_kinds.SwitchStall, i: int, job: str, end: float) -> Label:
    sc, fabric, plan = c.sc, c.fabric, c.plan
    nic = fabric.host_nics(f.toward)[0]
    link = int(fabric.nic_down[nic])
    plan.conditions.append(Condition("switch_stall", f.start, end, links=(link,), step=f.propagation_delay))
    root = _leaf_port_root(fabric, f.toward)
    victims = sorted(
        {a.job for a in c.jobs if a.phase and f.toward in a.phase.hosts and _overlaps(a, f.start, end)}
    )
    note = (
        f"{root.device} {root.port} stops draining priority {LOSSLESS_PRIORITY} toward {f.toward}, unpaused; "
        f"{root.device} pauses its feeders and pauses spread one hop per {f.propagation_delay}s"
    )
    return _label(sc, "pfc_storm", f.start, end, root, victims, note)


def _add_burst(c: _Context, f: fault_kinds.AbsorbedBurst, i: int, job: str, end: float) -> Label:
    sc, fabric, plan = c.sc, c.fabric, c.plan
    senders = select_hosts(fabric, f.senders, "spread", _next_host(fabric, f.receiver), (f.receiver,))
    hosts = [*senders, f.receiver]
    flows = build_flows(fabric, host_pairs("Reduce", hosts, f.receiver), f.load, f.qps)
    burst = (f.burst.duration, f.burst.period)
    plan.activities.append(make_activity(sc, job, f"fault{i}", "AllToAll", hosts, flows, f.start, end, burst))
    note = (
        f"absorbed_burst: skewed All-to-All bursts of {f.burst.duration}s every {f.burst.period}s into "
        f"{f.receiver}; buffers absorb them below the PFC threshold"
    )
    return _label(sc, "benign", f.start, end, _leaf_port_root(fabric, f.receiver), [job], note)


def _add_collapse(c: _Context, f: fault_kinds.EcmpCollapse, i: int, job: str, end: float) -> Label:
    sc, fabric, plan = c.sc, c.fabric, c.plan
    leaf = fabric.leaves.index(f.leaf)
    per_leaf = fabric.spec.hosts_per_leaf
    local = fabric.hosts[leaf * per_leaf : (leaf + 1) * per_leaf]
    senders = f.hosts if isinstance(f.hosts, list) else local[: f.hosts or per_leaf]
    peers = [_peer(fabric, s, n) for n, s in enumerate(senders)]
    allowed = np.stack([fabric.polarised_members(li, f.members_used) for li in range(fabric.spec.leaves)])
    pairs = [(s, p, 1.0) for s, p in zip(senders, peers, strict=True)]
    flows = build_flows(fabric, pairs, f.load, f.qps, allowed)
    hosts = [*senders, *peers]
    plan.activities.append(make_activity(sc, job, f"fault{i}", "SendRecv", hosts, flows, f.start, end))
    hot = len(senders) * fabric.spec.nics_per_host * f.load / f.members_used  # links run at one speed
    note = (
        f"{len(senders)} long flows, {f.qps} QP each, polarised onto {f.members_used} uplink(s) "
        f"at {min(hot, 1.0):.0%} of their line rate"
    )
    label = _label(sc, "ecmp_collapse", f.start, end, _group_root(fabric, leaf), [job], note)
    return msgspec.structs.replace(label, severity="critical" if hot >= SATURATED else "warning")


def _peer(fabric: Fabric, host: str, n: int) -> str:
    """A partner on another leaf, rotating over the other leaves so the far side is spread."""
    per_leaf, n_leaves = fabric.spec.hosts_per_leaf, fabric.spec.leaves
    h = fabric.hosts.index(host)
    leaf = (h // per_leaf + 1 + n % (n_leaves - 1)) % n_leaves
    return fabric.hosts[leaf * per_leaf + h % per_leaf]


def _add_balanced(c: _Context, f: fault_kinds.BalancedAllReduce, i: int, job: str, end: float) -> Label:
    sc, fabric, plan = c.sc, c.fabric, c.plan
    hosts = select_hosts(fabric, f.hosts, "spread")
    qps = f.qps or fabric.group_size
    flows = build_flows(fabric, host_pairs("AllReduce", hosts), f.load, qps)
    plan.activities.append(make_activity(sc, job, f"fault{i}", "AllReduce", hosts, flows, f.start, end))
    note = f"balanced_allreduce: ring AllReduce at {f.load:.0%} of line rate, {qps} QPs per connection"
    return _label(sc, "benign", f.start, end, _group_root(fabric, fabric.leaf_of_host(hosts[0])), [job], note)


def _add_idle(c: _Context, f: fault_kinds.Idle, i: int, job: str, end: float) -> Label:
    sc, fabric, plan = c.sc, c.fabric, c.plan
    leaf = fabric.leaves.index(f.leaf)
    per_leaf = fabric.spec.hosts_per_leaf
    senders = fabric.hosts[leaf * per_leaf : (leaf + 1) * per_leaf]
    pairs = [(s, _peer(fabric, s, n), 1.0) for n, s in enumerate(senders)] if fabric.spec.leaves > 1 else []
    flows = build_flows(fabric, pairs, f.load, 1)
    plan.activities.append(make_activity(sc, job, f"fault{i}", "idle", senders, flows, f.start, end))
    note = f"idle: {f.leaf} carries only a {f.load:.0%} trickle on single-QP flows (uneven but negligible)"
    return _label(sc, "benign", f.start, end, _group_root(fabric, leaf), [job], note)


def _add_lossy(c: _Context, f: fault_kinds.LossyLink, i: int, job: str, end: float) -> Label:
    port, root = _link_end(c.fabric, f.device, f.port)
    inward, outward = int(c.fabric.port_in[port]), int(c.fabric.port_out[port])
    links = (inward,) if f.one_way else (outward, inward)
    c.plan.conditions.append(Condition("loss", f.start, end, links=links, amount=f.loss_rate))
    if f.one_way:
        far = RootCause(*c.fabric.port_label(int(c.fabric.link_tx[inward])))
        note = f"lossy_link: {f.loss_rate:g} of what {root.device} receives is damaged (far end's optic)"
        return _label(c.sc, "link_corruption", f.start, end, far, [], note)
    note = f"lossy_link: {f.loss_rate:g} of packets lost in both directions"
    return _label(c.sc, "link_corruption", f.start, end, root, [], note)


def _add_degrading(c: _Context, f: fault_kinds.DegradingLink, i: int, job: str, end: float) -> Label:
    port, root = _link_end(c.fabric, f.device, f.port)
    inward, outward = int(c.fabric.port_in[port]), int(c.fabric.port_out[port])
    links = (inward,) if f.one_way else (outward, inward)
    c.plan.conditions.append(Condition("degrade", f.start, end, links=links, amount=f.pre_fec_ber))
    note = f"degrading_link: pre-FEC bit error rate {f.pre_fec_ber:g}, no frame lost"
    if f.one_way:
        root = RootCause(*c.fabric.port_label(int(c.fabric.link_tx[inward])))
        note += f" (what {f.device} receives: the far end's transmitter)"
    return _label(c.sc, "link_degrading", f.start, end, root, [], note)


def _add_failing_optic(c: _Context, f: fault_kinds.FailingOptic, i: int, job: str, end: float) -> Label:
    port, root = _link_end(c.fabric, f.device, f.port)
    outward = int(c.fabric.port_out[port])
    c.plan.conditions.append(Condition("optic", f.start, end, links=(outward,), amount=f.power_mw))
    note = (
        f"failing_optic: its laser sends {f.power_mw:g} mW at a climbing bias; the far end receives it weak"
    )
    return _label(c.sc, "optics_out_of_range", f.start, end, root, [], note)


def _add_downshift(c: _Context, f: fault_kinds.SpeedDownshift, i: int, job: str, end: float) -> Label:
    port, root = _link_end(c.fabric, f.device, f.port)
    far = int(c.fabric.link_tx[int(c.fabric.port_in[port])])
    links = (int(c.fabric.port_in[port]), int(c.fabric.port_out[port]))
    c.plan.conditions.append(Condition("downshift", f.start, end, links=links, amount=f.factor))
    ends = [root, RootCause(*c.fabric.port_label(far))]
    root = sorted(ends, key=lambda r: (r.device not in c.fabric.nics, r.device, r.port))[0]
    note = f"speed_downshift: the link runs at {f.factor:.0%} of its speed"
    return _label(c.sc, "slow_link", f.start, end, root, [], note)


def _add_burst_of_errors(c: _Context, f: fault_kinds.ErrorBurst, i: int, job: str, end: float) -> Label:
    port, root = _link_end(c.fabric, f.device, f.port)
    links = (int(c.fabric.port_in[port]),)
    c.plan.conditions.append(Condition("loss", f.start, end, links=links, amount=f.loss_rate))
    note = f"error_burst: {f.loss_rate:g} of packets damaged for {f.duration:g} s, once"
    return _label(c.sc, "benign", f.start, end, root, [], note)


def _add_drops(
    c: _Context, f: fault_kinds.HeadroomDrops | fault_kinds.DropBurst, i: int, job: str, end: float
) -> Label:
    port, root = _link_end(c.fabric, f.device, f.port)
    links = (int(c.fabric.port_in[port]),)
    c.plan.conditions.append(Condition("drop", f.start, end, links=links, amount=f.drop_rate))
    if isinstance(f, fault_kinds.DropBurst):
        note = f"drop_burst: {f.drop_rate:g} of what {root.device} {root.port} receives dropped once"
        return _label(c.sc, "benign", f.start, end, root, [], note)
    note = f"headroom_drops: {f.drop_rate:g} of the lossless priority dropped at ingress (headroom too small)"
    return _label(c.sc, "packet_loss", f.start, end, root, [], note)


def _link_end(fabric: Fabric, device: str, port: str) -> tuple[int, RootCause]:
    """A fault's link end: its port index in the fabric and its root."""
    if device in fabric.switches:
        return fabric.switch_port_id(device, port), RootCause(device, port)
    index = fabric.nic_index(device)
    return index, RootCause(fabric.nics[index], NIC_PORT)


def _add_slowdown(c: _Context, f: fault_kinds.NicSlowdown, i: int, job: str, end: float) -> Label:
    sc, fabric, plan = c.sc, c.fabric, c.plan
    nic = fabric.nic_index(f.nic)
    plan.conditions.append(Condition("slow", f.start, end, nic=nic, amount=f.factor))
    note = f"nic_slowdown: bandwidth silently drops to {f.factor:.0%} of line rate"
    return _label(sc, "outlier", f.start, end, RootCause(fabric.nics[nic], NIC_PORT), [], note)


def _add_pcie_capped(c: _Context, f: fault_kinds.PcieCappedNic, i: int, job: str, end: float) -> Label:
    nic = c.fabric.nic_index(f.nic)
    c.plan.conditions.append(Condition("pcie", f.start, end, nic=nic, amount=f.factor))
    note = f"pcie_capped_nic: its host drains it at {f.factor:.0%} of line rate (PCIe stalls, short pauses)"
    return _label(c.sc, "nic_host_bound", f.start, end, RootCause(c.fabric.nics[nic], NIC_PORT), [], note)


def _add_retransmit(c: _Context, f: fault_kinds.NicRetransmit, i: int, job: str, end: float) -> Label:
    nic = c.fabric.nic_index(f.nic)
    c.plan.conditions.append(Condition("retransmit", f.start, end, nic=nic, amount=f.rate))
    note = f"nic_retransmit: {f.rate:g} of what it sends resent, host side (no lossy link)"
    return _label(
        c.sc, "rdma_retransmission", f.start, end, RootCause(c.fabric.nics[nic], NIC_PORT), [], note
    )


def _add_silent(c: _Context, f: fault_kinds.DeviceSilent, i: int, job: str, end: float) -> Label:
    if f.device not in c.fabric.switches and f.device not in c.fabric.nics:
        raise ValueError(f"device_silent: no device {f.device!r} in the fabric")
    c.plan.silences.append((f.device, f.start, end))
    return _label(c.sc, "device_silent", f.start, end, RootCause(f.device), [], "device_silent: not read")


def _add_link_down(c: _Context, f: fault_kinds.LinkDown, i: int, job: str, end: float) -> Label:
    """The link goes down ``flaps`` times, ``up_s`` apart, the spells sharing the fault's time;
    each carrier change counted at both ends (down: ``link_downed`` too), traffic across it
    stopped while down (a host's flows stall; the simulator does not re-hash ECMP)."""
    port, _ = _link_end(c.fabric, f.device, f.port)
    inward, outward = int(c.fabric.port_in[port]), int(c.fabric.port_out[port])
    far = int(c.fabric.link_tx[inward])
    spell = (end - f.start - (f.flaps - 1) * f.up_s) / f.flaps
    if spell <= 0:
        raise ValueError(f"link_down: {f.flaps} flaps {f.up_s} s apart do not fit in {f.duration} s")
    for k in range(f.flaps):
        down = f.start + k * (spell + f.up_s)
        planned = 1.0 if f.planned else 0.0  # admin down at the end whose outward link is first
        c.plan.conditions.append(
            Condition("down", down, down + spell, links=(outward, inward), amount=planned)
        )
        for end_port in (port, far):
            c.plan.impulses.append(Impulse(down, end_port, "carrier_changes"))
            c.plan.impulses.append(Impulse(down, end_port, "link_downed"))
            if down + spell < c.sc.duration:
                c.plan.impulses.append(Impulse(down + spell, end_port, "carrier_changes"))
    ends = [RootCause(*c.fabric.port_label(p)) for p in (port, far)]
    root = sorted(ends, key=lambda r: (r.device not in c.fabric.nics, r.device, r.port))[0]
    what = "down" if f.flaps == 1 else f"flapping ({f.flaps} times down, {spell:g} s each)"
    what += " on purpose (admin down there)" if f.planned else ""
    return _label(
        c.sc, "link_down", f.start, end, root, [], f"link_down: {ends[0].device} {ends[0].port} {what}"
    )


def _next_host(fabric: Fabric, host: str) -> int:
    return (fabric.hosts.index(host) + 1) % len(fabric.hosts)


def _add_straggler(c: _Context, f: fault_kinds.Straggler, i: int, job: str, end: float) -> Label:
    note = f"{f.host} enters each of {job}'s calls {f.delay * 1000:g} ms late"
    return _label(c.sc, "job_straggler", f.start, end, RootCause(f.host), [job], note)


def _add_step_stretch(c: _Context, f: fault_kinds.StepStretch, i: int, job: str, end: float) -> Label:
    _retime(c, job, lambda a: _stretched(a, f.start, end, f.factor))
    note = f"{job}'s steps take {f.factor:g} times as long"
    return _label(c.sc, "rhythm", f.start, end, RootCause(job, group=f"job:{job}"), [job], note)


def _add_job_stop(c: _Context, f: fault_kinds.JobStop, i: int, job: str, end: float) -> Label:
    def stopped(a: ActivityRun) -> tuple[np.ndarray, np.ndarray]:
        keep = (a.starts < f.start) | (a.starts >= end)
        starts, ends = a.starts[keep], a.ends[keep]
        return starts, np.where(starts < f.start, np.minimum(ends, f.start), ends)

    _retime(c, job, stopped)
    note = f"{job} hangs: its traffic stops, its phases stay open"
    return _label(c.sc, "rhythm", f.start, end, RootCause(job, group=f"job:{job}"), [job], note)


def _retime(c: _Context, job: str, windows: Callable[[ActivityRun], tuple[np.ndarray, np.ndarray]]) -> None:
    """Replace the on-windows of ``job``'s bursty activities (their phases unchanged: the job
    still runs, as far as its scheduler and logs say)."""
    for k, a in enumerate(c.jobs):
        if a.job == job and len(a.starts) > 1:
            starts, ends = windows(a)
            c.jobs[k] = replace(a, starts=starts, ends=ends)


def _stretched(a: ActivityRun, start: float, end: float, factor: float) -> tuple[np.ndarray, np.ndarray]:
    """The activity's bursts from ``start`` to ``end`` ``factor`` times as far apart, then at their
    own period again until the activity's end."""
    period, on, last = float(a.starts[1] - a.starts[0]), float(a.ends[0] - a.starts[0]), float(a.ends[-1])
    before = a.starts[a.starts < start]
    t = float(a.starts[a.starts >= start][0]) if (a.starts >= start).any() else last
    slow = np.arange(t, min(end, last), period * factor)
    resume = slow[-1] + period * factor if len(slow) else t
    starts = np.concatenate([before, slow, np.arange(resume, last, period)])
    return starts, np.minimum(starts + on, last)


_ADDERS = {
    fault_kinds.PfcStorm: _add_storm,
    fault_kinds.SwitchStall: _add_switch_stall,
    fault_kinds.Incast: _add_incast,
    fault_kinds.AbsorbedBurst: _add_burst,
    fault_kinds.EcmpCollapse: _add_collapse,
    fault_kinds.BalancedAllReduce: _add_balanced,
    fault_kinds.Idle: _add_idle,
    fault_kinds.LossyLink: _add_lossy,
    fault_kinds.DegradingLink: _add_degrading,
    fault_kinds.SpeedDownshift: _add_downshift,
    fault_kinds.FailingOptic: _add_failing_optic,
    fault_kinds.ErrorBurst: _add_burst_of_errors,
    fault_kinds.HeadroomDrops: _add_drops,
    fault_kinds.DropBurst: _add_drops,
    fault_kinds.NicRetransmit: _add_retransmit,
    fault_kinds.NicSlowdown: _add_slowdown,
    fault_kinds.PcieCappedNic: _add_pcie_capped,
    fault_kinds.DeviceSilent: _add_silent,
    fault_kinds.LinkDown: _add_link_down,
    fault_kinds.Straggler: _add_straggler,
    fault_kinds.StepStretch: _add_step_stretch,
    fault_kinds.JobStop: _add_job_stop,
}
