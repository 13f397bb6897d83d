"""A simulated SONiC switch in a real Redis: a writer that fills and advances COUNTERS_DB and
CONFIG_DB the way syncd's flex counters and the PFC watchdog do (and APPL_DB's port states, as
portsorch does), so that ``collect sonic`` can be
tried, tested and benchmarked without a switch (``local.redis_server`` starts the Redis). The hash
and field names follow sonic-utilities' mock tables
(``tests/fixtures/sonic_counters_db_upstream_mock.json``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import redis

from fabricwatch.ingest.mapping import resolve, vendor_names
from fabricwatch.ingest.sonic.switch import APPL_DB, CONFIG_DB, COUNTERS_DB, STATE_COLUMNS, STATE_FIELDS
from fabricwatch.schemas.messages import Snapshot

PORT_FIELDS = (
    "SAI_PORT_STAT_IF_IN_OCTETS",
    "SAI_PORT_STAT_IF_OUT_OCTETS",
    "SAI_PORT_STAT_IF_IN_UCAST_PKTS",
    "SAI_PORT_STAT_IF_OUT_UCAST_PKTS",
    "SAI_PORT_STAT_IF_IN_DISCARDS",
    "SAI_PORT_STAT_IF_OUT_DISCARDS",
    "SAI_PORT_STAT_IF_IN_ERRORS",
    "SAI_PORT_STAT_IF_OUT_ERRORS",
    "SAI_PORT_STAT_IF_IN_FEC_CORRECTABLE_FRAMES",
    "SAI_PORT_STAT_IF_IN_FEC_NOT_CORRECTABLE_FRAMES",
    "SAI_PORT_STAT_ETHER_STATS_CRC_ALIGN_ERRORS",
    *(f"SAI_PORT_STAT_PFC_{n}_{d}_PKTS" for n in range(8) for d in ("RX", "TX")),
    "SAI_PORT_STAT_IF_IN_NON_UCAST_PKTS",  # present on real switches, mapped to nothing
)
QUEUE_FIELDS = (
    "SAI_QUEUE_STAT_PACKETS",
    "SAI_QUEUE_STAT_BYTES",
    "SAI_QUEUE_STAT_DROPPED_PACKETS",
    "SAI_QUEUE_STAT_DROPPED_BYTES",
    "SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS",
    "SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES",
    "PFC_WD_QUEUE_STATS_DEADLOCK_DETECTED",
    "PFC_WD_QUEUE_STATS_DEADLOCK_RESTORED",
    "PFC_WD_QUEUE_STATS_TX_DROPPED_PACKETS",
    "PFC_WD_QUEUE_STATS_RX_DROPPED_PACKETS",
)
PG_FIELDS = (
    "SAI_INGRESS_PRIORITY_GROUP_STAT_DROPPED_PACKETS",
    "SAI_INGRESS_PRIORITY_GROUP_STAT_SHARED_WATERMARK_BYTES",
    "SAI_INGRESS_PRIORITY_GROUP_STAT_XOFF_ROOM_WATERMARK_BYTES",
)


@dataclass
class SwitchDb:
    """COUNTERS_DB and CONFIG_DB of one switch with ``ports`` ports (Ethernet0, Ethernet4, ...),
    each with ``queues`` queues and ``pgs`` priority groups, every counter starting at 0."""

    url: str
    ports: int = 4
    queues: int = 8
    pgs: int = 8
    boot: int = 0
    """Bumped by ``reboot``: the object ids change with it."""
    values: dict[str, dict[str, int]] = field(default_factory=dict)
    """Object name (``Ethernet0``, ``Ethernet0:3`` queue, ``pg:Ethernet0:3``) -> field -> value."""

    def __post_init__(self) -> None:
        self.counters = redis.Redis.from_url(self.url, db=COUNTERS_DB)
        self.config = redis.Redis.from_url(self.url, db=CONFIG_DB)
        self.appl = redis.Redis.from_url(self.url, db=APPL_DB)
        self.load()

    @property
    def port_names(self) -> list[str]:
        return [f"Ethernet{4 * i}" for i in range(self.ports)]

    def oid(self, kind: int, i: int) -> str:
        return f"oid:0x{kind:x}{self.boot:04x}{i:08x}"

    def load(self) -> None:
        """Name maps and zeroed hashes, as syncd writes them at boot."""
        self.counters.flushdb()
        self.values = {}
        port_map, queue_map, pg_map = {}, {}, {}
        pipe = self.counters.pipeline(transaction=False)
        for i, port in enumerate(self.port_names):
            port_map[port] = self.oid(0x100, i)
            self._put(pipe, port, port_map[port], PORT_FIELDS)
            for q in range(self.queues):
                name = f"{port}:{q}"
                queue_map[name] = self.oid(0x150, i * 64 + q)
                self._put(pipe, name, queue_map[name], QUEUE_FIELDS)
            for g in range(self.pgs):
                name = f"{port}:{g}"
                pg_map[name] = self.oid(0x1A0, i * 64 + g)
                self._put(pipe, f"pg:{name}", pg_map[name], PG_FIELDS)
        self.appl.delete(*(f"PORT_TABLE:{port}" for port in self.port_names))
        for port in self.port_names:  # portsorch's view of each port: up, and enabled
            self.appl.hset(f"PORT_TABLE:{port}", mapping=dict.fromkeys(STATE_FIELDS, "up"))
        pipe.hset("COUNTERS_PORT_NAME_MAP", mapping=port_map)
        pipe.hset("COUNTERS_QUEUE_NAME_MAP", mapping=queue_map)
        pipe.hset("COUNTERS_PG_NAME_MAP", mapping=pg_map)
        pipe.execute()
        self._oids = {**port_map, **queue_map, **{f"pg:{k}": v for k, v in pg_map.items()}}

    def _put(self, pipe: redis.client.Pipeline, name: str, oid: str, fields: tuple[str, ...]) -> None:
        self.values[name] = dict.fromkeys(fields, 0)
        pipe.hset(f"COUNTERS:{oid}", mapping=self.values[name])

    def schedule(self, intervals_ms: Mapping[str, int], pfcwd_ms: int | None = None) -> None:
        """CONFIG_DB's FLEX_COUNTER_TABLE (and PFC_WD|GLOBAL), as ``counterpoll`` writes them."""
        pipe = self.config.pipeline(transaction=False)
        for group, ms in intervals_ms.items():
            entry = {"POLL_INTERVAL": ms, "FLEX_COUNTER_STATUS": "enable"}
            pipe.hset(f"FLEX_COUNTER_TABLE|{group}", mapping=entry)
        if pfcwd_ms is not None:
            pipe.hset("PFC_WD|GLOBAL", mapping={"POLL_INTERVAL": pfcwd_ms})
        pipe.execute()

    def advance(self, changes: Mapping[str, Mapping[str, int]], set_values: bool = False) -> None:
        """Add to counters (or set gauges and watermarks with ``set_values``) of named objects,
        in one pipeline, as one flex counter refresh would."""
        pipe = self.counters.pipeline(transaction=False)
        for name, fields in changes.items():
            current = self.values[name]
            for fld, amount in fields.items():
                current[fld] = amount if set_values else current[fld] + amount
            pipe.hset(f"COUNTERS:{self._oids[name]}", mapping={f: current[f] for f in fields})
        pipe.execute()

    def reboot(self) -> None:
        """What a cold reboot does to COUNTERS_DB: everything flushed, new object ids, counters at 0."""
        self.boot += 1
        self.load()

    def set_state(self, port: str, field: str, value: str) -> None:
        """An APPL_DB port state (``oper_status`` or ``admin_status``), as portsorch writes it."""
        self.appl.hset(f"PORT_TABLE:{port}", field, value)

    def close(self) -> None:
        self.counters.close()
        self.config.close()
        self.appl.close()


