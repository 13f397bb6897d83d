"""Malformed messages of every kind a new user threw at fabricwatch, from a seeded generator.

Each kind starts from a real message of the demo (a snapshot, a phase, a topology) and breaks it
one way: bit flips, truncation, wrong types, NaN and infinities, a values matrix of the wrong
shape, unknown counters, duplicated and backward timestamps, giant strings, bytes that are not
UTF-8, nesting thousands deep, and timestamps in the future. Messages that still decode name
devices of their own (``fuzz-*``) unless the kind is about a real device's time (duplicates,
going backwards), so a clean run's anomalies must come out unchanged.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

import msgspec

from fabricwatch.schemas.messages import DecodeError, decode

NS = 1_000_000_000

KINDS = (
    "bit_flip",
    "truncated",
    "wrong_type",
    "nan_inf",
    "shape_mismatch",
    "unknown_counter",
    "duplicate_ts",
    "backward_ts",
    "giant_string",
    "not_utf8",
    "deep_nesting",
    "future_ts",
    "not_a_mapping",
)


def generate(real: list[bytes], count: int, seed: int) -> Iterator[tuple[str, bytes]]:
    """``count`` malformed messages (kind, bytes) made from the ``real`` message bytes."""
    rng = random.Random(seed)
    for i in range(count):
        kind = KINDS[i % len(KINDS)]
        yield kind, make(kind, rng.choice(real), rng, i)


def make(kind: str, value: bytes, rng: random.Random, i: int) -> bytes:
    """``value`` (a real message already delivered) broken as ``kind`` says. A random break (a bit
    flip, a cut, a stray byte) that still decodes as a real device's snapshot at a new time would
    be a real reading, not a malformed one: it is moved to a device of its own."""
    out = _MAKERS[kind](rng, value, i)
    if kind in {"duplicate_ts", "backward_ts"}:
        return out
    try:
        got, was = decode(out), decode(value)
    except DecodeError:
        return out
    real_device = getattr(got, "device", None) == getattr(was, "device", "")
    if real_device or getattr(got, "job", None) == getattr(was, "job", ""):
        try:
            return msgspec.json.encode(_fake(_doc(out), i))
        except (msgspec.DecodeError, UnicodeDecodeError):
            return b"\xff" + out  # a stray byte our decoder skipped inside an unknown field
    return out


def _doc(value: bytes) -> dict:
    return msgspec.json.decode(value)


def _fake(doc: dict, i: int) -> dict:
    for key in ("device", "job"):
        if key in doc:
            doc[key] = f"fuzz-{i}"
    return doc


def _bit_flip(rng: random.Random, value: bytes, i: int) -> bytes:
    data = bytearray(value)
    for _ in range(rng.randint(1, 8)):
        at = rng.randrange(len(data))
        data[at] ^= 1 << rng.randrange(8)
    return bytes(data)


def _truncated(rng: random.Random, value: bytes, i: int) -> bytes:
    return value[: rng.randrange(1, len(value))]


def _wrong_type(rng: random.Random, value: bytes, i: int) -> bytes:
    doc = _fake(_doc(value), i)
    key = rng.choice([k for k in doc if k != "type"])
    # A value of the field's own type is no wrong type: "seven" as a device's name is a new device.
    wrong = [v for v in ([1, 2], {"x": 1}, "seven", 3.5, None, True) if type(v) is not type(doc[key])]
    doc[key] = rng.choice(wrong)
    return msgspec.json.encode(doc)


def _nan_inf(rng: random.Random, value: bytes, i: int) -> bytes:
    text = msgspec.json.encode(_fake(_doc(value), i))
    for token in (b"NaN", b"Infinity", b"-Infinity", b"1e999"):
        text = text.replace(b"0,", token + b",", 1)
    return text


def _shape_mismatch(rng: random.Random, value: bytes, i: int) -> bytes:
    doc = _fake(_doc(value), i)
    if doc.get("values"):
        doc["values"] = doc["values"][:-1] if rng.random() < 0.5 else [row[:-1] for row in doc["values"]]
    else:
        doc["values"] = [[1]]
    return msgspec.json.encode(doc)


def _unknown_counter(rng: random.Random, value: bytes, i: int) -> bytes:
    doc = _fake(_doc(value), i)
    if "counters" in doc:
        doc["counters"][0] = {"name": f"gremlins_{i}"}
    else:
        doc[f"gremlins_{i}"] = 1
    return msgspec.json.encode(doc)


def _moved(stamp: int | list[int], by_ns: float) -> int | list[int]:
    """A time, or each of a batch's times (``periods``), moved by ``by_ns``."""
    return [int(t + by_ns) for t in stamp] if isinstance(stamp, list) else int(stamp + by_ns)


def _shifted(seconds: float) -> Callable[[random.Random, bytes, int], bytes]:
    def shift(rng: random.Random, value: bytes, i: int) -> bytes:
        doc = _doc(value)  # a real device: its own time is what this kind is about
        for key in ("ts_ns", "begin_ns"):
            if key in doc:
                doc[key] = _moved(doc[key], seconds * NS)
        doc.pop("end_ns", None)
        return msgspec.json.encode(doc)

    return shift


def _future(rng: random.Random, value: bytes, i: int) -> bytes:
    doc = _fake(_doc(value), i)
    for key in ("ts_ns", "begin_ns"):
        if key in doc:
            doc[key] = _moved(doc[key], rng.choice([600, 86_400, 10**9]) * NS)
    doc.pop("end_ns", None)
    return msgspec.json.encode(doc)


def _giant_string(rng: random.Random, value: bytes, i: int) -> bytes:
    doc = _fake(_doc(value), i)
    key = "device" if "device" in doc else "source"
    doc[key] = "x" * rng.choice([100_000, 1_000_000])
    return msgspec.json.encode(doc)


def _not_utf8(rng: random.Random, value: bytes, i: int) -> bytes:
    at = rng.randrange(len(value))
    return value[:at] + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80"]) + value[at:]


def _deep(rng: random.Random, value: bytes, i: int) -> bytes:
    depth = rng.choice([1_000, 3_000, 20_000])
    return value[:-1] + b',"extra":' + b"[" * depth + b"]" * depth + b"}"


def _not_a_mapping(rng: random.Random, value: bytes, i: int) -> bytes:
    return rng.choice([b"[]", b"null", b"42", b'"snapshot"', b"", b"{}", b'{"type":"snapshot"}'])


_MAKERS: dict[str, Callable[[random.Random, bytes, int], bytes]] = {
    "bit_flip": _bit_flip,
    "truncated": _truncated,
    "wrong_type": _wrong_type,
    "nan_inf": _nan_inf,
    "shape_mismatch": _shape_mismatch,
    "unknown_counter": _unknown_counter,
    "duplicate_ts": _shifted(0.0),
    "backward_ts": _shifted(-30.0),
    "giant_string": _giant_string,
    "not_utf8": _not_utf8,
    "deep_nesting": _deep,
    "future_ts": _future,
    "not_a_mapping": _not_a_mapping,
}
