"""Wire messages: typed, validated on decode, versioned.

Every message is one JSON object with a ``type`` tag and a schema version ``v``. A device snapshot
is columnar (a counter table plus a ports x counters value matrix, sent as raw bytes) because one
Kafka message per device snapshot is what keeps Python fast enough: viewing a matrix's bytes as
numpy costs well under a nanosecond per value, decoding it from JSON integers tens, while one
object per counter would cost microseconds.

msgspec does the decoding: it validates types while parsing and its errors name the field path
(``Expected `int`, got `str` - at `$.ts_ns```), which is what a dead-letter reason needs.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any, Literal

import msgspec
import numpy as np

# Re-exported (``X as X``): every wire message is reachable from here, as ``decode`` reads them all.
from fabricwatch.schemas.burst_profile import BurstProfile as BurstProfile
from fabricwatch.schemas.periods import Periods as Periods
from fabricwatch.schemas.phases import Collectives as Collectives
from fabricwatch.schemas.phases import CommGraph as CommGraph
from fabricwatch.schemas.phases import Edge as Edge
from fabricwatch.schemas.phases import Operation as Operation
from fabricwatch.schemas.phases import Phase as Phase
from fabricwatch.schemas.phases import PhaseMessage as PhaseMessage
from fabricwatch.schemas.phases import Step as Step
from fabricwatch.schemas.phases import Steps as Steps
from fabricwatch.schemas.phases import Timed as Timed
from fabricwatch.schemas.phases import phase_time as phase_time
from fabricwatch.schemas.topology import Device as Device
from fabricwatch.schemas.topology import EcmpGroup as EcmpGroup
from fabricwatch.schemas.topology import Link as Link
from fabricwatch.schemas.topology import NicAttachment as NicAttachment
from fabricwatch.schemas.topology import QueueProfile as QueueProfile
from fabricwatch.schemas.topology import Topology as Topology
from fabricwatch.schemas.topology import check_ecn_curve as check_ecn_curve
from fabricwatch.schemas.wire import SCHEMA_VERSION as SCHEMA_VERSION
from fabricwatch.schemas.wire import check_stamp

CounterKind = Literal["counter", "gauge", "watermark"]
DeviceKind = Literal["nic", "switch"]
Severity = Literal["info", "warning", "critical"]
Status = Literal["firing", "updated", "resolved"]


class DecodeError(ValueError):
    """A message that cannot be decoded; the text names the field and the reason."""


NOT_JSON = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)
"""What a JSON decoder raises on bytes that are not JSON we can take. RecursionError is in it: a
few kilobytes nested a thousand deep exhaust the decoder's stack, and one such message must cost
only itself, like any other malformed one."""


class CounterSpec(msgspec.Struct, frozen=True, omit_defaults=True):
    """One column of a snapshot.

    ``index`` is the PFC priority for per-priority counters and the queue id for per-queue counters
    (the vocabulary says which). ``width`` is where the raw counter wraps (IB PMA error counters are
    8 or 16 bits and saturate instead; a saturated counter simply stops moving). ``scale`` converts
    raw units to canonical ones and is applied to the wrapped delta, not the raw value: IB
    ``port_xmit_data`` counts octets / 4 and wraps at its own width, so multiplying before
    unwrapping would put the wrap point in the wrong place.
    """

    name: str
    kind: CounterKind = "counter"
    width: Literal[8, 16, 32, 64] = 64
    index: int | None = None
    scale: int = 1


DeviceName = Annotated[str, msgspec.Meta(max_length=256)]
"""A device's name: a host name (253 characters at most), a switch's, or ``host/nic``. Longer is
not a name but a broken or hostile message, refused on decode rather than tracked as a device."""


class Snapshot(msgspec.Struct, tag="snapshot", tag_field="type", omit_defaults=True):
    """All counters of one device read at one instant (``ts_ns``: collector clock, ns since epoch).

    ``values`` is the ports x counters matrix in one of two forms. A collector builds rows of
    integers (``None``: the device did not say). On the wire (``encode``) it is the matrix's raw
    little-endian uint64 bytes (base64 in JSON), with ``unknown`` listing the flat positions of
    the values not said: stage 1 decoded a 64-port switch's 5,504 JSON integers into Python ints
    and then into numpy, most of its decoding; the bytes are one view (``bench/bench_rates.py``).
    Rows are still read: what earlier builds and recorded traces hold. Read values through
    ``matrix()``, which takes either."""

    device: DeviceName
    device_kind: DeviceKind
    ts_ns: int
    counters: list[CounterSpec]
    ports: list[str]
    values: bytes | list[list[int | None]]
    source: str = ""
    unknown: list[int] = msgspec.field(default_factory=list)
    """With ``values`` as bytes: the flat positions (``port * len(counters) + counter``) of values
    the device did not report, whose bytes mean nothing."""
    v: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if not isinstance(self.values, bytes):
            _check_matrix(self.ts_ns, self.ports, self.values, len(self.counters), "counters")
            return
        check_stamp(self.ts_ns)
        size = len(self.ports) * len(self.counters)
        if len(self.values) != 8 * size:
            raise ValueError(
                f"values has {len(self.values)} bytes but {len(self.ports)} ports x "
                f"{len(self.counters)} counters of uint64 take {8 * size}"
            )
        if self.unknown and not 0 <= min(self.unknown) <= max(self.unknown) < size:
            raise ValueError(f"unknown names a position outside the {size} values")

    def matrix(self) -> tuple[np.ndarray, np.ndarray | None]:
        """The values as a ports x counters uint64 array, and which are known (None: all of them).
        A missing, negative or over-wide value in rows is unknown; unknown entries read 0."""
        shape = (len(self.ports), len(self.counters))
        if isinstance(self.values, bytes):
            raw = np.frombuffer(self.values, dtype="<u8").reshape(shape)
            if not self.unknown:
                return raw, None
            valid = np.ones(raw.size, dtype=bool)
            valid[self.unknown] = False
            zeroed = raw.flatten()
            zeroed[self.unknown] = 0
            return zeroed.reshape(shape), valid.reshape(shape)
        try:
            return np.array(self.values, dtype=np.uint64).reshape(shape), None
        except (TypeError, OverflowError):
            pass
        flat = [v if isinstance(v, int) and 0 <= v < 1 << 64 else None for row in self.values for v in row]
        valid = np.array([v is not None for v in flat], dtype=bool).reshape(shape)
        return np.array([v or 0 for v in flat], dtype=np.uint64).reshape(shape), valid

    def packed(self) -> Snapshot:
        """This snapshot with its values as bytes, the form ``encode`` sends."""
        if isinstance(self.values, bytes):
            return self
        raw, valid = self.matrix()
        unknown = [] if valid is None else np.flatnonzero(~valid).tolist()
        return msgspec.structs.replace(self, values=raw.astype("<u8").tobytes(), unknown=unknown)


class RootCause(msgspec.Struct, frozen=True, omit_defaults=True):
    device: str
    port: str = ""
    priority: int | None = None
    group: str = ""


class Anomaly(msgspec.Struct, tag="anomaly", tag_field="type", omit_defaults=True):
    """One incident's state; ``fingerprint`` stays the same from firing to resolved."""

    fingerprint: str
    kind: str
    """An incident kind (``pfc_storm``, ``incast``, ...): data, declared by the detectors
    (``detectors/registry.py``), so that a sink or alerter older than the detector that found it
    stores and delivers it all the same."""
    severity: Severity
    status: Status
    start_ns: int
    ts_ns: int
    root: RootCause
    summary: str
    hint: str = ""
    end_ns: int | None = None
    devices: list[str] = msgspec.field(default_factory=list)
    hosts: list[str] = msgspec.field(default_factory=list)
    jobs: list[str] = msgspec.field(default_factory=list)
    collectives: list[str] = msgspec.field(default_factory=list)
    evidence: dict[str, float | int | str] = msgspec.field(default_factory=dict)
    caused_by: str = ""
    """The fingerprint of the incident that causes this one (drops at a dead link's port, at an
    incast's overflowing queue), set when it fires: the alerter pages the cause, not this."""
    finding: bool = False
    """A state of the fabric between incidents (a link running hot, a queue that bursts), not a
    fault: its alert is labelled ``class="finding"`` and routed apart from incident pages
    (``docs/alerts.md``)."""
    v: int = SCHEMA_VERSION


