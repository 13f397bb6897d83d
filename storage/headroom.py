"""What the report and the dashboards rank between the incidents: switch ports and uplink groups by
headroom (from the minute rollup), and ports by how long their queues burst (from the microburst
findings). ``docs/capacity.md``."""

from __future__ import annotations

from dataclasses import dataclass

from fabricwatch.storage.queries import Store


@dataclass(frozen=True)
class Headroom:
    """A switch port's utilisation over a range, from the minute rollup: the busier of its two
    directions each minute, their mean, 99th percentile and peak, and the minutes it spent at or
    above the band's top."""

    device: str
    port: str
    mean: float
    p99: float
    peak: float
    hot_minutes: int
    first_hot: int | None
    """When its first hot minute began (ns), None if it never ran hot."""


def capacity_ranking(
    store: Store, lo: int, hi: int, band_top: float = 0.8, limit: int = 20
) -> list[Headroom]:
    """The switch ports with the least headroom in ``[lo, hi]``, hottest first (by p99, then
    mean): what a capacity plan starts from. A minute's figure is the mean of its polls, so the
    p99 is of minute means: short bursts are the microburst finding's, not this one's."""
    minutes = (
        "SELECT device, port, ts, "
        "greatest(sum(tx_util_sum) / sum(tx_util_n), sum(rx_util_sum) / sum(rx_util_n)) AS u, "
        "greatest(max(tx_util_max), max(rx_util_max)) AS pk FROM rates_1m "
        f"WHERE device_kind = 'switch' AND ts BETWEEN toDateTime({lo // 10**9}, 'UTC') "
        f"AND toDateTime({hi // 10**9}, 'UTC') GROUP BY device, port, ts"
    )
    return _ranked(store, minutes, band_top, limit)


def _ranked(store: Store, minutes: str, band_top: float, limit: int) -> list[Headroom]:
    """Headroom from ``minutes`` (``device``, ``port``, ``ts``, utilisation ``u`` and peak ``pk``
    of each minute), least first."""
    rows = store.query(
        f"SELECT device, port, avg(u), quantile(0.99)(u), max(pk), countIf(u >= {band_top}), "
        f"minIf(toUnixTimestamp(ts), u >= {band_top}) FROM ({minutes}) WHERE isFinite(u) "
        f"GROUP BY device, port ORDER BY quantile(0.99)(u) DESC, avg(u) DESC, device, port LIMIT {int(limit)}"
    )
    return [
        Headroom(d, p, float(m), float(q), float(k), int(n), int(first) * 10**9 if n else None)
        for d, p, m, q, k, n, first in rows
    ]


@dataclass(frozen=True)
class Bursting:
    """A switch port's microburst findings over a range: how many, how long they were open (from
    the first burst to the window's share halving), the largest share of a window's polls that
    burst, the deepest watermark, and the jobs running."""

    device: str
    port: str
    findings: int
    open_s: float
    share: float
    peak_bytes: float
    jobs: tuple[str, ...]


def burst_ranking(store: Store, lo: int, hi: int, limit: int = 20) -> list[Bursting]:
    """The switch ports whose microburst findings were open longest in ``[lo, hi]``, from their
    events (each finding's figures at their largest over its life)."""
    ev = "evidence"
    findings = (
        "SELECT fingerprint, start_ns, argMax(root_device, ts_ns) AS d, argMax(root_port, ts_ns) AS p, "
        "argMax(coalesce(end_ns, ts_ns), ts_ns) AS until, argMax(jobs, ts_ns) AS j, "
        f"max(JSONExtractFloat({ev}, 'most_bursting')) AS share, "
        f"max(JSONExtractFloat({ev}, 'peak_watermark_bytes')) AS peak "
        f"FROM anomaly_events WHERE kind = 'microbursts' AND start_ns <= {hi} "
        f"GROUP BY fingerprint, start_ns HAVING until >= {lo}"
    )
    rows = store.query(
        "SELECT d, p, count(), sum(least(until, "
        f"{hi}) - greatest(start_ns, {lo})) / 1e9 AS s, max(share), max(peak), "
        f"arraySort(groupUniqArrayArray(j)) FROM ({findings}) GROUP BY d, p "
        f"ORDER BY s DESC, d, p LIMIT {int(limit)}"
    )
    return [
        Bursting(d, p, int(n), float(secs), float(share), float(peak), tuple(jobs))
        for d, p, n, secs, share, peak, jobs in rows
    ]


def group_headroom(store: Store, lo: int, hi: int, band_top: float = 0.8, limit: int = 10) -> list[Headroom]:
    """The uplink (ECMP) groups of the latest topology with the least headroom in ``[lo, hi]``: per
    minute, the mean of what their members send over line rate (members of one group share a
    speed), then as ``capacity_ranking``. ``port`` is the group's id."""
    members = (
        "SELECT device, member AS port, group_id FROM topology_ecmp "
        "WHERE topo_ns = (SELECT max(topo_ns) FROM topology_ecmp)"
    )
    minutes = (
        "SELECT r.device AS device, m.group_id AS port, r.ts AS ts, "
        "avg(r.tx_util_sum / r.tx_util_n) AS u, max(r.tx_util_max) AS pk "
        f"FROM rates_1m AS r INNER JOIN ({members}) AS m ON r.device = m.device AND r.port = m.port "
        f"WHERE r.ts BETWEEN toDateTime({lo // 10**9}, 'UTC') AND toDateTime({hi // 10**9}, 'UTC') "
        "GROUP BY device, port, ts"
    )
    return _ranked(store, minutes, band_top, limit)
