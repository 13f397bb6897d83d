"""Counters to per-second rates, one device snapshot at a time, vectorised over all its values.

A raw counter can wrap (at its width), reset (driver reload, reboot, clear), arrive late, twice,
or not at all. The rules, applied to the whole ports x counters matrix at once:

* the delta is taken modulo the counter's width, so a single wrap comes out right by itself;
* a decrease is a wrap only if the wrapped delta is physically possible in the interval; otherwise
  the counter was reset. Possible means at most ``max_rate`` x dt from the vocabulary and, where
  the topology gives the port's line rate, at most ``WRAP_LINE_SLACK`` times what the line can
  carry in bytes or minimum-size packets: a lone reset of a 32-bit counter (534,918,379 -> 1,000)
  implies 3.76e9 packets in a second, under the vocabulary's 2 Tb/s bound but six times what a
  400 Gb/s port can carry;
* a reset is a property of a port, not of one counter: when any counter of a port was reset, every
  counter of that port that went down is taken as counting from zero (delta = current value);
  this is what catches a 32-bit counter whose reset would otherwise pass for a wrap;
* a rate above the physical maximum is unknown (NaN), never a number. Negative rates cannot occur;
* a counter missing from a snapshot has no rate in it (NaN: unknown, never zero), and its last value
  is held: when it comes back, its rate is taken over the whole time since that value was read
  (a switch that refreshes its queue counters every 10 s, read every second, gives one true rate
  per refresh instead of nine zeros and one spike). A value held longer than ``HOLD_MAX_S`` is let
  go: the counter starts afresh when it returns;
* a snapshot with the same timestamp as the previous one is a duplicate and one older than it is
  late: both are dropped and counted, and the state does not move backwards;
* a stale snapshot, one in which no counter of the device moved while it was moving before, is a
  read of counters the device has not refreshed yet (a switch that refreshes every second, polled
  every half second, shows every other read unchanged and the next one doubled): its rates are
  unknown, and the state stays at the last change, so the next change gives its rate over the
  whole time since. A device that stays unchanged past ``STALE_MAX_S`` has really gone quiet:
  its rates are zero again. The same holds port by port: a busy port read unchanged while the
  rest of its switch moved is a read between two refreshes of that port (switches that refresh
  each port at its own phase), unknown, held at its last change;
* where the topology gives a port's line rate, a byte or packet rate past ``LINE_SLACK`` times what
  the line can carry is impossible (unknown, counted), as a rate past the vocabulary's bound is.

Gauges pass through; watermarks (peak since the previous read) pass through too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fabricwatch.detectors.waves import waves
from fabricwatch.schemas.messages import CounterSpec, Snapshot
from fabricwatch.schemas.vocabulary import canonical

_KIND_COUNTER = "counter"
MIN_WIRE_BYTES = 84
"""Bytes the smallest Ethernet frame takes on the wire (64, plus preamble and inter-frame gap)."""
WRAP_LINE_SLACK = 1.5
"""How far past the line rate a wrap may imply before it is taken for a reset: timestamps are taken
at read time, so a delta can look somewhat faster than the line; three times faster cannot."""
LINE_SLACK = WRAP_LINE_SLACK
"""How far past the line rate a byte or packet rate may go before it is impossible (the same read-
time jitter allowance)."""
STALE_MAX_S = 2.0
"""Longest a device's unchanged reads are taken for reads of counters not refreshed yet: switches
refresh their port counters every second or two (SONiC's default is 1 s), so a device read
unchanged for longer than that has gone quiet. Counter groups refreshed more slowly (SONiC's queues
every 10 s) are the collector's to mark (``ingest/sonic/switch.py``); here the whole device counts."""
_STALE_MAX_NS = int(STALE_MAX_S * 1e9)
REFRESH_AWARE_SOURCES = frozenset({"sonic"})
"""Collectors that know their devices' refresh schedule and send unrefreshed groups as unknown
themselves (``ingest/sonic/switch.py`` reads FLEX_COUNTER_TABLE), so a full repeat from them is what the
device showed, not a read between refreshes: whole-device staleness would second-guess them (it
made a storm read through SONiC root at the leaf, tests/collectors/test_sonic_storm.py)."""
_PER_LINE_BYTE = {"bytes": 1.0, "packets": 1.0 / MIN_WIRE_BYTES, "frames": 1.0 / MIN_WIRE_BYTES}
HOLD_MAX_S = 60.0
"""Longest a missing counter's last value is held for a rate over the gap: SONiC's slowest default
refresh (watermarks, every 60 s). Past it, a rate would average over too long to say anything now."""
_HOLD_MAX_NS = int(HOLD_MAX_S * 1e9)
STACK_MAX_VALUES = 1024
"""Snapshots up to this many values are stacked with others of their layout (NICs: 27 to a few
hundred); bigger ones (a 64-port switch: 5,504) gain nothing from it and lose to the copying."""
_IDENTITIES_MAX = 4096
"""Counter-table lists remembered by identity; past it the memory starts again."""


@dataclass(frozen=True)
class Layout:
    """Column metadata of a snapshot, as arrays, computed once per distinct counter table."""

    counters: tuple[CounterSpec, ...]
    is_counter: np.ndarray
    mask: np.ndarray
    scale: np.ndarray
    max_rate: np.ndarray
    per_line_byte: np.ndarray
    """Units of the counter per byte of line rate (bytes 1, packets 1/84); NaN when the line does
    not bound it (time, events)."""
    positions: dict[tuple[str, int | None], int]
    plain: bool
    """Every counter 64 bits wide and unscaled (most tables): a delta needs neither mask nor scale."""
    _indexed: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict, compare=False)
    _columns: dict[frozenset[str], np.ndarray] = field(default_factory=dict, compare=False)
    _aligned: dict[tuple[str, bytes], tuple[np.ndarray, np.ndarray | None] | None] = field(
        default_factory=dict, compare=False
    )

    @classmethod
    def of(cls, counters: tuple[CounterSpec, ...]) -> Layout:
        vocab = canonical()
        max_rate = [vocab[c.name].max_rate if c.name in vocab else np.inf for c in counters]
        per_line = [
            _PER_LINE_BYTE.get(vocab[c.name].unit, np.nan) if c.name in vocab else np.nan for c in counters
        ]
        mask = np.array([(1 << c.width) - 1 for c in counters], dtype=np.uint64)
        scale = np.array([c.scale for c in counters], dtype=np.float64)
        return cls(
            counters=counters,
            is_counter=np.array([c.kind == _KIND_COUNTER for c in counters], dtype=bool),
            mask=mask,
            scale=scale,
            max_rate=np.array(max_rate, dtype=np.float64),
            per_line_byte=np.array(per_line, dtype=np.float64),
            positions={(c.name, c.index): i for i, c in enumerate(counters)},
            plain=bool((mask == np.iinfo(np.uint64).max).all() and (scale == 1.0).all()),
        )

    def col(self, name: str, index: int | None = None) -> int | None:
        return self.positions.get((name, index))

    def columns_of(self, names: frozenset[str]) -> np.ndarray:
        """Every column of these counters, at any index."""
        found = self._columns.get(names)
        if found is None:
            positions = sorted(pos for (n, _), pos in self.positions.items() if n in names)
            found = self._columns[names] = np.array(positions, dtype=np.intp)
        return found

    def indexed(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Columns of a per-priority or per-queue counter, with their priority/queue numbers."""
        found = self._indexed.get(name)
        if found is None:
            pairs = sorted((i, pos) for (n, i), pos in self.positions.items() if n == name and i is not None)
            found = self._indexed[name] = (
                np.array([p for _, p in pairs], dtype=np.intp),
                np.array([i for i, _ in pairs], dtype=np.int64),
            )
        return found

    def aligned_columns(self, name: str, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray | None] | None:
        """The columns of a per-priority/per-queue counter at the ``wanted`` index numbers, and
        which of those numbers have one (None: all do); None when the table lacks the counter.
        Detectors ask the same few questions of every poll, so the answers are kept."""
        key = (name, wanted.tobytes())
        if key in self._aligned:
            return self._aligned[key]
        cols, numbers = self.indexed(name)
        found: tuple[np.ndarray, np.ndarray | None] | None = None
        if numbers.size and np.array_equal(numbers, wanted):
            found = (cols, None)
        elif numbers.size:
            pos = {int(n): c for n, c in zip(numbers, cols, strict=True)}
            present = [j for j, w in enumerate(wanted) if int(w) in pos]
            found = (
                np.array([pos[int(wanted[j])] for j in present], dtype=np.intp),
                np.array(present, dtype=np.intp),
            )
        self._aligned[key] = found
        return found


class CounterColumns:
    """Reading counters out of ``values`` (ports x columns, or any leading axes before them: a
    stack of polls) by name, through ``layout``."""

    layout: Layout
    values: np.ndarray

    def port(self, name: str) -> np.ndarray | None:
        """One port-scope counter for every port, or None if this device does not report it."""
        col = self.layout.col(name)
        return None if col is None else self.values[..., col]

    def indexed(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """A per-priority or per-queue counter as ports x indices, with the index numbers."""
        cols, numbers = self.layout.indexed(name)
        return self.values[..., cols], numbers

    def any_above_zero(self, names: frozenset[str]) -> bool:
        """Whether any of these counters (at any index) rose or read above zero; unknown is not."""
        cols = self.layout.columns_of(names)
        return bool(cols.size) and bool((self.values[..., cols] > 0).any())

    def aligned(self, name: str, wanted: np.ndarray) -> np.ndarray | None:
        """A per-priority/per-queue counter as ports x ``wanted`` index numbers (NaN where this
        device lacks one), or None when it lacks the counter altogether."""
        found = self.layout.aligned_columns(name, wanted)
        if found is None:
            return None
        cols, present = found
        if present is None:
            return self.values[..., cols]
        out = np.full((*self.values.shape[:-1], wanted.size), np.nan)
        out[..., present] = self.values[..., cols]
        return out


@dataclass
class RateFrame(CounterColumns):
    """Rates of one device over one interval: counters per second, gauges and watermarks as read."""

    device: str
    device_kind: str
    ts_ns: int
    dt_s: float
    ports: list[str]
    layout: Layout
    values: np.ndarray


@dataclass
class RateStats:
    snapshots: int = 0
    values: int = 0
    frames: int = 0
    duplicates: int = 0
    late: int = 0
    port_resets: int = 0
    impossible: int = 0
    layout_changes: int = 0
    stale: int = 0
    """Snapshots in which nothing moved on a device that was moving: unknown, not zero."""
    stale_ports: int = 0
    """Ports read unchanged while they were moving and the rest of their device moved: a switch
    that refreshes each port's counters every second or so, read every half second, shows every
    other read of a busy port unchanged (and the next one doubled). Unknown, not zero."""


@dataclass
class _DeviceState:
    ts_ns: int
    layout: Layout
    ports: list[str]
    raw: np.ndarray
    valid: np.ndarray | None
    read_ns: np.ndarray | None = None
    """When each value was read, where some are held from an earlier snapshot (None: all at ts_ns)."""
    moved: np.ndarray | None = None
    """Per port, whether some counter of it moved between this snapshot and the one before."""

    @property
    def moving(self) -> bool:
        return self.moved is not None and bool(self.moved.any())

    def held_since(self) -> np.ndarray:
        return self.read_ns if self.read_ns is not None else np.full(self.raw.shape, self.ts_ns, np.int64)


@dataclass
class RateEngine:
    """Per-device counter state; one engine per worker, fed that worker's devices in arrival order."""

    stats: RateStats = field(default_factory=RateStats)
    _devices: dict[str, _DeviceState] = field(default_factory=dict)
    _layouts: dict[tuple[CounterSpec, ...], Layout] = field(default_factory=dict)
    _by_identity: dict[int, tuple[list[CounterSpec], Layout]] = field(default_factory=dict)

    def update(self, snap: Snapshot, line_Bps: np.ndarray | None = None) -> RateFrame | None:
        """Fold one snapshot in; return the rates since the previous one, or None if there are none.

        ``line_Bps`` is each port's line rate in bytes per second where the topology knows it (NaN
        where it does not); it only sharpens the wrap-or-reset decision."""
        self.stats.snapshots += 1
        self.stats.values += len(snap.ports) * len(snap.counters)
        layout = self._layout(snap.counters)
        raw, valid = snap.matrix()
        prev = self._devices.get(snap.device)
        if prev is not None and snap.ts_ns <= prev.ts_ns:
            if snap.ts_ns == prev.ts_ns:
                self.stats.duplicates += 1
            else:
                self.stats.late += 1
            return None
        if prev is None:
            self._devices[snap.device] = _DeviceState(snap.ts_ns, layout, snap.ports, raw, valid)
            return None
        if prev.layout is not layout or prev.ports != snap.ports:
            self.stats.layout_changes += 1
            prev = _realign(prev, layout, snap.ports)
        elif (
            valid is None
            and snap.source not in REFRESH_AWARE_SOURCES
            and prev.moving
            and snap.ts_ns - prev.ts_ns <= _STALE_MAX_NS
            and _unchanged(prev, raw)
        ):
            self.stats.stale += 1
            unknown = np.full(raw.shape, np.nan)
            return RateFrame(
                snap.device,
                snap.device_kind,
                snap.ts_ns,
                (snap.ts_ns - prev.ts_ns) / 1e9,
                snap.ports,
                layout,
                unknown,
            )
        changed = raw != prev.raw
        stale = None
        if valid is None and snap.source not in REFRESH_AWARE_SOURCES:
            stale = self._stale_ports(prev, changed, snap.ts_ns)
            if stale is not None:
                valid = np.repeat(~stale[:, None], raw.shape[1], axis=1)
        cur = _held(prev, _DeviceState(snap.ts_ns, layout, snap.ports, raw, valid))
        changed &= layout.is_counter
        cur.moved = changed.any(axis=1)
        if stale is not None:
            cur.moved |= stale  # still a busy port waiting for its refresh
        self._devices[snap.device] = cur
        dt = (snap.ts_ns - prev.ts_ns) / 1e9
        if prev.read_ns is None:
            values = self._rates(layout, prev, raw, valid, dt, line_Bps)
        else:
            values = self._rates(layout, prev, raw, valid, (snap.ts_ns - prev.read_ns) / 1e9, line_Bps)
            values[prev.read_ns < snap.ts_ns - _HOLD_MAX_NS] = np.nan
        self.stats.frames += 1
        return RateFrame(snap.device, snap.device_kind, snap.ts_ns, dt, snap.ports, layout, values)

    def update_batch(
        self, snaps: Sequence[Snapshot], line_Bps: Sequence[np.ndarray | None]
    ) -> list[RateFrame | None]:
        """``update`` for many snapshots at once, with the same results as one at a time in order.

        Snapshots of known devices with the same counter table and port count are stacked and
        computed in one numpy pass: a NIC snapshot is a 1 x 27 matrix, for which the per-call cost
        of numpy, not the arithmetic, is the whole cost of ``update``. A device's second snapshot
        in the batch waits for the next pass (a "wave"), since its rates start from the first's.
        Anything out of the ordinary (a first snapshot, missing values, a layout change, a counter
        that went down, a repeat of the last read, a late or duplicate one) takes ``update``, and
        so do big snapshots, whose per-call cost is small beside their arithmetic."""
        out: list[RateFrame | None] = [None] * len(snaps)
        for wave in waves(s.device for s in snaps):
            groups: dict[tuple[int, int], tuple[Layout, list[int]]] = {}
            for i in wave:
                snap = snaps[i]
                prev = self._devices.get(snap.device)
                layout = self._layout(snap.counters)
                if (
                    prev is None
                    or len(snap.ports) * len(snap.counters) > STACK_MAX_VALUES
                    or prev.layout is not layout
                    or prev.valid is not None
                    or prev.read_ns is not None
                    or snap.ts_ns <= prev.ts_ns
                    or prev.ports != snap.ports
                ):
                    out[i] = self.update(snap, line_Bps[i])
                else:
                    groups.setdefault((id(layout), len(snap.ports)), (layout, []))[1].append(i)
            for layout, rows in groups.values():
                self._update_stacked(layout, [snaps[i] for i in rows], [line_Bps[i] for i in rows], rows, out)
        return out

    def _update_stacked(
        self,
        layout: Layout,
        snaps: list[Snapshot],
        lines: list[np.ndarray | None],
        rows: list[int],
        out: list[RateFrame | None],
    ) -> None:
        raw = _stacked(snaps)
        if raw is None:  # a value missing or out of range: one by one
            for s, line, i in zip(snaps, lines, rows, strict=True):
                out[i] = self.update(s, line)
            return
        prevs = [self._devices[s.device] for s in snaps]
        prev_raw = np.stack([p.raw for p in prevs])
        ts = np.array([s.ts_ns for s in snaps], dtype=np.int64)
        gap_ns = ts - np.array([p.ts_ns for p in prevs], dtype=np.int64)
        counting = layout.is_counter
        changed = raw != prev_raw
        was_moving = np.stack([np.zeros(len(p.ports), bool) if p.moved is None else p.moved for p in prevs])
        refresh_unaware = np.array([s.source not in REFRESH_AWARE_SOURCES for s in snaps])
        may_be_stale = was_moving.any(axis=1) & refresh_unaware  # each ``prev.moving``, in one pass
        port_stale = ~changed.any(axis=2) & was_moving
        stale = port_stale.any(axis=1) & may_be_stale & (gap_ns <= _STALE_MAX_NS)
        special = stale | ((raw < prev_raw) & counting).any(axis=(1, 2))
        for k in np.flatnonzero(special):  # a repeat, a wrap or a reset: the general path
            out[rows[k]] = self.update(snaps[k], lines[k])
        plain = np.flatnonzero(~special)
        if plain.size == 0:
            return
        moved_ports = (changed & counting).any(axis=2)[plain]
        raw, prev_raw, gap_ns = raw[plain], prev_raw[plain], gap_ns[plain]
        dt = gap_ns / 1e9
        delta = _delta(layout, raw, prev_raw)
        delta /= dt[:, None, None]
        rates = np.where(counting, delta, raw)
        known_lines = [lines[k] for k in plain]
        line = None
        if any(x is not None for x in known_lines):
            line = np.stack([np.full(raw.shape[1], np.nan) if x is None else x for x in known_lines])
        self._drop_impossible(layout, rates, line)
        n = int(plain.size)
        self.stats.snapshots += n
        self.stats.values += int(raw.size)
        self.stats.frames += n
        for j, k in enumerate(plain):
            s = snaps[k]
            self._devices[s.device] = _DeviceState(
                s.ts_ns, layout, s.ports, raw[j], None, None, moved_ports[j]
            )
            out[rows[k]] = RateFrame(
                s.device, s.device_kind, s.ts_ns, float(dt[j]), s.ports, layout, rates[j]
            )

    def _stale_ports(self, prev: _DeviceState, changed: np.ndarray, ts_ns: int) -> np.ndarray | None:
        """Ports that read exactly as before (``changed``: per value, whether it differs from the
        last read) although they were moving, within ``STALE_MAX_S`` of their last change, while
        the device's other ports moved: reads between two refreshes of the port's counters, held
        at their last change so that the next one's rate spans the whole time since
        (``stats.stale_ports``). None: every port is fresh."""
        if prev.moved is None:
            return None
        last_change = prev.read_ns.min(axis=1) if prev.read_ns is not None else prev.ts_ns
        stale = prev.moved & ~changed.any(axis=1) & (ts_ns - last_change <= _STALE_MAX_NS)
        if not stale.any():
            return None
        self.stats.stale_ports += int(stale.sum())
        return stale

    def forget(self, device: str) -> None:
        """Drop a device's state (it left the fabric or moved to another worker)."""
        self._devices.pop(device, None)

    def _layout(self, counters: list[CounterSpec]) -> Layout:
        """The layout of a counter table, found first by the list's identity: decoded snapshots with
        the same table share one list (``schemas.messages``), and hashing 27 counter specs per NIC
        snapshot cost more than its rates. The entry holds the list, so its id is not reused."""
        known = self._by_identity.get(id(counters))
        if known is not None and known[0] is counters:
            return known[1]
        key = tuple(counters)
        layout = self._layouts.get(key)
        if layout is None:
            layout = self._layouts[key] = Layout.of(key)
        if len(self._by_identity) >= _IDENTITIES_MAX:
            self._by_identity.clear()
        self._by_identity[id(counters)] = (counters, layout)
        return layout

    def _rates(
        self,
        layout: Layout,
        prev: _DeviceState,
        cur: np.ndarray,
        valid: np.ndarray | None,
        dt: float | np.ndarray,
        line_Bps: np.ndarray | None,
    ) -> np.ndarray:
        """Written for few numpy calls: a NIC snapshot is a 1 x 30 matrix, where per-call overhead
        is the whole cost; the rare cases (resets, impossible rates, missing values) branch off.
        ``dt`` is per value (a matrix) where some previous values were held over a gap."""
        delta = _delta(layout, cur, prev.raw)
        went_down = cur < prev.raw
        went_down &= layout.is_counter
        if went_down.any():  # rare: a wrap or a reset
            reset = went_down & (delta > _bound(layout, line_Bps, WRAP_LINE_SLACK) * dt)
            if reset.any():
                delta = self._count_from_zero(layout, cur, delta, went_down, reset)
        delta /= dt
        rates = np.where(layout.is_counter, delta, cur)
        if valid is not None or prev.valid is not None:  # unknown first: never counted impossible
            rates[~_known(layout, valid, prev.valid)] = np.nan
        self._drop_impossible(layout, rates, line_Bps)
        return rates

    def _drop_impossible(self, layout: Layout, rates: np.ndarray, line_Bps: np.ndarray | None) -> None:
        """Rates past the vocabulary's bound, or past what the port's line can carry, are unknown
        (and counted). ``line_Bps`` has the shape of ``rates`` without its counter axis."""
        with np.errstate(invalid="ignore"):
            impossible = rates > _bound(layout, line_Bps, LINE_SLACK)
        if impossible.any():
            self.stats.impossible += int(impossible.sum())
            rates[impossible] = np.nan

    def _count_from_zero(
        self, layout: Layout, cur: np.ndarray, delta: np.ndarray, went_down: np.ndarray, reset: np.ndarray
    ) -> np.ndarray:
        """A reset port: every counter of it that went down has counted from zero since."""
        port_reset = reset.any(axis=1, keepdims=True)
        self.stats.port_resets += int(port_reset.sum())
        return np.where(went_down & port_reset, cur * layout.scale, delta)


def _unchanged(prev: _DeviceState, raw: np.ndarray) -> bool:
    """Every value of a complete snapshot, counters and gauges, equals the device's last: a repeat
    of the last read."""
    return bool((raw == prev.raw).all())


def _held(prev: _DeviceState, cur: _DeviceState) -> _DeviceState:
    """``cur``, with the counters it lacks kept at their last value (and when it was read) for a rate
    over the gap when they return, unless that value is older than HOLD_MAX_S."""
    if cur.valid is None:
        return cur
    hold = ~cur.valid & cur.layout.is_counter
    if prev.valid is not None:
        hold &= prev.valid
    if not hold.any():
        return cur
    since = prev.held_since()
    hold &= since >= cur.ts_ns - _HOLD_MAX_NS
    valid = cur.valid | hold
    read_ns = np.where(hold, since, cur.ts_ns)
    raw = np.where(hold, prev.raw, cur.raw)
    return _DeviceState(cur.ts_ns, cur.layout, cur.ports, raw, None if valid.all() else valid, read_ns)


def _delta(layout: Layout, cur: np.ndarray, prev: np.ndarray) -> np.ndarray:
    """What each counter counted since ``prev``, modulo its width, in its unit, as floats (gauges'
    entries are meaningless here)."""
    if layout.plain:
        return (cur - prev).astype(np.float64)
    delta = ((cur - prev) & layout.mask).astype(np.float64)
    delta *= layout.scale
    return delta


def _bound(layout: Layout, line_Bps: np.ndarray | None, slack: float) -> np.ndarray:
    """Per port and counter (``line_Bps``'s axes and the counters'), the largest possible rate:
    the vocabulary's bound, tightened to ``slack`` times what the port's line can carry where it
    is known and bounds the counter. Two passes over the matrix: a switch's is 5,504 values."""
    if line_Bps is None:
        return layout.max_rate
    bound = np.multiply.outer(line_Bps, layout.per_line_byte * slack)
    return np.fmin(bound, layout.max_rate, out=bound)  # fmin: a NaN (no line, or not bounded by it) gives way


def _known(layout: Layout, valid: np.ndarray | None, prev_valid: np.ndarray | None) -> np.ndarray:
    """Where a rate can be known: the value is present and, for counters, so was the previous one."""
    shape = (valid if valid is not None else prev_valid).shape
    now = valid if valid is not None else np.ones(shape, dtype=bool)
    before = prev_valid if prev_valid is not None else np.ones(shape, dtype=bool)
    return now & (before | ~layout.is_counter)


def _stacked(snaps: list[Snapshot]) -> np.ndarray | None:
    """The snapshots' values (one layout, one port count) as one uint64 array in one call, or None
    if any value is unknown. Bytes, as they come off the wire, are joined and viewed at once."""
    packed = [s.values for s in snaps if isinstance(s.values, bytes) and not s.unknown]
    if len(packed) == len(snaps):
        shape = (len(snaps), len(snaps[0].ports), len(snaps[0].counters))
        return np.frombuffer(b"".join(packed), dtype="<u8").reshape(shape)  # type: ignore[arg-type]
    if any(isinstance(s.values, bytes) for s in snaps):
        return None
    try:
        return np.array([s.values for s in snaps], dtype=np.uint64)
    except (TypeError, OverflowError, ValueError):
        return None


def _realign(prev: _DeviceState, layout: Layout, ports: list[str]) -> _DeviceState:
    """Previous values rearranged to a new counter table or port list; what is new has no previous."""
    raw = np.zeros((len(ports), len(layout.counters)), dtype=np.uint64)
    valid = np.zeros_like(raw, dtype=bool)
    old_row = {p: i for i, p in enumerate(prev.ports)}
    rows = [(i, old_row[p]) for i, p in enumerate(ports) if p in old_row]
    # A column continues only as the same counter: read from another source (ethtool's bytes, then
    # sysfs's 4-byte words for one poll) it is a new counter, whose first value has no previous.
    cols = [
        (j, k)
        for key, j in layout.positions.items()
        if (k := prev.layout.positions.get(key)) is not None and layout.counters[j] == prev.layout.counters[k]
    ]
    if rows and cols:
        new_r, old_r = (np.array(x, dtype=np.intp) for x in zip(*rows, strict=True))
        new_c, old_c = (np.array(x, dtype=np.intp) for x in zip(*cols, strict=True))
        raw[np.ix_(new_r, new_c)] = prev.raw[np.ix_(old_r, old_c)]
        valid[np.ix_(new_r, new_c)] = True if prev.valid is None else prev.valid[np.ix_(old_r, old_c)]
        moved = np.zeros(len(ports), dtype=bool)
        if prev.moved is not None:
            moved[new_r] = prev.moved[old_r]
        read_ns = None
        if prev.read_ns is not None:
            read_ns = np.full(raw.shape, prev.ts_ns, np.int64)
            read_ns[np.ix_(new_r, new_c)] = prev.read_ns[np.ix_(old_r, old_c)]
        return _DeviceState(prev.ts_ns, layout, ports, raw, valid, read_ns, moved)
    return _DeviceState(prev.ts_ns, layout, ports, raw, valid)


def known_sum(matrix: np.ndarray, n: int) -> np.ndarray:
    """Per row of a ports x columns matrix, the sum of its known values; NaN where none is known
    (counters a device lacks this poll are unknown, never zero: a sum of nothing is no reading)."""
    if matrix.shape[1] == 0:
        return np.full(n, np.nan)
    return np.where(np.isfinite(matrix).any(axis=1), np.nansum(matrix, axis=1), np.nan)