class Symptom(msgspec.Struct, tag="symptom", tag_field="type", omit_defaults=True):
    """What one device sees about itself (stage 1), sparse: emitted when it starts, changes or clears.

    Stage 2 turns symptoms of many devices into incidents; a symptom alone never pages anybody.
    ``kind`` is e.g. ``pfc_storm`` (watchdog condition met on a queue), ``incast`` (egress queue
    congested with fan-in), ``ecmp_imbalance`` (a group's member shares skewed under load),
    ``ecn_received`` (a NIC receiving ECN-marked traffic and sending CNPs).
    """

    kind: str
    device: str
    ts_ns: int
    start_ns: int
    active: bool = True
    port: str = ""
    priority: int | None = None
    group: str = ""
    evidence: dict[str, float | int | str] = msgspec.field(default_factory=dict)
    v: int = SCHEMA_VERSION


class Watermark(msgspec.Struct, tag="watermark", tag_field="type", omit_defaults=True):
    """Stage 1's promise that it has processed its partitions' snapshots up to ``ts_ns``.

    Symptoms are sparse: when a fault clears, a device goes silent. Stage 2 needs time to move on
    to resolve incidents, and to take symptoms in time order across input partitions, so stage 1
    sends one watermark per input partition (``source``) along the symptom stream.
    """

    source: str
    ts_ns: int
    caught_up: bool = False
    """The source had nothing more to read: stage 2 need not wait for it."""
    v: int = SCHEMA_VERSION


