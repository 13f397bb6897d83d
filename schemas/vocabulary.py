"""The canonical counter vocabulary: names, kinds and physical rate limits, read from data tables.

Vendors disagree and rename counters between releases, so both the vocabulary and the vendor
mappings are CSV files under ``schemas/data``: adding a driver's names is a data change, not code.
``max_rate`` is the largest rate per second the physics allows (2 Tb/s of line rate, minimum-size
frames, a million microseconds per second); the rate engine treats anything above it as impossible
and uses it to tell a wrap from a reset. The RDMA counters a NIC keeps (CNPs, ECN marks, receive
drops, sequence errors: 32-bit on mlx5) are bounded by the fastest RoCE NIC instead, 800 Gb/s of
84-byte minimum packets on the wire (1.19e9/s): a lone reset of such a counter then cannot pass
for a wrap unless polls are more than 3.6 s apart.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

Scope = Literal["port", "priority", "queue"]


@dataclass(frozen=True)
class CounterDef:
    name: str
    kind: str
    scope: Scope
    unit: str
    max_rate: float
    description: str


def _data_rows(filename: str) -> list[dict[str, str]]:
    text = resources.files("fabricwatch.schemas").joinpath("data", filename).read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    return list(csv.DictReader(lines))


@cache
def canonical() -> dict[str, CounterDef]:
    """Canonical counters by name."""
    defs = {}
    for row in _data_rows("counters.csv"):
        defs[row["name"]] = CounterDef(
            name=row["name"],
            kind=row["kind"],
            scope=row["scope"],  # type: ignore[arg-type]
            unit=row["unit"],
            max_rate=float(row["max_rate"]) if row["max_rate"] else math.inf,
            description=row["description"],
        )
    return defs


def max_rate(name: str) -> float:
    """Physical upper bound of the per-second rate of a counter; infinity for unknown names."""
    d = canonical().get(name)
    return d.max_rate if d else math.inf
