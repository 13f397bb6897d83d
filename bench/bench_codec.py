"""How much msgspec buys over the stdlib for our messages, and how fast a trace streams.

The design rests on one message per device snapshot being cheap to decode *and validate* in Python;
this measures that claim against the obvious alternative (``json`` plus hand-written checks of the
same fields) in one process, so the ratio holds on any machine. Trace figures bound replay speed.

Run: ``python bench/bench_codec.py``. Prints one JSON object per measurement.
"""

from __future__ import annotations

import base64
import json
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import msgspec

from fabricwatch.schemas import topics, vocabulary
from fabricwatch.schemas.messages import CounterSpec, Snapshot, decode, encode
from fabricwatch.schemas.trace import TraceReader, TraceWriter

SWITCH_PORTS = 64
PRIORITIES = (3, 4)
SWITCH_QUEUES = (0, 1, 2, 3)
MIN_SECONDS = 0.4
REPEATS = 5
T0_NS = 1_700_000_000_000_000_000


def counter_specs(priorities: tuple[int, ...], queues: tuple[int, ...]) -> list[CounterSpec]:
    """Columns as a collector would emit them: every port counter, then per-priority, per-queue."""
    specs = []
    for d in vocabulary.canonical().values():
        indexes: tuple[int | None, ...] = {"port": (None,), "priority": priorities, "queue": queues}[d.scope]
        width = 32 if d.name in ("out_of_buffer", "out_of_sequence", "tx_wait") else 64
        specs.extend(CounterSpec(d.name, d.kind, width, i) for i in indexes)  # type: ignore[arg-type]
    return specs


def snapshot(rng: random.Random, device: str, ports: int, specs: list[CounterSpec]) -> Snapshot:
    """Values shaped like a busy fabric's, so message size and gzip ratio are realistic."""
    bits = [_magnitude_bits(s) for s in specs]
    values = [[_value(rng, b) for b in bits] for _ in range(ports)]
    names = [f"Ethernet{4 * i}" for i in range(ports)]
    kind = "switch" if ports > 1 else "nic"
    return Snapshot(device, kind, T0_NS, specs, names, values, source="bench")


def _magnitude_bits(spec: CounterSpec) -> int:
    """Traffic counters run into the trillions after days of uptime; error and pause counters stay small."""
    if spec.kind != "counter":
        return 20
    unit = vocabulary.canonical()[spec.name].unit
    return {"bytes": 48, "packets": 40, "us": 32}.get(unit, 0)


def _value(rng: random.Random, bits: int) -> int | None:
    if rng.random() < 0.02:  # a counter this device does not support
        return None
    if bits == 0:
        return 0 if rng.random() < 0.7 else rng.randrange(10_000)
    return rng.randrange(1 << bits)


# --- stdlib baseline: the validation msgspec does while parsing, written out by hand ----------------

_INT_OR_NONE = frozenset({int, type(None)})
_INT = frozenset({int})
_KINDS = frozenset({"counter", "gauge", "watermark"})
_WIDTHS = frozenset({8, 16, 32, 64})


def _field(obj: dict[str, Any], name: str, types: type | tuple[type, ...], default: Any = ...) -> Any:
    if name not in obj:
        if default is ...:
            raise ValueError(f"Object missing required field `{name}`")
        return default
    value = obj[name]
    if not isinstance(value, types) or isinstance(value, bool):
        raise ValueError(f"wrong type at `$.{name}`")
    return value


def _counter_spec(obj: Any) -> CounterSpec:
    if not isinstance(obj, dict):
        raise ValueError("counter is not an object")
    kind = _field(obj, "kind", str, "counter")
    width = _field(obj, "width", int, 64)
    if kind not in _KINDS or width not in _WIDTHS:
        raise ValueError("bad counter kind or width")
    index = _field(obj, "index", (int, type(None)), None)
    return CounterSpec(_field(obj, "name", str), kind, width, index, _field(obj, "scale", int, 1))


def _value_rows(rows: list[Any]) -> list[list[int | None]]:
    for row in rows:
        # The fastest pure-Python check there is: one C-level pass over the row's types.
        if type(row) is not list or not _INT_OR_NONE.issuperset(map(type, row)):
            raise ValueError("values must be rows of int or null")
    return rows


def _values(obj: dict[str, Any]) -> bytes | list[list[int | None]]:
    """``values`` as msgspec reads ``bytes | list[list[int | None]]``: JSON has no bytes, so a string
    is the packed matrix in base64, decoded strictly as msgspec does; an array is rows, as earlier
    builds sent them. Its length against ports x counters is Snapshot's own check, run by both."""
    values = _field(obj, "values", (str, list))
    if type(values) is list:
        return _value_rows(values)
    return base64.b64decode(values, validate=True)


def _unknown(obj: dict[str, Any]) -> list[int]:
    unknown = _field(obj, "unknown", list, [])
    if not _INT.issuperset(map(type, unknown)):
        raise ValueError("unknown must be positions (int)")
    return unknown