class SymptomBatch(msgspec.Struct, tag="symptoms", tag_field="type", omit_defaults=True):
    """What one stage-1 batch (or heartbeat) sends one pod: its symptoms, then its watermarks, in
    the order stage 2 takes them, as one message instead of one each (``docs/streaming.md``)."""

    items: list[Symptom | Watermark]
    v: int = SCHEMA_VERSION


PORT_RATE_COLUMNS: tuple[str, ...] = (
    "tx_bps",
    "rx_bps",
    "tx_util",
    "rx_util",
    "tx_pps",
    "rx_pps",
    "rx_pause_pps",
    "tx_pause_pps",
    "rx_pause_frac",
    "tx_pause_frac",
    "ecn_marked_pps",
    "cnp_sent_pps",
    "cnp_received_pps",
    "discards_pps",
    "errors_pps",
    "queue_bytes_max",
    "watermark_bytes_max",
    "crc_errors_pps",
    "fec_corrected_ps",
    "fec_uncorrectable_ps",
    "queue_dropped_bps",
    "pg_drops_pps",
    "pfcwd_storms_ps",
    "pfcwd_dropped_pps",
    "pg_headroom_bytes_max",
    "pg_shared_bytes_max",
)
"""What a dashboard needs of a port, in ``PortRates.columns`` order (``docs/storage.md`` defines each).
The last nine say why a port is slow or lossy (link health, drops, the PFC watchdog, ingress
buffers); a store gained them in schema v4, and a message from an earlier build lacks them."""


