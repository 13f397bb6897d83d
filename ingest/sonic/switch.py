"""Read a SONiC switch's counters out of its Redis: COUNTERS_DB, one pipelined round trip per poll.

SONiC's syncd copies the ASIC's counters into Redis (COUNTERS_DB, database 2) on its own schedule,
the flex counter groups of CONFIG_DB's ``FLEX_COUNTER_TABLE`` (ports every 1 s, queues and PG drops
every 10 s, queue and PG watermarks every 60 s by default; the PFC watchdog's counters every
200 ms). Each object has a hash ``COUNTERS:oid:0x...``; the name maps say which object is which
(``COUNTERS_PORT_NAME_MAP``: ``Ethernet0`` -> oid, ``COUNTERS_QUEUE_NAME_MAP`` and
``COUNTERS_PG_NAME_MAP``: ``Ethernet0:3`` -> oid).

A poll asks, in one pipeline, for the three name maps' sizes and an ``HMGET`` of just the fields
``schemas/data/vendor_map.csv`` maps (sources ``sonic_port``, ``sonic_queue``, ``sonic_pg``) from
every object, and fills the snapshot's matrix from the replies by precomputed positions. The plan of
which fields to ask and where each lands is made when the name maps are read, and made again when
they change: a map whose size changed (a port breakout) or objects that vanished (a reboot gives
new object ids) make the poll read the maps again and ask once more. Fields the switch never
reports are dropped from the plan after its first poll.

Counters read faster than the switch refreshes them repeat their last value. A group of counters
of which nothing moved, read sooner than 1.5 of its refresh intervals after it last moved, is
stale: its values go out as missing (unknown), never as zero traffic, and the rate engine takes the
next rate over the whole time since the last fresh value (``detectors/rates.py``). A group that has
not moved for longer than that is idle, and its values go out as read.

Each port's state is not a counter and is not in COUNTERS_DB: portsorch keeps it in APPL_DB
(database 0 of the same server, where ``show interfaces status`` reads it) as ``PORT_TABLE:<port>``
``oper_status`` and ``admin_status``, ``up`` or ``down``. A second pipeline per poll reads them into
the ``oper_down`` and ``admin_down`` gauges the link state detector reads. A port APPL_DB does not
know, or a state that is neither, is unknown; an APPL_DB that does not answer costs the states
only (said once), never the counters.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import redis

from fabricwatch.ingest.mapping import port_order, resolve, vendor_names
from fabricwatch.ingest.sonic.phy import PHY_COLUMNS, STATE_DB, PhyReader
from fabricwatch.schemas.messages import CounterSpec, Snapshot

APPL_DB = 0
COUNTERS_DB = 2
CONFIG_DB = 4
STATE_FIELDS = ("oper_status", "admin_status")
STATE_COLUMNS = [CounterSpec("oper_down", "gauge", 64), CounterSpec("admin_down", "gauge", 64)]
"""The gauges of ``STATE_FIELDS``, in that order: 1 down, 0 up."""
_DOWN = {b"down": 1, b"up": 0, "down": 1, "up": 0}
PRIORITIES = range(8)
"""The indices a port-hash ``{n}`` field (``SAI_PORT_STAT_PFC_{n}_RX_PKTS``) is asked for."""
STALE_AFTER = 1.5
"""A group is stale until this many of its refresh intervals have passed without a change."""

FLEX_DEFAULT_MS = {
    "PORT": 1000,
    "QUEUE": 10000,
    "PG_DROP": 10000,
    "QUEUE_WATERMARK": 60000,
    "PG_WATERMARK": 60000,
}
"""SONiC's refresh intervals when CONFIG_DB names none (sonic-utilities counterpoll/main.py)."""
PFCWD_DEFAULT_MS = 200
"""The PFC watchdog's poll interval when ``PFC_WD|GLOBAL`` names none (sonic-utilities pfcwd/main.py)."""


class SwitchError(Exception):
    """This poll of this switch gave nothing; the next poll tries again."""


@dataclass(frozen=True)
class _Kind:
    source: str
    name_map: str
    indexed: bool


