"""A SONiC switch's ECN marking curves, from its CONFIG_DB, for the incast detector's band.

``WRED_PROFILE|<name>`` holds a profile (``green_min_threshold`` and ``green_max_threshold`` in
bytes, ``green_drop_probability`` in percent, and ``ecn``: ``ecn_none`` drops instead of marking);
``QUEUE|<ports>|<queues>`` points a queue at one (``wred_profile``, bare or as the older
``[WRED_PROFILE|name]`` reference). ``<ports>`` may list several ports separated by commas and
``<queues>`` may be a range (``3-4``), as ``config qos reload`` writes them. Table and field names:
sonic-utilities' ``tests/mock_tables/config_db.json`` and ``scripts/ecnconfig``. Green is the colour
RoCE traffic carries (nothing on a lossless priority is re-coloured).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import redis

from fabricwatch.ingest.sonic.switch import decoded
from fabricwatch.schemas.messages import QueueProfile


def read_queue_profiles(
    config_db: redis.Redis, device: str, warn: Callable[[str], None] = lambda _: None
) -> list[QueueProfile]:
    """Every queue's ECN marking curve on ``device``; queues without a marking WRED profile are left
    out. A malformed profile or queue entry is skipped and named through ``warn``."""
    profile_keys = sorted(decoded(k) for k in config_db.scan_iter(match="WRED_PROFILE|*", count=1000))
    queue_keys = sorted(decoded(k) for k in config_db.scan_iter(match="QUEUE|*", count=1000))
    pipe = config_db.pipeline(transaction=False)
    for key in profile_keys:
        pipe.hgetall(key)
    for key in queue_keys:
        pipe.hget(key, "wred_profile")
    replies = pipe.execute()
    curves: dict[str, tuple[float, float, float] | None] = {}
    for key, entry in zip(profile_keys, replies[: len(profile_keys)], strict=True):
        name = key.partition("|")[2]
        try:
            curves[name] = _curve({decoded(k): decoded(v) for k, v in entry.items()})
        except ValueError as exc:
            warn(f"{device}: CONFIG_DB {key}: {exc}; queues using it get the configured thresholds")
    profiles = []
    for key, ref in zip(queue_keys, replies[len(profile_keys) :], strict=True):
        if not ref:
            continue
        curve = curves.get(_profile_name(decoded(ref)))
        if curve is None:
            continue
        try:
            cells = _queue_cells(key)
        except ValueError as exc:
            warn(f"{device}: CONFIG_DB {key}: {exc}")
            continue
        kmin, kmax, pmax = curve
        profiles += [QueueProfile(device, kmin, kmax, pmax, port=port, queue=q) for port, q in cells]
    return profiles


def _curve(entry: Mapping[str, str]) -> tuple[float, float, float] | None:
    """(Kmin bytes, Kmax bytes, Pmax share) of a profile that marks; None for one that only drops."""
    if entry.get("ecn", "ecn_none") in ("ecn_none", ""):
        return None
    try:
        kmin = float(entry["green_min_threshold"])
        kmax = float(entry["green_max_threshold"])
        pmax = float(entry.get("green_drop_probability", "100")) / 100
    except KeyError as exc:
        raise ValueError(f"no {exc.args[0]}") from None
    if not 0 <= kmin < kmax or not 0 < pmax <= 1:
        raise ValueError(f"thresholds {kmin:g}-{kmax:g} bytes at {pmax:.0%} are not a marking curve")
    return kmin, kmax, pmax


def _profile_name(ref: str) -> str:
    return ref.strip("[]").removeprefix("WRED_PROFILE|")


def _queue_cells(key: str) -> list[tuple[str, int]]:
    """``QUEUE|Ethernet0,Ethernet4|3-4`` -> the four (port, queue) pairs."""
    parts = key.split("|")
    if len(parts) != 3:
        raise ValueError("expected QUEUE|<ports>|<queues>")
    first, _, last = parts[2].partition("-")
    if not first.isdigit() or (last and not last.isdigit()):
        raise ValueError(f"queue {parts[2]!r} is not a number or a range")
    queues = range(int(first), int(last or first) + 1)
    return [(port, q) for port in parts[1].split(",") if port for q in queues]