class PortRates(msgspec.Struct, tag="rates", tag_field="type", omit_defaults=True):
    """A fixed per-port projection of one device's rates (``detectors.summary.summarise``), for storage.

    Columnar like a snapshot, the ports x columns matrix as raw little-endian float64 bytes (base64
    in JSON), NaN where a value is unknown (the device does not report the counter, or the rate was
    impossible). Rows of JSON numbers made a Python float of every value on both sides: a sink
    decoded them into numpy at ~1 M rows/s, slower than ClickHouse stores them; the bytes decode
    4-5x faster (``bench/bench_clickhouse.py``, ``rates_decode``).
    ``values`` as rows of numbers (``None``: unknown) is still read: what earlier builds sent.
    """

    device: str
    device_kind: DeviceKind
    ts_ns: int
    dt_s: float
    ports: list[str]
    columns: list[str]
    values: bytes | list[list[float | None]]
    v: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if isinstance(self.values, bytes):
            want = 8 * len(self.ports) * len(self.columns)
            if len(self.values) != want:
                raise ValueError(
                    f"values has {len(self.values)} bytes but {len(self.ports)} ports x "
                    f"{len(self.columns)} columns of float64 take {want}"
                )
            check_stamp(self.ts_ns)
        else:
            _check_matrix(self.ts_ns, self.ports, self.values, len(self.columns), "columns")

    @classmethod
    def of(
        cls,
        device: str,
        device_kind: DeviceKind,
        ts_ns: int,
        dt_s: float,
        ports: list[str],
        columns: list[str],
        matrix: Any,
    ) -> PortRates:
        """From a ports x columns float array (NaN: unknown)."""
        data = np.ascontiguousarray(matrix, dtype="<f8").tobytes()
        return cls(device, device_kind, ts_ns, dt_s, ports, columns, data)

    def matrix(self) -> np.ndarray:
        """The values as a ports x columns float64 array, NaN where unknown (read-only when it is a
        view of the message's bytes)."""
        shape = (len(self.ports), len(self.columns))
        if isinstance(self.values, bytes):
            return np.frombuffer(self.values, dtype="<f8").reshape(shape)
        return np.asarray(self.values, dtype=np.float64).reshape(shape)

    def column(self, name: str) -> np.ndarray:
        """One column's value per port, NaN where the message has no such column. Read columns by
        name, never by their place in ``PORT_RATE_COLUMNS``: stage 1 sends only the columns its
        devices' counters feed (``detectors.summary``), and another build may send others."""
        if name not in self.columns:
            return np.full(len(self.ports), np.nan)
        return self.matrix()[:, self.columns.index(name)]


class RatesBatch(msgspec.Struct, tag="rates_batch", tag_field="type", omit_defaults=True):
    """The ``PortRates`` of many devices in one message: what a stage-1 batch computed for the
    devices of one input partition, in the order it read them.

    One storage message per snapshot doubled the messages a stage-1 worker produces, and for a NIC
    (one port) the message's own cost (a producer call, a record for the sink to decode) was most
    of it; here a batch's rows are one ``sum(port_counts)`` x columns float64 matrix, projected in
    one numpy pass and encoded once (``docs/streaming.md``). Device ``i`` owns ``port_counts[i]``
    consecutive rows and as many names in ``ports``.
    """

    devices: list[str]
    device_kinds: list[DeviceKind]
    ts_ns: list[int]
    dt_s: list[float]
    port_counts: list[int]
    ports: list[str]
    columns: list[str]
    values: bytes
    v: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        n = len(self.devices)
        for name in ("device_kinds", "ts_ns", "dt_s", "port_counts"):
            if len(getattr(self, name)) != n:
                raise ValueError(f"{name} has {len(getattr(self, name))} entries but there are {n} devices")
        if any(c < 0 for c in self.port_counts) or sum(self.port_counts) != len(self.ports):
            raise ValueError(
                f"port_counts sum to {sum(self.port_counts)} but there are {len(self.ports)} ports"
            )
        want = 8 * len(self.ports) * len(self.columns)
        if len(self.values) != want:
            raise ValueError(
                f"values has {len(self.values)} bytes but {len(self.ports)} ports x "
                f"{len(self.columns)} columns of float64 take {want}"
            )
        for ts_ns in self.ts_ns:
            check_stamp(ts_ns)

    def matrix(self) -> np.ndarray:
        """Every device's rows, stacked: a read-only view of the message's bytes."""
        return np.frombuffer(self.values, dtype="<f8").reshape(len(self.ports), len(self.columns))

    def per_device(
        self, matrix: np.ndarray | None = None
    ) -> Iterator[tuple[str, str, int, float, list[str], Any]]:
        """Each device's ``device, device_kind, ts_ns, dt_s, ports`` and its rows of ``matrix``
        (the message's own by default; a reader may pass it remapped to other columns)."""
        matrix, row = self.matrix() if matrix is None else matrix, 0
        for device, kind, ts_ns, dt_s, count in zip(
            self.devices, self.device_kinds, self.ts_ns, self.dt_s, self.port_counts, strict=True
        ):
            yield device, kind, ts_ns, dt_s, self.ports[row : row + count], matrix[row : row + count]
            row += count

    def split(self) -> list[PortRates]:
        """One ``PortRates`` per device, as a reader of single-device messages expects them."""
        return [
            PortRates.of(device, kind, ts_ns, dt_s, ports, self.columns, rows)  # type: ignore[arg-type]
            for device, kind, ts_ns, dt_s, ports, rows in self.per_device()
        ]


