"""The fabric's switch-to-switch links from the switches' own LLDP neighbour tables, whichever way
they were read (SONiC's APPL_DB over Redis: ``sonic_topology.py``; OpenConfig ``/lldp`` over gNMI:
``gnmi_topology.py``), plus a small site description for what LLDP does not carry.

A switch's report is a ``Topology`` with ``source="switch:NAME"``: the switch, the switches it
sees, one link per port that faces one, and its ECMP groups (a leaf's ports toward the spines; a
spine's ports toward one leaf, when there are several), which the detectors merge into the
fabric's (``detectors/topology.py``). Neighbours that are not switches are hosts, which report
their own cabling (``ingest/lldp/lldpcli.py``). Which switches are spines and which pod a switch is in come
from the site description; speeds the switch does not expose, from its ``link_gbps``.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass

import msgspec

from fabricwatch.schemas.messages import Device, EcmpGroup, Link, QueueProfile, Topology, check_ecn_curve

_PORT_NAME = re.compile(r"^[A-Za-z][\w\-/.:]*\d$")


class SiteEcnProfile(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The ECN marking curve of the switches whose names match ``devices`` (shell-style)."""

    devices: str
    ecn_kmin_bytes: float
    ecn_kmax_bytes: float
    ecn_pmax: float | None = None
    queue: int | None = None

    def __post_init__(self) -> None:
        check_ecn_curve(self.ecn_kmin_bytes, self.ecn_kmax_bytes, self.ecn_pmax)


class SiteSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """What LLDP does not say: the ``site:`` part of the ``sonic:`` and ``gnmi:`` sections."""

    spines: list[str] = msgspec.field(default_factory=lambda: ["*spine*"])
    """Name patterns (shell-style) of the spine switches; every other switch is a leaf."""
    pods: dict[str, str] = msgspec.field(default_factory=dict)
    """Name pattern -> pod."""
    link_gbps: float = 400.0
    """A link's speed when the switch does not say (PORT_TABLE has no speed)."""
    ecn_profiles: list[SiteEcnProfile] = msgspec.field(default_factory=list)
    """Switches' WRED thresholds, for the incast detector's band; a switch's own per-queue
    profiles (SONiC's CONFIG_DB) are more specific and win where both are known."""


@dataclass(frozen=True)
class Neighbour:
    port: str
    switch: str
    switch_port: str


def neighbour(
    port: str, system_name: str, port_id: str, port_id_is_name: bool, port_desc: str
) -> Neighbour | None:
    """The switch port on the far side of ``port``. The port id is the far port's name when its
    subtype says so (interface name); otherwise (a locally assigned alias such as SONiC's
    ``Eth3(Port3)``, or a MAC) the description is, when it looks like a port name, as SONiC and
    EOS send it."""
    far = port_id if port_id_is_name or not _PORT_NAME.match(port_desc) else port_desc
    return Neighbour(port, system_name, far) if system_name and far else None


def switch_topology(
    name: str,
    neighbours: list[Neighbour],
    speeds: Mapping[str, float],
    switches: set[str],
    site: SiteSettings,
    ts_ns: int,
) -> Topology:
    """What one switch sees of the fabric. ``switches`` are the names known to be switches (the
    collector's list); a neighbour matching the spine patterns is one too."""
    facing = [n for n in neighbours if n.switch in switches or _role(n.switch, site) == "spine"]
    devices = {name: _device(name, site)}
    for n in facing:
        devices.setdefault(n.switch, _device(n.switch, site))
    links = [Link(name, n.port, n.switch, n.switch_port, speeds.get(n.port, site.link_gbps)) for n in facing]
    return Topology(
        ts_ns=ts_ns,
        devices=list(devices.values()),
        links=links,
        ecmp_groups=_groups(name, facing, devices),
        queue_profiles=[
            QueueProfile(name, p.ecn_kmin_bytes, p.ecn_kmax_bytes, p.ecn_pmax, queue=p.queue)
            for p in site.ecn_profiles
            if fnmatch.fnmatchcase(name, p.devices)
        ],
        source=f"switch:{name}",
    )


def _groups(name: str, facing: list[Neighbour], devices: Mapping[str, Device]) -> list[EcmpGroup]:
    """A leaf hashes over its uplinks to the spines; a spine over its links to one leaf."""
    if devices[name].kind == "leaf":
        members = [n.port for n in facing if devices[n.switch].kind == "spine"]
        return [EcmpGroup(f"{name}/uplinks", name, members, toward="spines")] if len(members) >= 2 else []
    by_leaf: dict[str, list[str]] = {}
    for n in facing:
        if devices[n.switch].kind == "leaf":
            by_leaf.setdefault(n.switch, []).append(n.port)
    return [
        EcmpGroup(f"{name}/{leaf}", name, ports, toward=leaf)
        for leaf, ports in by_leaf.items()
        if len(ports) >= 2
    ]


def _role(name: str, site: SiteSettings) -> str:
    return "spine" if any(fnmatch.fnmatchcase(name, p) for p in site.spines) else "leaf"


def _device(name: str, site: SiteSettings) -> Device:
    pod = next((pod for pattern, pod in site.pods.items() if fnmatch.fnmatchcase(name, pattern)), "")
    return Device(name, _role(name, site), pod=pod)  # type: ignore[arg-type]