KINDS = (
    _Kind("sonic_port", "COUNTERS_PORT_NAME_MAP", indexed=False),
    _Kind("sonic_queue", "COUNTERS_QUEUE_NAME_MAP", indexed=True),
    _Kind("sonic_pg", "COUNTERS_PG_NAME_MAP", indexed=True),
)


def flex_group(source: str, field_name: str) -> str:
    """The flex counter group (or the PFC watchdog) that refreshes one field of one kind of hash."""
    if source == "sonic_port":
        return "PORT"
    if source == "sonic_queue":
        if field_name.startswith("PFC_WD_"):
            return "PFCWD"
        return "QUEUE_WATERMARK" if "WATERMARK" in field_name else "QUEUE"
    return "PG_WATERMARK" if "WATERMARK" in field_name else "PG_DROP"


@dataclass(frozen=True)
class Schedule:
    """How often the switch refreshes each group of counters, and where that was learned."""

    interval_s: Mapping[str, float]
    disabled: frozenset[str] = frozenset()
    origin: str = "defaults"

    def describe(self) -> str:
        groups = ", ".join(f"{g} {s:g} s" for g, s in sorted(self.interval_s.items()))
        off = f"; disabled: {', '.join(sorted(self.disabled))}" if self.disabled else ""
        return f"refresh intervals from {self.origin}: {groups}{off}"


DEFAULT_SCHEDULE = Schedule(
    {**{g: ms / 1000 for g, ms in FLEX_DEFAULT_MS.items()}, "PFCWD": PFCWD_DEFAULT_MS / 1000}
)


def read_schedule(config_db: redis.Redis) -> Schedule:
    """The flex counter schedule from CONFIG_DB (``FLEX_COUNTER_TABLE|<group>``, ``PFC_WD|GLOBAL``).

    A group without an entry keeps SONiC's default; one whose ``FLEX_COUNTER_STATUS`` is
    ``disable`` is never refreshed, so its counters are left out rather than read as flat."""
    pipe = config_db.pipeline(transaction=False)
    for group in FLEX_DEFAULT_MS:
        pipe.hgetall(f"FLEX_COUNTER_TABLE|{group}")
    pipe.hgetall("PFC_WD|GLOBAL")
    replies = pipe.execute()
    if not any(replies):
        return DEFAULT_SCHEDULE
    intervals, disabled = dict(DEFAULT_SCHEDULE.interval_s), set()
    for group, entry in zip([*FLEX_DEFAULT_MS, "PFCWD"], replies, strict=True):
        entry = {decoded(k): decoded(v) for k, v in entry.items()}
        interval = entry.get("POLL_INTERVAL", "")
        if interval.isdigit() and int(interval) > 0:
            intervals[group] = int(interval) / 1000
        if entry.get("FLEX_COUNTER_STATUS") == "disable":
            disabled.add(group)
    return Schedule(intervals, frozenset(disabled), "CONFIG_DB")


@dataclass
class _Plan:
    """What one poll asks for and where each answer lands in the snapshot's matrix."""

    ports: list[str]
    counters: list[CounterSpec]
    keys: list[str]
    fields: list[list[str]]
    cells: np.ndarray
    """Per value asked for, in reply order: its flat position in the ports x counters matrix."""
    asked: list[tuple[str, str]]
    """The distinct (source, field) pairs asked for."""
    asked_of: np.ndarray
    """Per value asked for: its index in ``asked``."""
    map_sizes: list[int]
    port_objects: int
    """How many of the requests (the first ones) are port hashes."""
    groups: dict[str, np.ndarray]
    """Flex group -> the columns it refreshes."""
    pruned: bool = False
    packed: list[bytes] | None = None
    """The poll's commands as sent on the wire, packed at the first poll."""

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.ports), len(self.counters)