class Cause(msgspec.Struct, frozen=True, omit_defaults=True):
    """The fault another fault is the effect of, as its label names it: its kind and root."""

    kind: str
    root: RootCause


class Label(msgspec.Struct, tag="label", tag_field="type", omit_defaults=True):
    """Ground truth for a trace: a fault (or a benign look-alike, kind ``benign``) and its root."""

    kind: str
    """An incident kind the detectors declare, or ``benign``."""
    start_ns: int
    end_ns: int
    root: RootCause
    jobs: list[str] = msgspec.field(default_factory=list)
    note: str = ""
    severity: Literal["", "warning", "critical"] = ""
    """The severity the fault deserves where it is not the kind's usual one: an ECMP collapse
    below saturation is a ``warning`` (found later, after it has lasted)."""
    cause: Cause | None = None
    """An effect's cause (a job slowed by a storm at its NIC): the incident found for this label
    is localised when it fired linked to the incident of that cause (``Anomaly.caused_by``)."""
    v: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.end_ns < self.start_ns:
            raise ValueError("end_ns is before start_ns")


def _check_matrix(ts_ns: int, ports: list[str], values: list[list], ncols: int, cols: str) -> None:
    """A ports x columns matrix message (snapshot, rates) is whole and stamped, or it is refused."""
    check_stamp(ts_ns)
    if len(values) != len(ports):
        raise ValueError(f"values has {len(values)} rows but there are {len(ports)} ports")
    for i, row in enumerate(values):
        if len(row) != ncols:
            raise ValueError(f"values[{i}] has {len(row)} entries but there are {ncols} {cols}")


class WindowState(msgspec.Struct, tag="window_state", tag_field="type", omit_defaults=True):
    """A device's detector windows as stage 1 kept them at ``ts_ns`` (``fabric.state``, keyed by
    the device, in the partition of ``fabric.counters`` its snapshots come from): what the worker
    that reads the device next starts from (``detectors/windows.py``). ``windows``: per detector
    name, its packed window."""

    device: str
    ts_ns: int
    windows: dict[str, bytes]
    v: int = SCHEMA_VERSION


Message = (
    Snapshot
    | Phase
    | CommGraph
    | Collectives
    | Steps
    | Topology
    | Symptom
    | Watermark
    | SymptomBatch
    | Anomaly
    | Label
    | PortRates
    | RatesBatch
    | WindowState
    | Periods
    | BurstProfile
)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Message)
_typed_decoders: dict[type, msgspec.json.Decoder] = {}


def encode(msg: Message) -> bytes:
    """One message as JSON; a snapshot's values as bytes (``Snapshot.packed``)."""
    return _encoder.encode(msg.packed() if isinstance(msg, Snapshot) else msg)


