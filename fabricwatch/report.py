"""``fabricwatch report``: PNG charts and an HTML index for a time range, read from the ClickHouse
store, for people without Grafana (after a replay, in a post-mortem, attached to a ticket).

It reads the same tables the dashboards do (``rates_raw``, ``anomalies_latest``, ``topology_ecmp``),
so it works on a replay's chdb directory and on production data alike; for a range the raw table no
longer holds (it keeps two days) it reads the finest rollup that has it. The charts:

- one timeline per port of interest (anomaly roots first, then the most paused / busiest ports):
  utilisation, pause time, ECN marks and queue depth, with the anomalies touching the port shaded;
- ECMP member shares per group over time;
- heatmaps of ports x time for transmit utilisation and pause time.

Rates are bucketed so a chart has at most ``max_points`` points whatever the range, each drawn as a
step over its bucket (a peak shows where it happened); matplotlib runs on its Agg backend.
"""

from __future__ import annotations

import html
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates
import matplotlib.pyplot as plt
import numpy as np

from schemas.clickhouse import ROLLUPS
from schemas.messages import PORT_RATE_COLUMNS

DPI = 100
KIND_COLOURS = {
    "pfc_storm": "tab:red",
    "incast": "tab:orange",
    "ecmp_collapse": "tab:purple",
    "outlier": "tab:gray",
}


class Store(Protocol):
    """What the report needs of a store: SQL in, rows out (``streams.clickhouse_backend``)."""

    def query(self, sql: str) -> list[tuple]: ...


@dataclass(frozen=True)
class Incident:
    fingerprint: str
    kind: str
    severity: str
    status: str
    start_ns: int
    end_ns: int
    root_device: str
    root_port: str
    root_group: str
    devices: tuple[str, ...]
    jobs: tuple[str, ...]
    summary: str

    @property
    def root(self) -> str:
        return self.root_group or ":".join(x for x in (self.root_device, self.root_port) if x)


@dataclass(frozen=True)
class Series:
    """One port's bucketed metrics: times (datetime64[ns]) and a column per metric."""

    times: np.ndarray
    columns: dict[str, np.ndarray]


_PORT_METRICS = (
    "tx_util",
    "rx_util",
    "rx_pause_frac",
    "tx_pause_frac",
    "ecn_marked_pps",
    "queue_bytes_max",
    "watermark_bytes_max",
)


def write_report(
    store: Store,
    out_dir: Path,
    start_ns: int | None = None,
    end_ns: int | None = None,
    *,
    max_ports: int = 8,
    max_groups: int = 6,
    heatmap_ports: int = 40,
    max_points: int = 600,
    size_px: tuple[int, int] = (1200, 900),
    resolution: str | None = None,
) -> list[Path]:
    """Write the charts and ``index.html`` into ``out_dir``; returns the files written (index last).

    Without ``start_ns``/``end_ns`` the range is all the rates stored. ``resolution`` forces a table
    (``rates_raw``, ``rates_10s``, ``rates_1m``, ``rates_1h``); by default the finest one with rates in
    the range. Raises ValueError when the range holds no rates (nothing to draw is a mistake worth
    saying, not an empty report)."""
    src = _source(store, start_ns, end_ns, resolution)
    lo, hi = _range(store, src, start_ns, end_ns)
    bucket_ns = _bucket_ns(store, src, lo, hi, max_points)
    out_dir.mkdir(parents=True, exist_ok=True)
    incidents = _incidents(store, lo, hi)
    written: list[Path] = []
    for n, (device, port) in enumerate(_ports_of_interest(store, src, lo, hi, incidents, max_ports), 1):
        path = out_dir / f"port-{n:02d}-{_slug(device)}-{_slug(port)}.png"
        series = _port_series(store, src, device, port, lo, hi, bucket_ns)
        _port_timeline(series, device, port, incidents, path, size_px)
        written.append(path)
    shares = _ecmp_shares(store, src, lo, hi, bucket_ns, max_groups)
    if shares:
        written.append(_ecmp_chart(shares, incidents, out_dir / "ecmp-shares.png", size_px))
    for metric, title, name in (
        ("tx_util", "Transmit utilisation (fraction of line rate)", "heatmap-utilisation.png"),
        ("rx_pause_frac", "Paused by peer (fraction of the interval)", "heatmap-pause.png"),
    ):
        grid = _heatmap_grid(store, src, metric, lo, hi, bucket_ns, heatmap_ports)
        if grid is not None:
            written.append(_heatmap_chart(grid, title, out_dir / name, size_px))
    written.append(_index(out_dir, written, incidents, lo, hi))
    return written


