"""Evidence numbers for symptoms and anomalies: rounded, and only the ones that are known.

A rate can be unknown (NaN) after a reset or a missing value; JSON has no NaN, and "unknown" is
better said by leaving the number out than by writing a zero that reads as a measurement.
"""

from __future__ import annotations

import math


def evidence(digits: int = 4, **values: float | int | str) -> dict[str, float | int | str]:
    out: dict[str, float | int | str] = {}
    for key, v in values.items():
        if isinstance(v, str):
            out[key] = v
            continue
        f = float(v)
        if math.isfinite(f):
            out[key] = int(f) if isinstance(v, int) else round(f, digits)
    return out
