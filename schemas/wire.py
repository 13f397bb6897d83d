"""What every wire message shares: its schema version and a sane time stamp."""

from __future__ import annotations

SCHEMA_VERSION = 1


def check_stamp(ts_ns: int) -> None:
    """Refuse a stamp that cannot be a time (nanoseconds since the epoch)."""
    if ts_ns <= 0:
        raise ValueError("ts_ns must be a positive integer of nanoseconds since the epoch")
