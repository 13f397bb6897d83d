"""HMAC-SHA256 signatures over webhook bodies, with the time in the signed material.

The sender signs ``<timestamp>.<body>`` (the timestamp is Unix seconds, also sent in
``X-Fabricwatch-Timestamp``), so a captured request cannot be replayed later: the receiver rejects
a timestamp older than its tolerance, and cannot alter the timestamp without breaking the
signature. Each retry is signed afresh (new timestamp, same body and idempotency key).
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-Fabricwatch-Signature"
TIMESTAMP_HEADER = "X-Fabricwatch-Timestamp"
DEFAULT_TOLERANCE_S = 300


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The signature header's value: ``sha256=<hex>``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def verify(
    secret: str,
    body: bytes,
    signature: str,
    timestamp: str,
    now: float,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
) -> bool:
    """What a receiver does: recompute in constant time, and refuse stale or future timestamps."""
    try:
        ts = int(timestamp)
    except ValueError:
        return False
    if abs(now - ts) > tolerance_s:
        return False
    return hmac.compare_digest(sign(secret, ts, body), signature)