def decode(data: bytes | str, expected: type | None = None) -> Any:
    """Decode one message; raise DecodeError naming the field on anything malformed.

    ``expected`` restricts the accepted type (a counters topic takes snapshots only).
    """
    if expected is Snapshot:
        return _decode_snapshot(data)
    return _decoded(_decoder if expected is None else _typed_decoder(expected), data)


def _decoded(decoder: msgspec.json.Decoder, data: bytes | str) -> Any:
    try:
        msg = decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise DecodeError(str(exc)) from None
    except NOT_JSON as exc:
        raise DecodeError(f"not valid JSON: {_why(exc)}") from None
    if msg.v != SCHEMA_VERSION:
        raise DecodeError(f"unsupported schema version v={msg.v} (this build reads v={SCHEMA_VERSION})")
    return msg


class _SnapshotWire(msgspec.Struct, tag="snapshot", tag_field="type"):
    """A snapshot as read off the wire, its counter table left as JSON bytes (``_decode_snapshot``)."""

    device: DeviceName
    device_kind: DeviceKind
    ts_ns: int
    counters: msgspec.Raw
    ports: list[str]
    values: bytes | list[list[int | None]]
    source: str = ""
    unknown: list[int] = msgspec.field(default_factory=list)
    v: int = SCHEMA_VERSION


_snapshot_decoder = msgspec.json.Decoder(_SnapshotWire)
_counters_decoder = msgspec.json.Decoder(list[CounterSpec])
_counter_tables: dict[bytes, list[CounterSpec]] = {}
COUNTER_TABLES_MAX = 4096
"""Distinct counter tables remembered (a fabric has a handful: one per NIC driver, switch model and
firmware); past it the memory starts again rather than grow without bound."""


def _decode_snapshot(data: bytes | str) -> Snapshot:
    """``decode(data, Snapshot)``: a collector sends the same counter table with every snapshot of
    a device, and decoding it into its ``CounterSpec`` objects was two thirds of decoding a NIC
    snapshot. Each distinct table is decoded once; snapshots with the same table share one list
    (do not mutate a snapshot's ``counters``), which also lets the rate engine find its layout by
    identity rather than hash 27 counter specs per snapshot."""
    wire = _decoded(_snapshot_decoder, data)
    counters = _counter_table(bytes(wire.counters))
    try:
        return Snapshot(
            wire.device,
            wire.device_kind,
            wire.ts_ns,
            counters,
            wire.ports,
            wire.values,
            wire.source,
            wire.unknown,
        )
    except ValueError as exc:
        raise DecodeError(str(exc)) from None


def _counter_table(key: bytes) -> list[CounterSpec]:
    counters = _counter_tables.get(key)
    if counters is not None:
        return counters
    try:
        counters = _counters_decoder.decode(key)
    except msgspec.ValidationError as exc:
        raise DecodeError(str(exc).replace("`$", "`$.counters", 1)) from None
    except NOT_JSON as exc:  # a Raw value is skipped over, its text not checked
        raise DecodeError(f"not valid JSON: {_why(exc)}") from None
    if len(_counter_tables) >= COUNTER_TABLES_MAX:
        _counter_tables.clear()
    _counter_tables[key] = counters
    return counters


def decode_rates(data: bytes | str) -> list[PortRates]:
    """A ``fabric.rates`` record, one ``PortRates`` per device whichever form it came in."""
    msg = decode(data, PortRates | RatesBatch)
    return msg.split() if isinstance(msg, RatesBatch) else [msg]


def _why(exc: Exception) -> str:
    return "nested too deeply" if isinstance(exc, RecursionError) else str(exc)


def _typed_decoder(expected: type) -> msgspec.json.Decoder:
    decoder = _typed_decoders.get(expected)
    if decoder is None:
        decoder = _typed_decoders[expected] = msgspec.json.Decoder(expected)
    return decoder