def make_plan(
    maps: Mapping[str, Mapping[str, str]], schedule: Schedule, only: set[tuple[str, str]] | None = None
) -> _Plan:
    """The poll plan for these name maps: every mapped field of every port, queue and PG of a port
    in the port map (``only``: just these (source, field) pairs), grouped by refresh group."""
    ports = sorted(maps.get(KINDS[0].name_map, {}), key=port_order)
    rows = {p: i for i, p in enumerate(ports)}
    requests: list[tuple[str, list[tuple[str, str, int, CounterSpec]]]] = []
    for kind in KINDS:
        wanted = _fields(kind, schedule, only)
        for name, oid in sorted(maps.get(kind.name_map, {}).items(), key=lambda item: port_order(item[0])):
            asked = _object_fields(kind, name, rows, wanted)
            if asked:
                requests.append((f"COUNTERS:{oid}", asked))
    columns = sorted(
        {
            (spec.name, -1 if spec.index is None else spec.index): spec for _, a in requests for *_, spec in a
        }.items()
    )
    col_of = {key: j for j, (key, _) in enumerate(columns)}
    asked_pairs: dict[tuple[str, str], int] = {}
    cells, asked_of, groups = [], [], {}
    for _, asked in requests:
        for source, fld, row, spec in asked:
            col = col_of[_key(spec)]
            cells.append(row * len(columns) + col)
            asked_of.append(asked_pairs.setdefault((source, fld), len(asked_pairs)))
            groups.setdefault(flex_group(source, fld), set()).add(col)
    return _Plan(
        ports=ports,
        counters=[spec for _, spec in columns],
        keys=[key for key, _ in requests],
        fields=[[fld for _, fld, _, _ in asked] for _, asked in requests],
        cells=np.array(cells, dtype=np.intp),
        asked=list(asked_pairs),
        asked_of=np.array(asked_of, dtype=np.intp),
        map_sizes=[len(maps.get(k.name_map, {})) for k in KINDS],
        port_objects=sum(1 for key, a in requests if a[0][0] == KINDS[0].source),
        groups={g: np.array(sorted(c), dtype=np.intp) for g, c in groups.items()},
        pruned=only is not None,
    )


def _fields(kind: _Kind, schedule: Schedule, only: set[tuple[str, str]] | None) -> list[str]:
    """The hash fields of this kind the vendor map knows, ``{n}`` expanded for port hashes, less
    those of a disabled group and those not in ``only``."""
    names = []
    for vendor_name in vendor_names(kind.source):
        if kind.indexed:
            names.append(vendor_name.removesuffix(":{n}"))
        elif "{n}" in vendor_name:
            names.extend(vendor_name.replace("{n}", str(n)) for n in PRIORITIES)
        else:
            names.append(vendor_name)
    return [
        n
        for n in names
        if flex_group(kind.source, n) not in schedule.disabled and (only is None or (kind.source, n) in only)
    ]


def _object_fields(
    kind: _Kind, name: str, rows: Mapping[str, int], wanted: Sequence[str]
) -> list[tuple[str, str, int, CounterSpec]]:
    """(source, field, row, column) of every field asked of one object; none if its port is unknown
    (SONiC maps the CPU port's queues too) or its name is not ``<port>:<index>``."""
    if not kind.indexed:
        port, suffix = name, ""
    else:
        port, sep, index = name.rpartition(":")
        if not sep or not index.isdigit():
            return []
        suffix = f":{index}"
    row = rows.get(port)
    if row is None:
        return []
    out = []
    for fld in wanted:
        spec = resolve(kind.source, fld + suffix)
        if spec is not None:
            out.append((kind.source, fld, row, spec))
    return out


def _key(spec: CounterSpec) -> tuple[str, int]:
    """A column's identity and sort key, the snapshot builder's (``ingest/mapping.py``)."""
    return spec.name, -1 if spec.index is None else spec.index


