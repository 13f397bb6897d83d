"""A detector's per-device window as bytes and back, so that the worker that reads a device next
(after a restart, or a rebalance) carries on with the window the last one kept.

The capacity and microburst detectors judge a device over minutes: without its window, a worker
that takes a device over starts from nothing, cannot judge for half a window, and the findings it
had open resolve and fire again. Their windows are dataclasses of numpy arrays and scalars; this
packs one into compressed msgpack (a switch's windows are mostly zeros and NaN) and unpacks it
into the same dataclass. ``WindowedDetector`` is what stage 1 asks of such a detector.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import msgspec
import numpy as np

if TYPE_CHECKING:
    from fabricwatch.detectors.spec import Poll
    from fabricwatch.schemas.messages import Symptom

_T = TypeVar("_T")
_W = TypeVar("_W")
_ARRAY = "__ndarray__"


class WindowError(ValueError):
    """A window that does not unpack into this build's window (another build's, or damaged)."""


class DeviceWindows(Generic[_W]):
    """What the capacity and microburst detectors share: per device a window of ``window_s`` kept
    as ``bucket_s`` sums (a dataclass of ``window_cls`` with an ``active`` array: the rows whose
    finding is open), and the window's move to another worker (``WindowedDetector``).

    Each is a paced recorder (``spec.Recorder``): every poll of its devices, calm or not, goes to
    ``record`` (a few array additions into the current bucket, judging the window when a bucket
    closes: ``_judged``), and ``update`` is asked only when the device is due: a judgment not said
    yet, or a finding open, which is said at every poll as the other detectors say theirs (stage 2
    reads a symptom's interval from its sayings: said every 10 s, a cleared finding waited 25 s to
    resolve, found by ``test_bursts_report.py``). A device with nothing open costs its record."""

    def __init__(self, window_cls: type[_W], window_s: float, bucket_s: float) -> None:
        self._window_cls = window_cls
        self._bucket_s = bucket_s
        self._buckets = max(1, round(window_s / bucket_s))
        self._bucket_ns = int(bucket_s * 1_000_000_000)
        self._devices: dict[str, _W] = {}
        self.every_s = bucket_s
        self._cleared: dict[str, np.ndarray] = {}
        """Per device judged and not said yet: the rows that cleared in the judgment."""

    def open(self, device: str) -> bool:
        w = self._devices.get(device)
        return bool(w is not None and w.active.any())  # type: ignore[attr-defined]

    def due(self, device: str, ts_ns: int) -> bool:
        return device in self._cleared or self.open(device)

    def next_due_ns(self, device: str) -> int | None:
        """The next bucket's close; at once while a judgment is not said yet or a finding is open."""
        w = self._devices.get(device)
        if w is None:
            return None
        if device in self._cleared or self.open(device):
            return 0
        return (w.bucket + 1) * self._bucket_ns  # type: ignore[attr-defined]

    def update(self, poll: Poll) -> list[Symptom]:
        """The device's open findings, and those that cleared since it was last said."""
        device, ts_ns = poll.frame.device, poll.frame.ts_ns
        w = self._devices.get(device)
        if w is None:
            return []
        cleared = self._cleared.pop(device, None)
        if cleared is None or cleared.shape != w.active.shape:  # type: ignore[attr-defined]
            cleared = np.zeros(w.active.shape, dtype=bool)  # type: ignore[attr-defined]
        return self._symptoms(device, ts_ns, w, cleared)

    def _judged(self, device: str, cleared: np.ndarray) -> None:
        """A bucket closed and the window was judged: said by this very poll's ``update`` (due)."""
        self._cleared[device] = cleared

    def _symptoms(self, device: str, ts_ns: int, w: _W, cleared: np.ndarray) -> list[Symptom]:
        """The symptoms of the rows open in ``w``, and of the rows ``cleared``."""
        raise NotImplementedError

    def window_state(self, device: str) -> bytes | None:
        w = self._devices.get(device)
        return None if w is None else pack(w, bucket_s=self._bucket_s, buckets=self._buckets)

    def restore_window(self, device: str, state: bytes) -> None:
        self._devices[device] = unpack(
            self._window_cls, state, bucket_s=self._bucket_s, buckets=self._buckets
        )

    def drop_window(self, device: str) -> None:
        self._devices.pop(device, None)
        self._cleared.pop(device, None)


def window_delay(section: str) -> Any:
    """The delay bound of a finding judged by ``DeviceWindows``: the window is whole buckets, so
    it trails the traffic by up to a bucket and is judged at the next bucket's close; a window,
    two buckets and a poll after the traffic began. ``section``: its detector's config section."""

    def bound(poll_s: float, config: Any, severity: str) -> float:
        own = getattr(config, section)
        return own.window_s + 2 * own.bucket_s + poll_s

    return bound


class WindowedDetector(Protocol):
    def window_state(self, device: str) -> bytes | None:
        """The device's window, or None if it has none."""

    def restore_window(self, device: str, state: bytes) -> None:
        """Take the device's window; raise ``WindowError`` if it is not one this detector keeps."""

    def drop_window(self, device: str) -> None:
        """Forget the device's window: another worker reads the device now, and keeps it."""


def pack(window: Any, **settings: float) -> bytes:
    """``window`` (a dataclass instance) and the ``settings`` it was kept under (a bucket's length,
    the number of buckets: a window kept otherwise is not this detector's)."""
    fields = {f.name: _plain(getattr(window, f.name)) for f in dataclasses.fields(window)}
    return zlib.compress(msgspec.msgpack.encode({"settings": settings, "fields": fields}))


def unpack(cls: type[_T], state: bytes, **settings: float) -> _T:
    """The ``cls`` packed in ``state``, if it was kept under the same ``settings``."""
    try:
        doc = msgspec.msgpack.decode(zlib.decompress(state))
        if doc["settings"] != settings:
            raise WindowError(f"kept under {doc['settings']}, not {settings}")
        return cls(**{name: _typed(value) for name, value in doc["fields"].items()})
    except WindowError:
        raise
    except (zlib.error, msgspec.DecodeError, KeyError, TypeError, ValueError) as exc:
        raise WindowError(f"not a {cls.__name__}: {exc}") from None


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return {_ARRAY: [value.dtype.str, list(value.shape), value.ravel().tolist()]}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return list(value)
    return value


def _typed(value: Any) -> Any:
    if isinstance(value, dict) and _ARRAY in value:
        dtype, shape, data = value[_ARRAY]
        return np.array(data, dtype=np.dtype(dtype)).reshape(shape)
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return tuple(value)
    return value