def parse_time(text: str | None) -> int | None:
    """``--start``/``--end``: ISO 8601 (naive means UTC) or integer nanoseconds since the epoch."""
    if text is None:
        return None
    if text.isdigit():
        ns = int(text)
        if ns < 10**17:
            raise ValueError(
                f"{text}: an integer time is in nanoseconds since the epoch; this looks like seconds"
            )
        return ns
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r}: not an ISO 8601 time (2026-01-01T00:02:00) or integer ns") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp()) * 10**9 + when.microsecond * 1000


# -- queries ------------------------------------------------------------------------------------


_PEAK_METRICS = {
    "tx_util",
    "rx_util",
    "rx_pause_frac",
    "tx_pause_frac",
    "queue_bytes_max",
    "watermark_bytes_max",
}
"""Read from a rollup as the bucket's maximum (a 15 s storm must not average away); others as its mean."""


def _source(store: Store, start_ns: int | None, end_ns: int | None, resolution: str | None) -> str:
    """``rates_raw``, or a rollup presented with the raw table's columns (one row per port and bucket)."""
    candidates = ["rates_raw", *ROLLUPS] if resolution is None else [resolution]
    if not set(candidates) <= {"rates_raw", *ROLLUPS}:
        raise ValueError(f"resolution {resolution!r}: one of rates_raw, {', '.join(ROLLUPS)}")
    for table in candidates:
        src = table if table == "rates_raw" else _rollup_source(table, start_ns, end_ns)
        if store.query(f"SELECT count() FROM {src}{_where_ns(start_ns, end_ns)}")[0][0]:
            return src
    return candidates[0]


def _rollup_source(table: str, start_ns: int | None, end_ns: int | None) -> str:
    seconds = ROLLUPS[table][0]
    cols = ", ".join(
        f"max({m}_max) AS {m}" if m in _PEAK_METRICS else f"sum({m}_sum) / sum({m}_n) AS {m}"
        for m in PORT_RATE_COLUMNS
    )
    bounds = []
    if start_ns is not None:
        bounds.append(f"ts >= toDateTime({start_ns // 10**9 - seconds})")
    if end_ns is not None:
        bounds.append(f"ts <= toDateTime({end_ns // 10**9})")
    where = " WHERE " + " AND ".join(bounds) if bounds else ""
    return (
        f"(SELECT ts, toUInt64(toUnixTimestamp(ts)) * 1000000000 AS ts_ns, device, device_kind, port, "
        f"toFloat32({seconds}) AS dt_s, {cols} FROM {table}{where} GROUP BY ts, device, device_kind, port)"
    )


def _range(store: Store, src: str, start_ns: int | None, end_ns: int | None) -> tuple[int, int]:
    where = _where_ns(start_ns, end_ns)
    (row,) = store.query(f"SELECT count(), min(ts_ns), max(ts_ns) FROM {src}{where}")
    if not row[0]:
        raise ValueError(f"no rates stored between {_when(start_ns)} and {_when(end_ns)}")
    lo = start_ns if start_ns is not None else int(row[1])
    hi = end_ns if end_ns is not None else int(row[2])
    return lo, max(hi, lo + 1)


def _where_ns(start_ns: int | None, end_ns: int | None, column: str = "ts_ns") -> str:
    parts = []
    if start_ns is not None:
        parts.append(f"{column} >= {int(start_ns)}")
    if end_ns is not None:
        parts.append(f"{column} <= {int(end_ns)}")
    return " WHERE " + " AND ".join(parts) if parts else ""