def decoded(value: bytes | str) -> str:
    """A Redis reply as text (replies are bytes unless the client decodes)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


@dataclass
class SwitchStats:
    polls: int = 0
    snapshots: int = 0
    failures: int = 0
    map_reads: int = 0
    stale_groups: int = 0
    bad_values: int = 0


@dataclass
class _GroupState:
    moved_at: float = -math.inf


@dataclass
class SonicSwitch:
    """One SONiC switch's COUNTERS_DB: ``read()`` gives a snapshot per call, raising SwitchError
    when this poll gives nothing (unreachable, no name maps yet, nothing but garbage)."""

    name: str
    url: str
    timeout_s: float = 1.0
    config_url: str = ""
    """CONFIG_DB's Redis (default: database 4 on the same server), for the refresh schedule."""
    warn: Callable[[str], None] = print
    stats: SwitchStats = field(default_factory=SwitchStats)
    schedule: Schedule = DEFAULT_SCHEDULE
    _plan: _Plan | None = None
    _maps: dict[str, dict[str, str]] = field(default_factory=dict)
    _client: redis.Redis | None = None
    _appl: redis.Redis | None = None
    _phy: PhyReader | None = None
    _prev: np.ndarray | None = None
    _groups: dict[str, _GroupState] = field(default_factory=dict)
    _said: set[str] = field(default_factory=set)

    def read(self, poll_interval_s: float) -> Snapshot:
        """Poll once. ``poll_interval_s`` (how often the caller polls) decides which groups can be
        stale: one refreshed at least that often never is."""
        self.stats.polls += 1
        try:
            snap = self._read(poll_interval_s)
        except SwitchError:
            self.stats.failures += 1
            raise
        except (redis.RedisError, OSError) as exc:
            self.stats.failures += 1
            self._plan = None  # read the maps again once it answers
            raise SwitchError(f"{self.url}: {type(exc).__name__}: {exc}") from None
        self.stats.snapshots += 1
        return snap

    def close(self) -> None:
        for client in (self._client, self._appl, self._phy.client if self._phy else None):
            if client is not None:
                client.close()

    def _read(self, poll_interval_s: float) -> Snapshot:
        if self._plan is None:
            self._load()
        assert self._plan is not None
        ts_ns, replies = self._ask(self._plan)
        if self._maps_changed(self._plan, replies):
            self._load()
            ts_ns, replies = self._ask(self._plan)
        plan = self._plan
        raw, valid, seen = self._fill(plan, replies[len(KINDS) :])
        if not plan.pruned and seen.any() and not seen.all():
            raw, valid, plan = self._prune(plan, raw, valid, seen)
        self._mark_stale(plan, raw, valid, poll_interval_s)
        extra = [(STATE_COLUMNS, self._port_states(plan.ports)), (PHY_COLUMNS, self._phy_rows(plan.ports))]
        return _snapshot(self.name, ts_ns, plan, raw, valid, extra)

    def _port_states(self, ports: list[str]) -> list[list[int | None]] | None:
        """Per port, ``STATE_COLUMNS`` from APPL_DB's ``PORT_TABLE``; None when it knows none."""
        try:
            pipe = self._connect_appl().pipeline(transaction=False)
            for port in ports:
                pipe.hmget(f"PORT_TABLE:{port}", *STATE_FIELDS)
            replies = pipe.execute()
        except (redis.RedisError, OSError) as exc:
            self._say_once(
                "appl_db", f"APPL_DB unreadable ({type(exc).__name__}: {exc}); port states unknown"
            )
            return None
        states = [[_DOWN.get(v) for v in reply] for reply in replies]
        return states if any(v is not None for row in states for v in row) else None

    def _phy_rows(self, ports: list[str]) -> list[list[int | None]] | None:
        """Per port, ``PHY_COLUMNS`` from STATE_DB (``phy.py``); None when it knows none."""
        try:
            if self._phy is None:
                self._phy = PhyReader(_client(with_db(self.url, STATE_DB), STATE_DB, self.timeout_s))
            rows = self._phy.rows(ports)
            for port in self._phy.bad:
                self._say_once(
                    f"state_db:{port}",
                    f"STATE_DB {port}: a key that is not a hash; its speed and optics unknown",
                )
            return rows
        except (redis.RedisError, OSError) as exc:
            self._say_once(
                "state_db", f"STATE_DB unreadable ({type(exc).__name__}: {exc}); speeds and optics unknown"
            )
            return None

    def _prune(
        self, plan: _Plan, raw: np.ndarray, valid: np.ndarray, seen: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, _Plan]:
        """Stop asking for the fields this switch did not report on the plan's first poll; this
        poll's values, narrowed to the new plan's columns."""
        only = {pair for pair, s in zip(plan.asked, seen, strict=True) if s}
        self._plan = pruned = make_plan(self._maps, self.schedule, only)
        position = {(c.name, c.index): j for j, c in enumerate(plan.counters)}
        cols = np.array([position[(c.name, c.index)] for c in pruned.counters], dtype=np.intp)
        return raw[:, cols], valid[:, cols], pruned

    def _connect(self) -> redis.Redis:
        if self._client is None:
            self._client = _client(self.url, COUNTERS_DB, self.timeout_s)
        return self._client

    def _connect_appl(self) -> redis.Redis:
        if self._appl is None:
            self._appl = _client(with_db(self.url, APPL_DB), APPL_DB, self.timeout_s)
        return self._appl

    def _load(self) -> None:
        """Read the name maps and the refresh schedule; make the poll plan."""
        client = self._connect()
        self.stats.map_reads += 1
        pipe = client.pipeline(transaction=False)
        for kind in KINDS:
            pipe.hgetall(kind.name_map)
        maps = {
            kind.name_map: {decoded(k): decoded(v) for k, v in reply.items()}
            for kind, reply in zip(KINDS, pipe.execute(), strict=True)
        }
        if not maps[KINDS[0].name_map]:
            raise SwitchError(f"{self.url}: COUNTERS_DB has no {KINDS[0].name_map} (the switch is starting?)")
        self.schedule = self._read_schedule()
        self._maps = maps
        self._plan = make_plan(maps, self.schedule)
        self._prev = None

    def _read_schedule(self) -> Schedule:
        config = _client(self.config_url or with_db(self.url, CONFIG_DB), CONFIG_DB, self.timeout_s)
        try:
            schedule = read_schedule(config)
        except redis.RedisError as exc:
            schedule = DEFAULT_SCHEDULE
            self._say_once("schedule", f"CONFIG_DB unreadable ({exc}); assuming SONiC's defaults")
        finally:
            config.close()
        self._say_once(schedule.describe(), schedule.describe())
        return schedule

    def _ask(self, plan: _Plan) -> tuple[int, list]:
        """One round trip: the commands were packed once, when the plan was made (packing ~1,100
        HMGETs anew each poll cost more than reading their answers); an error answer to one of
        them (a key that is not a hash) is that command's reply, not the poll's end."""
        pool = self._connect().connection_pool
        conn = pool.get_connection()
        try:
            if plan.packed is None:
                commands = [("HLEN", kind.name_map) for kind in KINDS]
                commands += [
                    ("HMGET", key, *fields) for key, fields in zip(plan.keys, plan.fields, strict=True)
                ]
                plan.packed = conn.pack_commands(commands)
            ts_ns = time.time_ns()
            conn.send_packed_command(plan.packed, check_health=False)
            replies: list = []
            for _ in range(len(KINDS) + len(plan.keys)):
                try:
                    replies.append(conn.read_response())
                except redis.ResponseError as exc:
                    replies.append(exc)
        finally:
            pool.release(conn)
        return ts_ns, replies

    def _maps_changed(self, plan: _Plan, replies: list) -> bool:
        """A map's size changed, or every port hash came back empty (new object ids after a reboot)."""
        sizes = replies[: len(KINDS)]
        if any(isinstance(s, Exception) for s in sizes):
            raise SwitchError(f"{self.url}: {next(s for s in sizes if isinstance(s, Exception))}")
        if list(sizes) != plan.map_sizes:
            return True
        ports = replies[len(KINDS) : len(KINDS) + plan.port_objects]
        return bool(ports) and all(isinstance(r, list) and not any(r) for r in ports)

    def _fill(self, plan: _Plan, replies: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The matrix and its validity from the HMGET replies, and which of the plan's (source,
        field) pairs came back at least once."""
        flat: list = []
        for key, fields, reply in zip(plan.keys, plan.fields, replies, strict=True):
            if isinstance(reply, list) and len(reply) == len(fields):
                flat.extend(reply)
            else:
                self._bad(f"{key}: {reply!r}"[:200])
                flat.extend([None] * len(fields))
        numbers, present = self._numbers(plan, flat)
        seen = np.bincount(plan.asked_of[present], minlength=len(plan.asked)) > 0
        raw = np.zeros(plan.shape[0] * plan.shape[1], dtype=np.uint64)
        valid = np.zeros(raw.shape, dtype=bool)
        cells = plan.cells[present]
        raw[cells] = numbers
        valid[cells] = True
        return raw.reshape(plan.shape), valid.reshape(plan.shape), seen

    def _numbers(self, plan: _Plan, flat: list) -> tuple[np.ndarray, np.ndarray]:
        """The values that came back as non-negative integers, and a mask of which they were."""
        try:
            return np.fromiter(map(int, flat), np.uint64, len(flat)), np.ones(len(flat), dtype=bool)
        except (TypeError, ValueError, OverflowError):
            pass
        present = np.zeros(len(flat), dtype=bool)
        numbers = []
        for i, value in enumerate(flat):
            if value is None:
                continue
            if value.isdigit() and int(value) < 1 << 64:
                present[i] = True
                numbers.append(int(value))
            else:
                shown = value[:40].decode(errors="replace") if isinstance(value, bytes) else str(value)[:40]
                self._bad(f"{plan.asked[plan.asked_of[i]][1]} = {shown!r}: not a counter")
        return np.array(numbers, dtype=np.uint64), present

    def _bad(self, text: str) -> None:
        self.stats.bad_values += 1
        self._say_once("bad:" + text.partition(":")[0], f"{text}; left out (said once per field)")

    def _mark_stale(self, plan: _Plan, raw: np.ndarray, valid: np.ndarray, poll_interval_s: float) -> None:
        now, prev = time.monotonic(), self._prev
        self._prev = raw
        for group, cols in plan.groups.items():
            refresh = self.schedule.interval_s.get(group, 0.0)
            state = self._groups.setdefault(group, _GroupState())
            if prev is None or not np.array_equal(raw[:, cols], prev[:, cols]):
                state.moved_at = now
            elif refresh > poll_interval_s and now - state.moved_at < STALE_AFTER * refresh:
                valid[:, cols] = False
                self.stats.stale_groups += 1

    def _say_once(self, key: str, text: str) -> None:
        if key not in self._said:
            self._said.add(key)
            self.warn(f"{self.name}: {text}")


def _client(url: str, default_db: int, timeout_s: float) -> redis.Redis:
    """A client of ``url``, on ``default_db`` unless the URL names a database."""
    timeouts = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
    return redis.Redis.from_url(url, db=default_db, **timeouts)


def with_db(url: str, db: int) -> str:
    """``url`` with its database replaced: CONFIG_DB lives beside COUNTERS_DB on the same server."""
    parts = urlsplit(url)
    query = "&".join(q for q in parts.query.split("&") if q and not q.startswith("db="))
    return urlunsplit((parts.scheme, parts.netloc, f"/{db}", query, parts.fragment))


def _snapshot(
    device: str,
    ts_ns: int,
    plan: _Plan,
    raw: np.ndarray,
    valid: np.ndarray,
    extra: Sequence[tuple[list[CounterSpec], list[list[int | None]] | None]] = (),
) -> Snapshot:
    """``extra``: gauges read beside the counters (port states, the physical layer), each with
    its columns; a part that knows nothing (None) adds no column."""
    rows = raw.tolist()
    if not valid.all():
        for r, c in zip(*np.nonzero(~valid), strict=True):
            rows[r][c] = None
    counters = plan.counters
    for columns, values in extra:
        if values is not None:
            rows = [row + more for row, more in zip(rows, values, strict=True)]
            counters = [*counters, *columns]
    return Snapshot(
        device=device,
        device_kind="switch",
        ts_ns=ts_ns,
        counters=counters,
        ports=plan.ports,
        values=rows,
        source="sonic",
    )
