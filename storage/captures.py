"""The burst captures a range holds (``burst_profiles``), each with the incident that asked for it:
what the report shows of a host's traffic per millisecond beside the poll-rate view."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fabricwatch.storage.queries import Store


@dataclass(frozen=True)
class Captured:
    """One capture: where and when, why (``incident``: the kind and root of the incident that
    asked for it, empty when asked for by hand), and per direction its figures and every bin's rate."""

    host: str
    netdev: str
    start_ns: int
    incident: str
    line_Bps: float
    bin_s: float
    peak: dict[str, float]
    p99: dict[str, float]
    mean: dict[str, float]
    hot_s: dict[str, float]
    bursts: dict[str, int]
    per_bin: dict[str, np.ndarray]
    ecn_marked: int | None
    """ECN-marked packets received over the capture, CNPs sent (None: no RDMA port read)."""
    cnp_sent: int | None


WHY_SQL = (
    "SELECT fingerprint, any(kind) AS kind, any(root_device) AS d, any(root_port) AS p "
    "FROM anomalies_latest GROUP BY fingerprint"
)
"""Each incident's kind and root, to join a capture's ``trigger`` with (the report and the
``fw-capacity`` dashboard read the same)."""
ASKED_BY_SQL = "if(c.trigger = '', '', concat(a.kind, ' at ', a.d, if(a.p = '', '', concat(' ', a.p))))"
"""What asked for capture ``c``: the incident ``a`` (``WHY_SQL``) by kind and root, empty by hand."""


def captures(store: Store, lo: int, hi: int, limit: int = 8) -> list[Captured]:
    """The newest ``limit`` captures begun in ``[lo, hi]``, oldest first."""
    rows = store.query(
        f"SELECT c.host, c.netdev, c.start_ns, {ASKED_BY_SQL}, c.line_Bps, c.bin_s, "
        "c.rx_peak_Bps, c.tx_peak_Bps, c.rx_p99_Bps, c.tx_p99_Bps, c.rx_mean_Bps, c.tx_mean_Bps, "
        "c.rx_hot_s, c.tx_hot_s, c.rx_bursts, c.tx_bursts, c.rx_per_bin_Bps, c.tx_per_bin_Bps, "
        "c.ecn_marked_packets, c.cnp_sent "
        f"FROM (SELECT DISTINCT * FROM burst_profiles WHERE start_ns BETWEEN {lo} AND {hi}) AS c "
        f"LEFT JOIN ({WHY_SQL}) AS a ON c.trigger = a.fingerprint "
        f"ORDER BY c.start_ns DESC LIMIT {int(limit)}"
    )
    out = []
    for r in reversed(rows):
        host, netdev, start, incident, line, bin_s = r[:6]
        pairs = [dict(zip(("rx", "tx"), r[i : i + 2], strict=True)) for i in range(6, 18, 2)]
        peak, p99, mean, hot, bursts, per_bin = pairs
        out.append(
            Captured(
                host,
                netdev,
                int(start),
                incident or "",
                float(line),
                float(bin_s),
                peak,
                p99,
                mean,
                hot,
                {k: int(v) for k, v in bursts.items()},
                {k: np.asarray(v, dtype=np.float64) for k, v in per_bin.items()},
                None if r[18] is None else int(r[18]),
                None if r[19] is None else int(r[19]),
            )
        )
    return out