class SnapshotSwitch:
    """A switch whose COUNTERS_DB holds, at each ``write``, what a snapshot of it says: every
    canonical column written back to the SAI field the vendor map reads it from (the inverse of the
    collector's mapping), on the port, queue or priority-group object it belongs to. A column with
    no such field is left out, as a real switch's COUNTERS_DB lacks it."""

    def __init__(self, url: str, first: Snapshot) -> None:
        self.counters = redis.Redis.from_url(url, db=COUNTERS_DB)
        self.counters.flushdb()
        self.appl = redis.Redis.from_url(url, db=APPL_DB)
        fields = _sai_fields()
        self._cells: list[tuple[int, int, tuple[str, str], str]] = []  # (row, col, object, field)
        state_fields = dict(zip((c.name for c in STATE_COLUMNS), STATE_FIELDS, strict=True))
        self._states = [
            (col, state_fields[c.name]) for col, c in enumerate(first.counters) if c.name in state_fields
        ]
        """A port's state goes to APPL_DB's PORT_TABLE, where portsorch keeps it."""
        objects: dict[tuple[str, str], None] = {}  # (source, name): a queue and a PG share names
        for col, spec in enumerate(first.counters):
            if spec.name not in fields:
                continue  # no COUNTERS_DB field (a port's state: ``_states``)
            source, field_name = fields[spec.name]
            for row, port in enumerate(first.ports):
                if source == "sonic_port":
                    obj = (source, port)
                    field_name_n = field_name.replace("{n}", str(spec.index))
                else:
                    obj = (source, f"{port}:{spec.index}")
                    field_name_n = field_name
                objects[obj] = None
                self._cells.append((row, col, obj, field_name_n))
        self.oids = {obj: f"oid:0x{0x1000000 + i:x}" for i, obj in enumerate(objects)}
        maps = {
            "sonic_port": "COUNTERS_PORT_NAME_MAP",
            "sonic_queue": "COUNTERS_QUEUE_NAME_MAP",
            "sonic_pg": "COUNTERS_PG_NAME_MAP",
        }
        for (source, name), oid in self.oids.items():
            self.counters.hset(maps[source], name, oid)
        self.write(first)
        config = redis.Redis.from_url(url, db=CONFIG_DB)
        config.flushdb()
        for group in ("PORT", "QUEUE", "PG_DROP", "QUEUE_WATERMARK", "PG_WATERMARK"):
            config.hset(
                f"FLEX_COUNTER_TABLE|{group}", mapping={"POLL_INTERVAL": 100, "FLEX_COUNTER_STATUS": "enable"}
            )
        config.close()

    def write(self, snap: Snapshot) -> None:
        hashes: dict[str, dict[str, int]] = {}
        raw, known = snap.matrix()
        for row, col, obj, field_name in self._cells:
            if known is None or known[row, col]:
                hashes.setdefault(f"COUNTERS:{self.oids[obj]}", {})[field_name] = int(raw[row, col])
        pipe = self.counters.pipeline(transaction=False)
        for key, mapping in hashes.items():
            pipe.hset(key, mapping=mapping)
        pipe.execute()
        if self._states:
            self._write_states(snap.ports, raw, known)

    def _write_states(self, ports: list[str], raw: np.ndarray, known: np.ndarray | None) -> None:
        pipe = self.appl.pipeline(transaction=False)
        for row, port in enumerate(ports):
            said = {
                f: "down" if raw[row, col] else "up"
                for col, f in self._states
                if known is None or known[row, col]
            }
            if said:
                pipe.hset(f"PORT_TABLE:{port}", mapping=said)
        pipe.execute()

    def close(self) -> None:
        self.counters.close()
        self.appl.close()


def _sai_fields() -> dict[str, tuple[str, str]]:
    """Canonical name -> (source, SAI field; ``{n}`` left in for per-priority port fields)."""
    out: dict[str, tuple[str, str]] = {}
    for source in ("sonic_port", "sonic_queue", "sonic_pg"):
        for name in vendor_names(source):
            spec = resolve(source, name.replace("{n}", "0"))
            if spec is not None and spec.name not in out:
                out[spec.name] = (source, name.removesuffix(":{n}"))
    return out