def _bucket_ns(store: Store, src: str, lo: int, hi: int, max_points: int) -> int:
    """At least the poll interval (no empty buckets between polls), at most range / max_points."""
    (row,) = store.query(f"SELECT median(dt_s) FROM {src} WHERE ts_ns BETWEEN {lo} AND {hi}")
    poll_ns = int((row[0] or 1.0) * 1e9)
    return max(poll_ns, -(-(hi - lo) // max_points))


def _incidents(store: Store, lo: int, hi: int) -> list[Incident]:
    rows = store.query(
        "SELECT fingerprint, kind, severity, status, start_ns, coalesce(end_ns, ts_ns), root_device, "
        "root_port, root_group, devices, jobs, summary FROM anomalies_latest FINAL "
        f"WHERE start_ns <= {hi} AND coalesce(end_ns, ts_ns) >= {lo} ORDER BY start_ns"
    )
    return [
        Incident(
            r[0], r[1], r[2], r[3], int(r[4]), int(r[5]), r[6], r[7], r[8], tuple(r[9]), tuple(r[10]), r[11]
        )
        for r in rows
    ]


def _ports_of_interest(
    store: Store, src: str, lo: int, hi: int, incidents: list[Incident], limit: int
) -> list[tuple[str, str]]:
    """Roots of the anomalies first (what a post-mortem asks about), then the ports most paused,
    marking ECN or busiest in the range."""
    chosen: list[tuple[str, str]] = []
    for inc in incidents:
        if inc.root_device and inc.root_port and (inc.root_device, inc.root_port) not in chosen:
            chosen.append((inc.root_device, inc.root_port))
    rows = store.query(
        f"SELECT device, port FROM {src} "
        f"WHERE ts_ns BETWEEN {lo} AND {hi} GROUP BY device, port "
        "ORDER BY max(coalesce(rx_pause_frac, 0)) DESC, max(coalesce(ecn_marked_pps, 0)) DESC, "
        f"max(coalesce(tx_util, 0)) DESC, device, port LIMIT {int(limit) * 2}"
    )
    chosen += [(d, p) for d, p in rows if (d, p) not in chosen]
    return chosen[:limit]


def _port_series(store: Store, src: str, device: str, port: str, lo: int, hi: int, bucket_ns: int) -> Series:
    aggs = ", ".join(f"max({m})" if "bytes" in m or "frac" in m else f"avg({m})" for m in _PORT_METRICS)
    rows = store.query(
        f"SELECT intDiv(ts_ns, {bucket_ns}) * {bucket_ns} AS t, {aggs} FROM {src} "
        f"WHERE device = {_lit(device)} AND port = {_lit(port)} AND ts_ns BETWEEN {lo} AND {hi} "
        "GROUP BY t ORDER BY t"
    )
    return _series(rows, _PORT_METRICS)


def _series(rows: list[tuple], names: tuple[str, ...]) -> Series:
    times = np.array([int(r[0]) for r in rows], dtype="datetime64[ns]")
    cols = {
        name: np.array([np.nan if r[i + 1] is None else float(r[i + 1]) for r in rows])
        for i, name in enumerate(names)
    }
    return Series(times, cols)


def _ecmp_shares(
    store: Store, src: str, lo: int, hi: int, bucket_ns: int, max_groups: int
) -> dict[str, dict[str, Series]]:
    """Group → member → share of the group's transmitted bits per bucket."""
    rows = store.query(
        f"""
SELECT group_id, member, t, bits / nullIf(sum(bits) OVER (PARTITION BY group_id, t), 0) AS share
FROM (
    SELECT e.group_id AS group_id, r.port AS member, intDiv(r.ts_ns, {bucket_ns}) * {bucket_ns} AS t,
           sum(r.tx_bps * r.dt_s) AS bits
    FROM {src} AS r
    INNER JOIN (
        SELECT group_id, device, member FROM topology_ecmp
        WHERE topo_ns = (SELECT max(topo_ns) FROM topology_ecmp)
    ) AS e ON r.device = e.device AND r.port = e.member
    WHERE r.ts_ns BETWEEN {lo} AND {hi}
    GROUP BY group_id, member, t
)
ORDER BY group_id, member, t
"""
    )
    grouped: dict[str, dict[str, list[tuple]]] = defaultdict(lambda: defaultdict(list))
    for group, member, t, share in rows:
        grouped[group][member].append((t, share))
    ranked = sorted(grouped, key=lambda g: (-_imbalance(grouped[g]), g))[:max_groups]
    return {g: {m: _series(pts, ("share",)) for m, pts in sorted(grouped[g].items())} for g in sorted(ranked)}


def _imbalance(members: dict[str, list[tuple]]) -> float:
    """Peak share over the fair share: the groups that collapsed come first."""
    peak = max((s for pts in members.values() for _, s in pts if s is not None), default=0.0)
    return peak * len(members)


@dataclass(frozen=True)
class _Grid:
    rows: list[str]
    times: np.ndarray  # bucket starts
    bucket_ns: int
    values: np.ndarray  # rows x times


def _heatmap_grid(
    store: Store, src: str, metric: str, lo: int, hi: int, bucket_ns: int, top: int
) -> _Grid | None:
    rows = store.query(
        f"""
SELECT concat(device, ':', port) AS name, intDiv(ts_ns, {bucket_ns}) * {bucket_ns} AS t, max({metric})
FROM {src}
WHERE ts_ns BETWEEN {lo} AND {hi} AND (device, port) IN (
    SELECT device, port FROM {src} WHERE ts_ns BETWEEN {lo} AND {hi}
    GROUP BY device, port HAVING max({metric}) > 0 ORDER BY max({metric}) DESC, device, port LIMIT {int(top)})
GROUP BY name, t ORDER BY name, t
"""
    )
    if not rows:
        return None
    names = sorted({r[0] for r in rows})
    times = np.arange(lo // bucket_ns * bucket_ns, hi + 1, bucket_ns, dtype=np.int64)
    grid = np.full((len(names), len(times)), np.nan)
    row_of = {n: i for i, n in enumerate(names)}
    for name, t, v in rows:
        col = (int(t) - int(times[0])) // bucket_ns
        if 0 <= col < len(times) and v is not None:
            grid[row_of[name], col] = float(v)
    return _Grid(names, times.astype("datetime64[ns]"), bucket_ns, grid)


def _lit(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


# -- charts ---------------------------------------------------------------------------------------


def _figure(size_px: tuple[int, int], rows: int) -> tuple[Any, Any]:
    fig, axes = plt.subplots(rows, 1, figsize=(size_px[0] / DPI, size_px[1] / DPI), dpi=DPI, sharex=True)
    return fig, np.atleast_1d(axes)


def _save(fig: Any, path: Path) -> Path:
    """Saved at exactly the figure's pixel size (no tight bounding box: the size is a promise)."""
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _time_axis(ax: Any) -> None:
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=UTC))
    ax.set_xlabel("time (UTC)")


def _shade(ax: Any, incidents: list[Incident], touches: Any) -> list[Incident]:
    shown = []
    for inc in incidents:
        if touches(inc):
            ax.axvspan(
                np.datetime64(inc.start_ns, "ns"),
                np.datetime64(inc.end_ns, "ns"),
                color=KIND_COLOURS.get(inc.kind, "tab:gray"),
                alpha=0.15,
                lw=0,
            )
            shown.append(inc)
    return shown


def _port_timeline(
    s: Series, device: str, port: str, incidents: list[Incident], path: Path, size_px: tuple[int, int]
) -> Path:
    fig, axes = _figure(size_px, 4)
    c = s.columns
    panels = (
        ("utilisation", (("tx_util", "tx"), ("rx_util", "rx")), 100.0, "%"),
        (
            "pause time",
            (("rx_pause_frac", "paused by peer (rx)"), ("tx_pause_frac", "pausing peer (tx)")),
            100.0,
            "%",
        ),
        ("ECN marks", (("ecn_marked_pps", "ECN-marked"),), 1.0, "packets/s"),
        ("queue", (("queue_bytes_max", "occupancy"), ("watermark_bytes_max", "watermark")), 1e-3, "KB"),
    )

    def touches(inc: Incident) -> bool:
        return (
            (inc.root_device, inc.root_port) == (device, port)
            or device in inc.devices
            or inc.root_device == device
        )

    shown: list[Incident] = []
    for ax, (title, lines, scale, unit) in zip(axes, panels, strict=True):
        for name, label in lines:
            values = c[name] * scale
            if np.isfinite(values).any():
                ax.plot(s.times, values, label=label, lw=1.2, drawstyle="steps-post")
        if not ax.lines:
            ax.text(
                0.5, 0.5, "not reported by this device", transform=ax.transAxes, ha="center", color="gray"
            )
        ax.set_ylabel(f"{title}\n({unit})")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper right", fontsize="small")
        shown = _shade(ax, incidents, touches)
    title = f"{device}:{port}"
    if shown:
        title += "  —  " + "; ".join(f"{i.kind} ({i.severity}) root {i.root}" for i in shown[:3])
    axes[0].set_title(title, fontsize="medium")
    _time_axis(axes[-1])
    fig.tight_layout()
    return _save(fig, path)


def _ecmp_chart(shares: dict[str, dict[str, Series]], incidents: list[Incident], path: Path, size_px) -> Path:
    fig, axes = _figure(size_px, len(shares))
    for ax, (group, members) in zip(axes, shares.items(), strict=True):
        for member, s in members.items():
            ax.plot(s.times, s.columns["share"] * 100.0, label=member, lw=1.2, drawstyle="steps-post")
        fair = 100.0 / len(members)
        ax.axhline(fair, color="black", lw=0.8, ls="--")
        ax.axhspan(fair * 0.75, fair * 1.25, color="tab:green", alpha=0.08, lw=0)
        _shade(ax, incidents, lambda inc, g=group: inc.kind == "ecmp_collapse" and inc.root_group == g)
        ax.set_ylabel(f"{group}\nshare (%)", fontsize="small")
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize="x-small", ncol=min(len(members), 4))
    axes[0].set_title(
        "ECMP member shares of group traffic (dashed: fair share; band: ±25%)", fontsize="medium"
    )
    _time_axis(axes[-1])
    fig.tight_layout()
    return _save(fig, path)


def _heatmap_chart(grid: _Grid, title: str, path: Path, size_px: tuple[int, int]) -> Path:
    fig, (ax,) = _figure(size_px, 1)
    t0 = mdates.date2num(grid.times[0])
    t1 = mdates.date2num(grid.times[-1] + np.timedelta64(grid.bucket_ns, "ns"))
    image = ax.imshow(
        np.ma.masked_invalid(grid.values),
        aspect="auto",
        interpolation="nearest",
        cmap="inferno",
        extent=(t0, t1, len(grid.rows) - 0.5, -0.5),
        vmin=0,
    )
    ax.xaxis_date()
    ax.set_yticks(range(len(grid.rows)))
    ax.set_yticklabels(grid.rows, fontsize=max(4, min(9, 400 // max(len(grid.rows), 1))))
    ax.set_title(title, fontsize="medium")
    fig.colorbar(image, ax=ax, fraction=0.03, pad=0.01)
    _time_axis(ax)
    fig.tight_layout()
    return _save(fig, path)


# -- index ---------------------------------------------------------------------------------------


def _index(out_dir: Path, charts: list[Path], incidents: list[Incident], lo: int, hi: int) -> Path:
    rows = "\n".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(str(v))}</td>"
            for v in (
                _when(i.start_ns),
                _when(i.end_ns),
                i.kind,
                i.severity,
                i.status,
                i.root,
                ", ".join(i.jobs),
                i.summary,
            )
        )
        + "</tr>"
        for i in incidents
    )
    figures = "\n".join(
        f'<h3>{html.escape(p.stem)}</h3>\n<a href="{html.escape(p.name)}"><img src="{html.escape(p.name)}" '
        f'alt="{html.escape(p.stem)}" width="900"></a>'
        for p in charts
    )
    text = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>fabricwatch report {_when(lo)} – {_when(hi)}</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 6px;font-size:small}}</style></head>
<body>
<h1>fabricwatch report</h1>
<p>{_when(lo)} – {_when(hi)} (UTC). {len(incidents)} incidents; shaded in the charts by kind:
pfc_storm red, incast orange, ecmp_collapse purple, outlier grey.</p>
<h2>Incidents</h2>
<table><tr><th>start</th><th>end</th><th>kind</th><th>severity</th><th>status</th><th>root</th><th>jobs</th>
<th>summary</th></tr>
{rows}
</table>
<h2>Charts</h2>
{figures}
</body></html>
"""
    path = out_dir / "index.html"
    path.write_text(text)
    return path


def _when(ts_ns: int | None) -> str:
    if ts_ns is None:
        return "(open)"
    return datetime.fromtimestamp(ts_ns / 1e9, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in text).strip("_") or "x"
