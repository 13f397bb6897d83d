"""Which leaf port each NIC of this host is cabled to, from LLDP (Debian's ``lldpd``).

``lldpcli -f json0 show neighbors`` prints every interface's neighbour as lists throughout
(``-f json`` folds a single interface or chassis into an object instead, so its shape depends on
how many there are). A switch sends its name as the chassis name and, on SONiC, Cumulus and EOS,
the port's interface name as its port id (subtype ``ifname`` or ``local``); when the port id is a
MAC address the interface name is in the port description.

The report is a ``Topology`` with ``source="host:NAME"``: the host's NICs, the leaves it sees and
one attachment per cabled NIC, which the detectors merge into the fabric's topology
(``detectors/topology.py``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from fabricwatch.ingest.tools import run_tool
from fabricwatch.schemas.messages import Device, NicAttachment, Topology

LLDPCLI_TIMEOUT_S = 5.0
_NAME_SUBTYPES = {"ifname", "local", "ifalias"}


@dataclass(frozen=True)
class Neighbour:
    interface: str
    """This host's interface the LLDP frame came in on."""
    switch: str
    """The neighbour's system name (its chassis id when it sends no name)."""
    port: str
    """The neighbour's port the cable goes to, as the switch names it."""


def run_lldpcli(socket_path: str | None = None) -> str:
    """``lldpcli -f json0 show neighbors``; raises RuntimeError with what to do when it fails."""
    argv = ["lldpcli", *(["-u", socket_path] if socket_path else []), "-f", "json0", "show", "neighbors"]
    not_installed = "lldpcli is not installed; install lldpd (apt install lldpd) for cabling from LLDP"
    return run_tool(argv, "lldpcli (is lldpd running?)", LLDPCLI_TIMEOUT_S, not_installed, RuntimeError)


def parse_neighbours(text: str) -> list[Neighbour]:
    """The neighbours in ``lldpcli -f json0 show neighbors`` output. An interface entry without a
    usable switch name or port is skipped (a host-to-host link, a half-learnt neighbour)."""
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(f"lldpcli output is not JSON: {exc}") from None
    found = []
    for lldp in _list(doc, "lldp"):
        for entry in _list(lldp, "interface"):
            neighbour = _neighbour(entry)
            if neighbour is not None:
                found.append(neighbour)
    return found


def _neighbour(entry: Mapping[str, Any]) -> Neighbour | None:
    interface = entry.get("name")
    chassis = next(iter(_list(entry, "chassis")), {})
    port = next(iter(_list(entry, "port")), {})
    switch = _value(chassis, "name") or _value(chassis, "id")
    port_id = next(iter(_list(port, "id")), {})
    name = port_id.get("value") if port_id.get("type") in _NAME_SUBTYPES else _value(port, "descr")
    if not isinstance(interface, str) or not switch or not name:
        return None
    return Neighbour(interface, switch, str(name))


def _list(obj: Any, key: str) -> list[Any]:
    value = obj.get(key) if isinstance(obj, Mapping) else None
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _value(obj: Mapping[str, Any], key: str) -> str:
    first = next(iter(_list(obj, key)), {})
    value = first.get("value")
    return value if isinstance(value, str) else ""


def host_topology(host: str, nics: Mapping[str, str], neighbours: list[Neighbour], ts_ns: int) -> Topology:
    """This host's report: ``nics`` maps each RDMA device (``mlx5_0``) to the interface it drives;
    a NIC whose interface has an LLDP neighbour is attached to that switch port."""
    by_interface = {n.interface: n for n in neighbours}
    devices: dict[str, Device] = {}
    attachments = []
    for ib_dev, interface in sorted(nics.items()):
        seen = by_interface.get(interface)
        if seen is None:
            continue
        nic = f"{host}/{ib_dev}"  # a RoCE NIC port is an RDMA device of its own, with port 1
        devices[nic] = Device(nic, "nic", host=host)
        devices.setdefault(seen.switch, Device(seen.switch, "leaf"))
        attachments.append(
            NicAttachment(host=host, nic=nic, nic_port="1", leaf=seen.switch, leaf_port=seen.port)
        )
    return Topology(
        ts_ns=ts_ns, devices=list(devices.values()), links=[], nics=attachments, source=f"host:{host}"
    )


class LldpWatch:
    """Reads LLDP every ``interval_s`` and hands out this host's report when it changed (and at
    least every ``refresh`` reads, so a worker that started later learns it too). A failing
    ``lldpcli`` is said once, and retried at each interval."""

    def __init__(
        self,
        host: str,
        nics: Mapping[str, str],
        interval_s: float,
        warn: Callable[[str], None],
        read: Callable[[], str] = run_lldpcli,
        refresh: int = 10,
    ) -> None:
        self._host, self._nics, self._interval_s = host, dict(nics), interval_s
        self._warn, self._read, self._refresh = warn, read, refresh
        self._next = 0.0
        self._last: list[NicAttachment] | None = None
        self._unchanged = 0
        self._failing = False

    def due(self, now: float) -> Topology | None:
        """The report to publish now, if any (``now`` on the monotonic clock)."""
        if now < self._next:
            return None
        self._next = now + self._interval_s
        try:
            report = host_topology(self._host, self._nics, parse_neighbours(self._read()), time.time_ns())
        except (RuntimeError, ValueError) as exc:
            if not self._failing:
                self._warn(
                    f"LLDP: {exc}; cabling not reported until it works (retried every {self._interval_s:g} s)"
                )
            self._failing = True
            return None
        if self._failing:
            self._warn("LLDP: read again")
        self._failing = False
        if report.nics == self._last and self._unchanged < self._refresh:
            self._unchanged += 1
            return None
        self._last, self._unchanged = report.nics, 0
        return report
