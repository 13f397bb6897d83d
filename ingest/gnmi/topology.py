"""Switch-to-switch links from LLDP over gNMI, as gnmic or Telegraf deliver it: each device's
neighbour table (OpenConfig's ``/lldp/interfaces/interface/neighbors/neighbor/state``, or SR Linux's
``/system/lldp/interface/neighbor``: system-name, port-id and its type, port-description) and port
speeds (``/interfaces/interface/ethernet/state/port-speed``), kept per device and reported as
``lldp_fabric.switch_topology`` reports.

gNMI delivers a table one leaf at a time (a SAMPLE subscription the whole table every interval, an
ON_CHANGE one what changed, and a neighbour that left as a delete), so a half-delivered table must
not be reported: it would drop links the detectors rely on (a switch's report is authoritative for
its ports). A device's table is reported once it has been quiet for ``settle_s`` after a change
that changed its links, and again every ``resend_s`` so that a worker started later learns it.
Leaves are never expired: with ON_CHANGE, silence means no change.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from fabricwatch.ingest.gnmi.messages import PORT_SPEED, Point
from fabricwatch.ingest.gnmi.snapshots import port_and_queue
from fabricwatch.ingest.lldp.fabric import Neighbour, SiteSettings, neighbour, switch_topology
from fabricwatch.schemas.messages import Topology

_SPEED = re.compile(r"SPEED_(\d+)(GB|MB)$")
_NEIGHBOUR_KEYS = ("neighbor_id", "id")


@dataclass
class _Table:
    neighbours: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    """(local port, neighbour id) -> state leaf -> text."""
    speeds: dict[str, float] = field(default_factory=dict)
    lldp: bool = False
    """Any LLDP leaf seen: only then are this device's links known (even when there are none)."""
    changed_at: float | None = None
    sent: tuple | None = None
    sent_at: float = 0.0


@dataclass
class LldpStats:
    leaves: int = 0
    deletes: int = 0
    reports: int = 0
    without_port: int = 0


class LldpAssembler:
    """Feed text points with ``add``; ``due`` returns the reports to publish now."""

    def __init__(
        self,
        site: SiteSettings | None = None,
        settle_s: float = 2.0,
        resend_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        wall_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.site = site or SiteSettings()
        self.stats = LldpStats()
        self._settle_s = settle_s
        self._resend_s = resend_s
        self._clock = clock
        self._wall_ns = wall_ns
        self._tables: dict[str, _Table] = {}
        self.switches: set[str] = set()
        """Devices known to be switches: every device that sent telemetry (``seen``)."""

    def seen(self, devices: Iterable[str]) -> None:
        """Devices that stream telemetry are switches (hosts report their cabling themselves)."""
        self.switches.update(devices)

    def add(self, points: Iterable[Point]) -> None:
        now = self._clock()
        for p in points:
            self.switches.add(p.device)
            port = port_and_queue(p.keys)[0]
            table = self._tables.setdefault(p.device, _Table())
            if p.path == PORT_SPEED:
                gbps = _gbps(str(p.value))
                if port is not None and gbps is not None and table.speeds.get(port) != gbps:
                    table.speeds[port] = gbps
                    table.changed_at = now
                continue
            table.lldp = True
            self.stats.deletes += p.value == ""
            self.stats.leaves += p.value != ""
            if p.value == "":
                self._delete(table, p, port, now)
            elif port is None:
                self.stats.without_port += 1
            else:
                nid = next((p.keys[k] for k in _NEIGHBOUR_KEYS if k in p.keys), "")
                leaves = table.neighbours.setdefault((port, nid), {})
                leaf = p.path.rpartition("/")[2]
                if leaves.get(leaf) != p.value:
                    leaves[leaf] = str(p.value)
                    table.changed_at = now

    def due(self) -> list[Topology]:
        """Reports of the devices whose links changed and settled, or are due to be said again."""
        now = self._clock()
        out = []
        for name, table in self._tables.items():
            if not table.lldp:
                continue  # speeds alone: this device's links are not known, not absent
            if table.changed_at is not None:
                if now - table.changed_at < self._settle_s:
                    continue  # still being delivered
            elif now - table.sent_at < self._resend_s:
                continue
            table.changed_at = None
            report = switch_topology(
                name, self._neighbours(table), table.speeds, self.switches, self.site, self._wall_ns()
            )
            shape = (tuple(report.links), tuple(report.ecmp_groups), tuple(report.devices))
            if shape == table.sent and now - table.sent_at < self._resend_s:
                continue  # leaves changed, links did not
            table.sent, table.sent_at = shape, now
            self.stats.reports += 1
            out.append(report)
        return out

    def _delete(self, table: _Table, p: Point, port: str | None, now: float) -> None:
        """A delete anywhere under ``/lldp`` removes the neighbours it names: one (its port and
        id), a port's, or, without keys, the whole table."""
        nid = next((p.keys[k] for k in _NEIGHBOUR_KEYS if k in p.keys), None)
        gone = [k for k in table.neighbours if port in (None, k[0]) and nid in (None, k[1])]
        for key in gone:
            del table.neighbours[key]
        if gone:
            table.changed_at = now

    def _neighbours(self, table: _Table) -> list[Neighbour]:
        found = []
        for (port, _), leaves in sorted(table.neighbours.items()):
            kind = leaves.get("port-id-type", "").rpartition(":")[2].upper().replace("-", "_")
            n = neighbour(
                port,
                leaves.get("system-name") or leaves.get("chassis-id", ""),
                leaves.get("port-id", ""),
                kind == "INTERFACE_NAME",
                leaves.get("port-description", ""),
            )
            if n is not None:
                found.append(n)
        return found


def _gbps(speed: str) -> float | None:
    """``openconfig-if-ethernet:SPEED_400GB`` -> 400.0; ``SPEED_2500MB`` -> 2.5; else None."""
    m = _SPEED.search(speed.rpartition(":")[2])
    if m is None:
        return None
    return int(m.group(1)) / (1 if m.group(2) == "GB" else 1000)
