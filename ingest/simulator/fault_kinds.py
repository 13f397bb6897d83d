"""The fault kinds a scenario's ``faults`` list may hold (``docs/scenarios.md``): what each one
is, as the YAML says it. ``faults.py`` turns them into traffic, conditions and labels;
``scenario.py`` checks them against the fabric."""

from __future__ import annotations

from typing import Literal

import msgspec


class Strict(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """A scenario section: unknown keys are errors (a typo is not a default)."""


class Burst(Strict):
    duration: float
    period: float


HostSelection = int | list[str]


class _Fault(Strict, tag_field="kind"):
    start: float
    duration: float


class PfcStorm(_Fault, tag="pfc_storm"):
    root: str
    propagation_delay: float = 0.4


class SwitchStall(_Fault, tag="switch_stall"):
    """A leaf's egress queue toward ``toward`` (a host's first NIC) stops draining without being
    paused (a deadlock, a stuck egress): the leaf pauses the ports feeding it, and the pauses
    spread from there. The root is the leaf's port, not the NIC."""

    toward: str
    propagation_delay: float = 0.4


class Incast(_Fault, tag="incast"):
    receiver: str
    senders: HostSelection
    job: str = ""
    load: float = 0.6
    qps: int = 4
    op: Literal["Reduce", "AllToAll"] = "Reduce"


class EcmpCollapse(_Fault, tag="ecmp_collapse"):
    leaf: str
    job: str = ""
    hosts: HostSelection | None = None
    load: float = 0.4
    qps: int = 1
    members_used: int = 1


class BalancedAllReduce(_Fault, tag="balanced_allreduce"):
    hosts: HostSelection
    job: str = ""
    load: float = 0.8
    qps: int | None = None


class AbsorbedBurst(_Fault, tag="absorbed_burst"):
    receiver: str
    senders: HostSelection
    job: str = ""
    load: float = 0.3
    qps: int = 4
    burst: Burst = Burst(duration=0.05, period=2.0)


class Idle(_Fault, tag="idle"):
    leaf: str
    job: str = ""
    load: float = 0.01


class LossyLink(_Fault, tag="lossy_link"):
    device: str
    port: str = ""
    loss_rate: float = 1e-4
    one_way: bool = False
    """Only what ``device`` receives is damaged (the far end's optic fails: the label's root)."""


class DegradingLink(_Fault, tag="degrading_link"):
    """The link of ``device`` (``port`` on a switch) wears out: FEC corrects ``pre_fec_ber`` of its
    bits, still below the limit at which frames are lost."""

    device: str
    port: str = ""
    pre_fec_ber: float = 5e-5
    one_way: bool = False
    """Only what ``device`` receives (the far end's transmitter wears: the label's root)."""


class FailingOptic(_Fault, tag="failing_optic"):
    """The optic of ``device`` (``port`` on a switch) fails: its laser sends ``power_mw`` (past
    its low alarm) and draws more current to try; the far end receives a weak signal."""

    device: str
    port: str = ""
    power_mw: float = 0.05


class SpeedDownshift(_Fault, tag="speed_downshift"):
    """The link of ``device`` (``port`` on a switch) comes up at ``factor`` of its speed (a lane
    down, a bad negotiation): it carries that much less, and both ends say so."""

    device: str
    port: str = ""
    factor: float = 0.5


class ErrorBurst(_Fault, tag="error_burst"):
    """A burst of damaged frames at ``device``, over within a poll: a look-alike of a failing link."""

    device: str
    port: str = ""
    loss_rate: float = 1e-3


class HeadroomDrops(_Fault, tag="headroom_drops"):
    """Switch ``device``'s ``port`` drops ``drop_rate`` of what it receives on the lossless
    priority at ingress: its PFC headroom is too small for the cable (XOFF sent too late)."""

    device: str
    port: str
    drop_rate: float = 1e-4


class DropBurst(_Fault, tag="drop_burst"):
    """Lossless ingress drops at ``device`` ``port`` over within a poll: a look-alike of
    ``headroom_drops`` (one burst outran the headroom once)."""

    device: str
    port: str
    drop_rate: float = 1e-3


class LinkDown(_Fault, tag="link_down"):
    """The link of ``device`` (``port`` on a switch) goes down: for the whole fault (a dead link),
    or ``flaps`` times with ``up_s`` of link up between the spells (a flapping link). ``planned``:
    taken down on purpose at that end (``admin_down``), to be said as a finding, not paged."""

    device: str
    port: str = ""
    flaps: int = 1
    up_s: float = 2.0
    planned: bool = False


class NicRetransmit(_Fault, tag="nic_retransmit"):
    """NIC ``nic`` resends ``rate`` of what it sends, NAKed or timed out for reasons of its own
    (firmware, its PCIe link, memory registration): no link on its paths loses anything."""

    nic: str
    rate: float = 1e-4


class PcieCappedNic(_Fault, tag="pcie_capped_nic"):
    """NIC ``nic``'s host drains it at ``factor`` of line rate (a PCIe link trained down, a slot
    shared with another device, the wrong NUMA node): its PCIe transfers stall and it pauses its
    leaf in short spells while its link runs well below line rate."""

    nic: str
    factor: float = 0.4


class NicSlowdown(_Fault, tag="nic_slowdown"):
    nic: str
    factor: float = 0.5


class Straggler(_Fault, tag="straggler"):
    """``host`` enters each of its job's timed calls ``delay`` seconds late (a slow GPU, a host
    busy with something else): the other ranks wait for it. Nothing in the fabric changes."""

    host: str
    job: str
    delay: float = 0.05


class StepStretch(_Fault, tag="step_stretch"):
    """``job``'s steps take ``factor`` times as long (a slow GPU, a data loader): each of its
    bursty activities sends the same bursts, further apart. Its phases run on unchanged."""

    job: str
    factor: float = 1.3


class JobStop(_Fault, tag="job_stop"):
    """``job`` hangs: its activities send nothing, while its phases (what the scheduler and its
    logs say runs) stay open."""

    job: str


class DeviceSilent(_Fault, tag="device_silent"):
    """``device`` (a NIC or a switch) is not read: its collector died, or the device hangs. The
    fabric itself is unchanged; only what is known of it."""

    device: str


Fault = (
    PfcStorm
    | SwitchStall
    | Incast
    | EcmpCollapse
    | BalancedAllReduce
    | AbsorbedBurst
    | Idle
    | LossyLink
    | DegradingLink
    | FailingOptic
    | SpeedDownshift
    | ErrorBurst
    | HeadroomDrops
    | DropBurst
    | LinkDown
    | NicRetransmit
    | NicSlowdown
    | PcieCappedNic
    | DeviceSilent
    | Straggler
    | StepStretch
    | JobStop
)
