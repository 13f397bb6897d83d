"""A SONiC port's physical layer from STATE_DB (database 6 of the switch's Redis): the speed its
link came up at and its transceiver's diagnostics, as gauges beside the counters.

* ``PORT_TABLE|<port>`` ``speed``: the operational speed in Mb/s, what ``show interfaces status``
  shows while the port is up (sonic-utilities ``scripts/intfutil`` ``port_oper_speed_get``; APPL_DB's
  ``speed`` is the configured one, which the topology takes as what the link should run at).
* ``TRANSCEIVER_DOM_SENSOR|<port>`` and ``TRANSCEIVER_DOM_THRESHOLD|<port>``: what xcvrd reads from
  the module's EEPROM, about once a minute (``optics.sonic_reading``).

These change slowly, so a collector reads them once every ``every_s`` (10 s) and sends the last
reading in between; a STATE_DB that does not answer makes them unknown, never costs the counters.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import redis

from fabricwatch.ingest.optics import GAUGES, optic_gauges, sonic_reading
from fabricwatch.schemas.messages import CounterSpec

STATE_DB = 6
PHY_COLUMNS = [CounterSpec(name, "gauge", 64) for name in ("link_speed_mbps", *GAUGES)]
"""The gauges of a port's physical layer, in this order."""


class PhyReader:
    def __init__(self, client: redis.Redis, every_s: float = 10.0) -> None:
        self.client = client
        self._every_s = every_s
        self._last: tuple[float, tuple[str, ...], list[list[int | None]] | None] | None = None
        self.bad: list[str] = []
        """Ports whose STATE_DB keys were not hashes at the last read."""

    def rows(self, ports: Sequence[str]) -> list[list[int | None]] | None:
        """Per port, ``PHY_COLUMNS``; None when STATE_DB knows none of them. A key that is not a
        hash costs that port's part only (``bad`` names it); a STATE_DB that does not answer
        raises what Redis raises (the caller says it once and goes on without them)."""
        now = time.monotonic()
        if self._last is not None and self._last[1] == tuple(ports) and now - self._last[0] < self._every_s:
            return self._last[2]
        pipe = self.client.pipeline(transaction=False)
        for port in ports:
            pipe.hget(f"PORT_TABLE|{port}", "speed")
            pipe.hgetall(f"TRANSCEIVER_DOM_SENSOR|{port}")
            pipe.hgetall(f"TRANSCEIVER_DOM_THRESHOLD|{port}")
        replies = pipe.execute(raise_on_error=False)
        self.bad = sorted({f"{ports[i // 3]}" for i, r in enumerate(replies) if isinstance(r, Exception)})
        replies = [None if isinstance(r, Exception) else r for r in replies]
        rows = [_row(*replies[3 * i : 3 * i + 3]) for i in range(len(ports))]
        found = rows if any(v is not None for row in rows for v in row) else None
        self._last = (now, tuple(ports), found)
        return found


def _row(speed: bytes | None, sensor: dict | None, threshold: dict | None) -> list[int | None]:
    gauges = optic_gauges(sonic_reading(_text(sensor or {}), _text(threshold or {})))
    return [_speed(speed), *(gauges.get(name) for name in GAUGES)]


def _speed(value: bytes | str | None) -> int | None:
    """Mb/s; "N/A" (a port whose link is down) or garbage is unknown."""
    text = _decoded(value) if value is not None else None
    try:
        speed = float(text) if text else math.nan
    except ValueError:
        return None
    return int(speed) if math.isfinite(speed) and speed > 0 else None


def _text(fields: dict) -> dict[str, str]:
    return {_decoded(k): _decoded(v) for k, v in fields.items()}


def _decoded(value: bytes | str) -> str:
    return value.decode("ascii", "replace") if isinstance(value, bytes) else value