def stdlib_decode(data: bytes) -> Snapshot:
    obj = json.loads(data)
    if not isinstance(obj, dict) or obj.get("type") != "snapshot":
        raise ValueError("not a snapshot")
    if obj.get("device_kind") not in ("nic", "switch"):
        raise ValueError("bad device_kind")
    ports = _field(obj, "ports", list)
    if not all(type(p) is str for p in ports):
        raise ValueError("ports must be strings")
    if _field(obj, "v", int, 1) != 1:
        raise ValueError("unsupported schema version")
    return Snapshot(
        device=_field(obj, "device", str),
        device_kind=obj["device_kind"],
        ts_ns=_field(obj, "ts_ns", int),
        counters=[_counter_spec(c) for c in _field(obj, "counters", list)],
        ports=ports,
        values=_values(obj),
        source=_field(obj, "source", str, ""),
        unknown=_unknown(obj),
    )


def stdlib_encode(obj: dict[str, Any]) -> bytes:
    """``obj`` holds the values as bytes, as a packed snapshot does; they go as base64 text, as msgspec
    writes bytes."""
    text = {**obj, "values": base64.b64encode(obj["values"]).decode("ascii")}
    return json.dumps(text, separators=(",", ":")).encode()


# --- measurement ---------------------------------------------------------------------------------


def per_second(fn: Callable[[Any], Any], arg: Any) -> float:
    """Best of several runs: the least disturbed one is the closest to the code's own cost."""
    n = 1
    while _elapsed(fn, arg, n) < MIN_SECONDS / 4:
        n *= 2
    return max(n / _elapsed(fn, arg, n) for _ in range(REPEATS))


def _elapsed(fn: Callable[[Any], Any], arg: Any, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn(arg)
    return time.perf_counter() - start


def emit(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


def bench_codec() -> None:
    """Both encoders start from the snapshot as it goes on the wire, values packed into bytes
    (``Snapshot.packed``): packing a collector's rows is numpy's work, not the JSON codec's."""
    specs = counter_specs(PRIORITIES, SWITCH_QUEUES)
    snap = snapshot(random.Random(1), "leaf01", SWITCH_PORTS, specs).packed()
    data = encode(snap)
    as_dict = msgspec.to_builtins(snap, builtin_types=(bytes,))
    assert stdlib_decode(data) == decode(data, Snapshot) == snap
    assert stdlib_encode(as_dict) == data
    nvalues = len(snap.ports) * len(snap.counters)
    shape = {"ports": len(snap.ports), "counters": len(snap.counters), "bytes": len(data)}
    rates: dict[tuple[str, str], float] = {}
    for impl, op, fn, arg in (
        ("msgspec", "decode", lambda d: decode(d, Snapshot), data),
        ("stdlib", "decode", stdlib_decode, data),
        ("msgspec", "encode", encode, snap),
        ("stdlib", "encode", stdlib_encode, as_dict),
    ):
        rate = rates[impl, op] = per_second(fn, arg)
        emit(
            bench="codec",
            impl=impl,
            op=op,
            **shape,
            snapshots_per_s=round(rate),
            values_per_s=round(rate * nvalues),
        )
    for op in ("decode", "encode"):
        emit(
            bench="codec",
            op=op,
            ratio_msgspec_over_stdlib=round(rates["msgspec", op] / rates["stdlib", op], 1),
        )


def _snapshots(count: int, ports: int, specs: list[CounterSpec]) -> Iterator[Snapshot]:
    """A pool of distinct snapshots cycled with fresh timestamps, so generating data does not dominate
    the timing. Random low digits make the gzip ratio pessimistic next to real counters."""
    rng = random.Random(2)
    pool = [snapshot(rng, f"dev{i:03d}", ports, specs) for i in range(64)]
    for i in range(count):
        snap = pool[i % len(pool)]
        snap.ts_ns = T0_NS + i * 1_000_000
        yield snap


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def _write(path: Path, snaps: Iterator[Snapshot]) -> None:
    with TraceWriter(path, "bench", T0_NS) as writer:
        for snap in snaps:
            writer.write_message(topics.COUNTERS, snap.device, snap.ts_ns, snap)


def _read(path: Path) -> int:
    with TraceReader(path) as reader:
        return sum(len(r.payload) for r in reader)


def _read_decode(path: Path) -> None:
    """What replay does per record: the reader hands over the payload unparsed, decode validates it."""
    with TraceReader(path) as reader:
        for r in reader:
            decode(r.payload, Snapshot)


def bench_trace(tmp: Path, shape: str, count: int, ports: int, specs: list[CounterSpec]) -> None:
    for suffix in (".trace", ".trace.gz"):
        path = tmp / f"{shape}{suffix}"
        write_s, _ = _timed(partial(_write, path, _snapshots(count, ports, specs)))
        read_s, payload_bytes = _timed(partial(_read, path))
        decode_s, _ = _timed(partial(_read_decode, path))
        file_mb = round(path.stat().st_size / 1e6, 1)
        for op, seconds in (("write", write_s), ("read", read_s), ("read_decode", decode_s)):
            emit(
                bench="trace",
                op=op,
                file=suffix,
                record=shape,
                records=count,
                file_mb=file_mb,
                records_per_s=round(count / seconds),
                payload_mb_per_s=round(payload_bytes / 1e6 / seconds, 1),
            )


def main() -> None:
    bench_codec()
    with tempfile.TemporaryDirectory() as tmp:
        bench_trace(Path(tmp), "nic", 100_000, 1, counter_specs(PRIORITIES, ()))
        bench_trace(Path(tmp), "switch", 2_000, SWITCH_PORTS, counter_specs(PRIORITIES, SWITCH_QUEUES))


if __name__ == "__main__":
    main()
