"""What ``fabric.topology`` carries: who is wired to whom, which ports hash together, where each
NIC is cabled and how each switch queue marks ECN."""

from __future__ import annotations

from typing import Literal

import msgspec

from fabricwatch.schemas.wire import SCHEMA_VERSION


class Device(msgspec.Struct, frozen=True, omit_defaults=True):
    id: str
    kind: Literal["host", "nic", "leaf", "spine"]
    pod: str = ""
    host: str = ""


class Link(msgspec.Struct, frozen=True, omit_defaults=True):
    a_device: str
    a_port: str
    b_device: str
    b_port: str
    speed_gbps: float = 400.0


class EcmpGroup(msgspec.Struct, frozen=True, omit_defaults=True):
    id: str
    device: str
    members: list[str]
    toward: str = ""


class NicAttachment(msgspec.Struct, frozen=True, omit_defaults=True):
    host: str
    nic: str
    nic_port: str
    leaf: str
    leaf_port: str


class QueueProfile(msgspec.Struct, frozen=True, omit_defaults=True):
    """A switch's ECN marking curve (WRED) for its queues: no marks below ``ecn_kmin_bytes`` of
    queue, a share rising linearly to ``ecn_pmax`` at ``ecn_kmax_bytes``. ``port`` empty: every port
    of ``device``; ``queue`` unset: every queue of those ports. The most specific one applies."""

    device: str
    ecn_kmin_bytes: float
    ecn_kmax_bytes: float
    ecn_pmax: float | None = None
    port: str = ""
    queue: int | None = None

    def __post_init__(self) -> None:
        check_ecn_curve(self.ecn_kmin_bytes, self.ecn_kmax_bytes, self.ecn_pmax)


def check_ecn_curve(kmin: float, kmax: float, pmax: float | None) -> None:
    """Raise ValueError unless the thresholds make a WRED marking curve."""
    if not 0 <= kmin < kmax:
        raise ValueError("need 0 <= ecn_kmin_bytes < ecn_kmax_bytes")
    if pmax is not None and not 0 < pmax <= 1:
        raise ValueError("ecn_pmax must be in (0, 1]")


class Topology(msgspec.Struct, tag="topology", tag_field="type", omit_defaults=True):
    """The fabric as the detectors need it: who is wired to whom, and which ports hash together.

    ``source`` says who reported it: empty for the whole fabric (a topology file), which replaces
    what came before; ``host:NAME`` for what one host saw of its own cabling (LLDP), which is
    merged into the whole (``detectors/topology.py``) and replaces only that host's earlier report.
    """

    ts_ns: int
    devices: list[Device]
    links: list[Link]
    ecmp_groups: list[EcmpGroup] = msgspec.field(default_factory=list)
    nics: list[NicAttachment] = msgspec.field(default_factory=list)
    queue_profiles: list[QueueProfile] = msgspec.field(default_factory=list)
    source: str = ""
    v: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        known = {d.id for d in self.devices}
        for i, profile in enumerate(self.queue_profiles):
            if profile.device not in known:
                raise ValueError(f"queue_profiles[{i}] names unknown device {profile.device!r}")
        for i, link in enumerate(self.links):
            for dev in (link.a_device, link.b_device):
                if dev not in known:
                    raise ValueError(f"links[{i}] names unknown device {dev!r}")
        for i, group in enumerate(self.ecmp_groups):
            if group.device not in known:
                raise ValueError(f"ecmp_groups[{i}] names unknown device {group.device!r}")
            if len(group.members) < 2:
                raise ValueError(f"ecmp_groups[{i}] has fewer than two members")
