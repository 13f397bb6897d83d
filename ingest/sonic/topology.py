"""The fabric's topology from SONiC switches: the LLDP neighbour table, read over the same Redis as
the counters, turned into a switch's report by ``lldp_fabric.switch_topology``.

lldp_syncd keeps each port's neighbour in APPL_DB (database 0) as ``LLDP_ENTRY_TABLE:<port>``
(``lldp_rem_sys_name``, ``lldp_rem_port_id`` and its subtype, ``lldp_rem_port_desc``, ...), and
portsyncd each port's speed in Mb/s as ``PORT_TABLE:<port>`` ``speed``. A SONiC neighbour sends its
port alias as a locally assigned port id (subtype 7, ``Eth3(Port3)``) and its port name as the
description (``Ethernet8``); a subtype 5 port id is the name itself. The report carries the switch's
ECN marking curves from CONFIG_DB (``sonic_qos.py``) for the incast detector's band.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

import msgspec
import redis

from fabricwatch.ingest.lldp.fabric import Neighbour, SiteSettings, neighbour, switch_topology
from fabricwatch.ingest.sonic.qos import read_queue_profiles
from fabricwatch.ingest.sonic.switch import APPL_DB, CONFIG_DB, decoded, with_db
from fabricwatch.schemas.messages import QueueProfile, Topology

_IFNAME_SUBTYPE = "5"


def read_neighbours(appl_db: redis.Redis) -> tuple[list[Neighbour], dict[str, float]]:
    """Every port's LLDP neighbour and every port's speed in Gb/s, in two round trips."""
    keys = [k for k in appl_db.scan_iter(match="LLDP_ENTRY_TABLE:*", count=1000)]
    ports = sorted(decoded(k).partition(":")[2] for k in keys)
    pipe = appl_db.pipeline(transaction=False)
    for port in ports:
        pipe.hgetall(f"LLDP_ENTRY_TABLE:{port}")
    for port in ports:
        pipe.hget(f"PORT_TABLE:{port}", "speed")
    replies = pipe.execute()
    entries, speeds = replies[: len(ports)], replies[len(ports) :]
    neighbours = []
    for port, entry in zip(ports, entries, strict=True):
        found = _neighbour(port, {decoded(k): decoded(v) for k, v in entry.items()})
        if found is not None:
            neighbours.append(found)
    gbps = {
        p: int(decoded(s)) / 1000 for p, s in zip(ports, speeds, strict=True) if s and decoded(s).isdigit()
    }
    return neighbours, gbps


def _neighbour(port: str, entry: Mapping[str, str]) -> Neighbour | None:
    return neighbour(
        port,
        entry.get("lldp_rem_sys_name") or entry.get("lldp_rem_chassis_id", ""),
        entry.get("lldp_rem_port_id", ""),
        entry.get("lldp_rem_port_id_subtype") == _IFNAME_SUBTYPE,
        entry.get("lldp_rem_port_desc", ""),
    )


class TopologyWatch:
    """Each switch's LLDP view, read every ``interval_s`` in the background (a dead switch holds up
    nothing); ``due`` returns the reports that changed since the last one sent."""

    def __init__(
        self,
        switches: Mapping[str, str],
        site: SiteSettings,
        interval_s: float,
        timeout_s: float,
        warn: Callable[[str], None],
    ) -> None:
        self._switches = dict(switches)
        self._site = site
        self._interval_s = interval_s
        self._timeout_s = timeout_s
        self._warn = warn
        self._pool = ThreadPoolExecutor(max_workers=min(8, len(switches)), thread_name_prefix="lldp")
        self._pending: dict[str, Future] = {}
        self._sent: dict[str, tuple] = {}
        self._failing: set[str] = set()
        self._said: set[str] = set()
        self._next = 0.0
        self.failures = 0

    def due(self) -> list[Topology]:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self._interval_s
            for name, url in self._switches.items():
                if name not in self._pending:
                    self._pending[name] = self._pool.submit(self._read, name, url)
        reports = []
        for name, future in list(self._pending.items()):
            if future.done():
                del self._pending[name]
                report = self._outcome(name, future)
                if report is not None:
                    reports.append(report)
        return reports

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _read(self, name: str, url: str) -> Topology:
        client = self._client(url, APPL_DB)
        try:
            neighbours, speeds = read_neighbours(client)
        finally:
            client.close()
        report = switch_topology(name, neighbours, speeds, set(self._switches), self._site, time.time_ns())
        return msgspec.structs.replace(
            report, queue_profiles=report.queue_profiles + self._profiles(name, url)
        )

    def _profiles(self, name: str, url: str) -> list[QueueProfile]:
        """The switch's marking curves; none (the configured band applies) when CONFIG_DB cannot be
        read, which is said once and does not hold up its links."""
        client = self._client(url, CONFIG_DB)
        try:
            profiles = read_queue_profiles(client, name, self._warn_once)
        except (redis.RedisError, OSError) as exc:
            self._warn_once(f"{name}: CONFIG_DB unreadable ({exc}); its ECN profile is not reported")
            return []
        finally:
            client.close()
        return profiles

    def _client(self, url: str, db: int) -> redis.Redis:
        return redis.Redis.from_url(
            with_db(url, db), socket_timeout=self._timeout_s, socket_connect_timeout=self._timeout_s
        )

    def _warn_once(self, text: str) -> None:
        if text not in self._said:
            self._said.add(text)
            self._warn(text)

    def _outcome(self, name: str, future: Future) -> Topology | None:
        try:
            report = future.result()
        except (redis.RedisError, OSError, ValueError) as exc:
            self.failures += 1
            if name not in self._failing:
                self._failing.add(name)
                self._warn(f"{name}: LLDP neighbours unreadable ({exc}); its links are not reported")
            return None
        self._failing.discard(name)
        shape = (
            tuple(report.links),
            tuple(report.ecmp_groups),
            tuple(report.devices),
            tuple(report.queue_profiles),
        )
        if self._sent.get(name) == shape:
            return None
        self._sent[name] = shape
        return report
