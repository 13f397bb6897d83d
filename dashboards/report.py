"""``fabricwatch report``: PNG charts and an HTML index for a time range, read from the ClickHouse
store, for people without Grafana (after a replay, in a post-mortem, attached to a ticket).

It reads the same tables the dashboards do (``rates_raw``, ``anomalies_latest``, ``topology_ecmp``),
so it works on a replay's chdb directory and on production data alike; for a range the raw table no
longer holds (it keeps two days) it reads the finest rollup that has it. The charts:

- one timeline per port of interest (anomaly roots first, then the most paused / busiest ports):
  utilisation, pause time, ECN marks and queue depth, with the anomalies touching the port shaded;
- ECMP member shares per group over time;
- heatmaps of ports x time for transmit utilisation and pause time;
- per job (the ones that moved the most bytes): its collectives over time above the leaf ports its
  hosts are cabled to (utilisation, pause, ECN, queue), anomalies shaded on both, so an incident
  shows which collective was running when it began; where its calls are timed, their median bus
  bandwidth and call time per collective and message size in between; and its host-pair heat
  map, the connections its communication graphs open from host to host;
- in the incidents table, what each fabric incident cost the jobs it names (the bus bandwidth of
  their calls while it was open against the minute before).

Rates are bucketed so a chart has at most ``max_points`` points whatever the range, each drawn as a
step over its bucket (a peak shows where it happened); matplotlib runs on its Agg backend.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates
import numpy as np

from fabricwatch.dashboards.capture_report import capture_chart, capture_table
from fabricwatch.dashboards.charts import figure, save, shade, time_axis
from fabricwatch.dashboards.rhythm_report import rhythm_chart, rhythm_table
from fabricwatch.detectors.job_stage import JOB_KINDS
from fabricwatch.schemas.bandwidth import bucket_name
from fabricwatch.storage import headroom, queries
from fabricwatch.storage.captures import captures
from fabricwatch.storage.job_rhythm import job_rhythms
from fabricwatch.storage.queries import Grid, Incident, Series, Store, when

MAX_RHYTHM_JOBS = 10
RHYTHM_BUCKET_NS = 30_000_000_000
"""The rhythm detector judges a NIC every 30 s (``rhythm.every_s``): a point per judgment."""


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
    max_jobs: int = 4,
    size_px: tuple[int, int] = (1200, 900),
    resolution: str | None = None,
    on_chart: Callable[[Path], None] | None = None,
) -> list[Path]:
    """Write the charts and ``index.html`` into ``out_dir``; returns the files written (index last).

    Without ``start_ns``/``end_ns`` the range is all the rates stored. ``resolution`` forces a table
    (``rates_raw``, ``rates_10s``, ``rates_1m``, ``rates_1h``); by default the finest one with rates in
    the range. ``on_chart`` gets each chart as it is written (a person waits: a large store takes
    a while). Raises ValueError when the range holds no rates (nothing to draw is a mistake worth
    saying, not an empty report)."""
    src = queries.rates_source(store, start_ns, end_ns, resolution)
    lo, hi = queries.time_range(store, src, start_ns, end_ns)
    bucket_ns = queries.bucket_ns(store, src, lo, hi, max_points)
    out_dir.mkdir(parents=True, exist_ok=True)
    incidents = queries.incidents(store, lo, hi)
    written: list[Path] = []

    def wrote(path: Path) -> None:
        written.append(path)
        if on_chart is not None:
            on_chart(path)

    ports = queries.ports_of_interest(store, src, lo, hi, incidents, max_ports)
    for n, (device, port) in enumerate(ports, 1):
        path = out_dir / f"port-{n:02d}-{_slug(device)}-{_slug(port)}.png"
        series = queries.port_series(store, src, device, port, lo, hi, bucket_ns)
        _port_timeline(series, device, port, incidents, path, size_px)
        wrote(path)
    shares = queries.ecmp_shares(store, src, lo, hi, bucket_ns, max_groups)
    if shares:
        wrote(_ecmp_chart(shares, incidents, out_dir / "ecmp-shares.png", size_px))
    for metric, title, name in (
        ("tx_util", "Transmit utilisation (fraction of line rate)", "heatmap-utilisation.png"),
        ("rx_pause_frac", "Paused by peer (fraction of the interval)", "heatmap-pause.png"),
    ):
        grid = queries.heatmap_grid(store, src, metric, lo, hi, bucket_ns, heatmap_ports)
        if grid is not None:
            wrote(_heatmap_chart(grid, title, out_dir / name, size_px))
    jobs = queries.jobs_in_range(store, lo, hi, max_jobs)
    for job in jobs:
        phases = queries.job_phases(store, job, lo, hi)
        hosts = {h for ph in phases for h in ph.hosts}
        roots = {(i.root_device, i.root_port) for i in incidents if job in i.jobs}
        ports = sorted(queries.host_ports(store, hosts), key=lambda p: (p not in roots, p))[:max_ports]
        series = {p: queries.port_series(store, src, *p, lo, hi, bucket_ns) for p in ports}
        calls = queries.job_calls(store, job, lo, hi, bucket_ns)
        path = out_dir / f"job-{_slug(job)}-timeline.png"
        wrote(_job_timeline(job, phases, calls, series, incidents, path, size_px))
        pairs = queries.host_pairs(store, job)
        if pairs:
            wrote(_pairs_chart(job, pairs, out_dir / f"job-{_slug(job)}-host-pairs.png", size_px))
    costs = {
        (i.fingerprint, i.start_ns): queries.job_costs(store, i)
        for i in incidents
        if i.jobs and i.kind not in JOB_KINDS
    }
    rhythms = job_rhythms(
        store, queries.jobs_in_range(store, lo, hi, MAX_RHYTHM_JOBS), lo, hi, RHYTHM_BUCKET_NS
    )
    if rhythms:
        wrote(rhythm_chart(rhythms, incidents, out_dir / "rhythm.png", size_px))
    taken = captures(store, lo, hi)
    for n, c in enumerate(taken, 1):
        wrote(capture_chart(c, out_dir / f"capture-{n:02d}-{_slug(c.host)}-{_slug(c.netdev)}.png", size_px))
    sections = (
        _steps_table(queries.job_steps(store, jobs, lo, hi))
        + rhythm_table(rhythms)
        + _headroom_table(headroom.capacity_ranking(store, lo, hi), headroom.group_headroom(store, lo, hi))
        + _bursts_table(headroom.burst_ranking(store, lo, hi))
        + capture_table(taken)
    )
    written.append(_index(out_dir, written, incidents, costs, sections, lo, hi))
    return written


# -- charts ---------------------------------------------------------------------------------------


def _port_timeline(
    s: Series, device: str, port: str, incidents: list[Incident], path: Path, size_px: tuple[int, int]
) -> Path:
    fig, axes = figure(size_px, 4)
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
        shown = shade(ax, incidents, touches)
    title = f"{device}:{port}"
    if shown:
        title += "  —  " + "; ".join(f"{i.kind} ({i.severity}) root {i.root}" for i in shown[:3])
    axes[0].set_title(title, fontsize="medium")
    time_axis(axes[-1])
    fig.tight_layout()
    return save(fig, path)


def _ecmp_chart(shares: dict[str, dict[str, Series]], incidents: list[Incident], path: Path, size_px) -> Path:
    fig, axes = figure(size_px, len(shares))
    for ax, (group, members) in zip(axes, shares.items(), strict=True):
        for member, s in members.items():
            ax.plot(s.times, s.columns["share"] * 100.0, label=member, lw=1.2, drawstyle="steps-post")
        fair = 100.0 / len(members)
        ax.axhline(fair, color="black", lw=0.8, ls="--")
        ax.axhspan(fair * 0.75, fair * 1.25, color="tab:green", alpha=0.08, lw=0)
        shade(ax, incidents, lambda inc, g=group: inc.kind == "ecmp_collapse" and inc.root_group == g)
        ax.set_ylabel(f"{group}\nshare (%)", fontsize="small")
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize="x-small", ncol=min(len(members), 4))
    axes[0].set_title(
        "ECMP member shares of group traffic (dashed: fair share; band: ±25%)", fontsize="medium"
    )
    time_axis(axes[-1])
    fig.tight_layout()
    return save(fig, path)


def _heatmap_chart(grid: Grid, title: str, path: Path, size_px: tuple[int, int]) -> Path:
    fig, (ax,) = figure(size_px, 1)
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
    time_axis(ax)
    fig.tight_layout()
    return save(fig, path)


def _job_timeline(
    job: str,
    phases: list[queries.JobPhase],
    calls: list[queries.CallSeries],
    ports: dict[tuple[str, str], Series],
    incidents: list[Incident],
    path: Path,
    size_px: tuple[int, int],
) -> Path:
    """The job's collectives, one row per collective, over the metrics of the ports its hosts use;
    where its calls are timed, their bus bandwidth and time between the two."""
    fig, axes = figure(size_px, 7 if calls else 5)
    ops = sorted({ph.op for ph in phases})
    for row, op in enumerate(ops):
        spans = [
            (mdates.date2num(np.datetime64(ph.begin_ns, "ns")), _span_days(ph))
            for ph in phases
            if ph.op == op
        ]
        axes[0].broken_barh(spans, (row - 0.4, 0.8), color=f"C{row % 10}")
    axes[0].set_yticks(range(len(ops)))
    axes[0].set_yticklabels(ops, fontsize="small")
    axes[0].set_ylim(-0.6, max(len(ops), 1) - 0.4)
    if calls:
        _call_panels(axes[1], axes[2], calls)
    panels = (
        ("utilisation\n(tx %)", "tx_util", 100.0),
        ("paused by peer\n(%)", "rx_pause_frac", 100.0),
        ("ECN marks\n(packets/s)", "ecn_marked_pps", 1.0),
        ("queue\n(KB)", "queue_bytes_max", 1e-3),
    )
    for ax, (label, metric, scale) in zip(axes[3 if calls else 1 :], panels, strict=True):
        for (device, port), series in ports.items():
            values = series.columns[metric] * scale
            if np.isfinite(values).any():
                ax.plot(series.times, values, label=f"{device}:{port}", lw=1.0, drawstyle="steps-post")
        ax.set_ylabel(label, fontsize="small")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    first_port = axes[3 if calls else 1]
    if first_port.get_legend_handles_labels()[0]:
        first_port.legend(loc="upper right", fontsize="x-small", ncol=min(len(ports), 4))
    devices = {d for d, _ in ports}
    hosts = {h for ph in phases for h in ph.hosts}

    def touches(inc: Incident) -> bool:
        return job in inc.jobs or inc.root_device in devices | hosts

    shown: list[Incident] = []
    for ax in axes:
        shown = shade(ax, incidents, touches)
    title = f"job {job}: collectives over the leaf ports of its {len(hosts)} hosts"
    if shown:
        title += "  —  " + "; ".join(f"{i.kind} root {i.root}" for i in shown[:2])
    axes[0].set_title(title, fontsize="medium")
    time_axis(axes[-1])
    fig.tight_layout()
    return save(fig, path)


def _call_panels(bw: Any, dur: Any, calls: list[queries.CallSeries]) -> None:
    """Median bus bandwidth and call time of each (collective, message size) per time bucket."""
    for c in calls:
        label = f"{c.op} {bucket_name(c.size_bucket)}" + (" (upper bound)" if c.upper_bound else "")
        bw.plot(c.times, c.busbw, label=label, lw=1.0, drawstyle="steps-post")
        dur.plot(c.times, c.dur_ms, label=label, lw=1.0, drawstyle="steps-post")
    for ax, label in ((bw, "bus bandwidth\n(GB/s)"), (dur, "call time\n(ms)")):
        ax.set_ylabel(label, fontsize="small")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    bw.legend(loc="upper right", fontsize="x-small", ncol=min(len(calls), 4))


def _span_days(ph: queries.JobPhase) -> float:
    """A phase's length in matplotlib's date unit (days), at least a hair so a short one shows."""
    return max(ph.end_ns - ph.begin_ns, 50_000_000) / 86_400e9


def _pairs_chart(job: str, pairs: dict[tuple[str, str], int], path: Path, size_px: tuple[int, int]) -> Path:
    hosts = sorted({h for pair in pairs for h in pair})
    at = {h: i for i, h in enumerate(hosts)}
    grid = np.zeros((len(hosts), len(hosts)))
    for (a, b), n in pairs.items():
        grid[at[a], at[b]] = n
    fig, (ax,) = figure(size_px, 1)
    image = ax.imshow(np.ma.masked_equal(grid, 0), cmap="viridis", interpolation="nearest", vmin=0)
    size = max(4, min(9, 400 // max(len(hosts), 1)))
    ax.set_xticks(range(len(hosts)))
    ax.set_xticklabels(hosts, rotation=90, fontsize=size)
    ax.set_yticks(range(len(hosts)))
    ax.set_yticklabels(hosts, fontsize=size)
    ax.set_xlabel("receiving host")
    ax.set_ylabel("sending host")
    ax.set_title(f"job {job}: connections between hosts, from its communication graph", fontsize="medium")
    fig.colorbar(image, ax=ax, fraction=0.03, pad=0.01)
    fig.tight_layout()
    return save(fig, path)


# -- index ---------------------------------------------------------------------------------------


def _index(
    out_dir: Path,
    charts: list[Path],
    incidents: list[Incident],
    costs: dict[tuple[str, int], list[str]],
    sections: str,
    lo: int,
    hi: int,
) -> Path:
    """``sections``: the tables after the incidents' (steps, rhythm, headroom, bursts)."""
    rows = "\n".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(str(v))}</td>"
            for v in (
                when(i.start_ns),
                when(i.end_ns),
                i.kind,
                i.severity,
                i.status,
                i.root,
                ", ".join(i.jobs),
                i.summary,
                "; ".join(costs.get((i.fingerprint, i.start_ns), [])),
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
<html><head><meta charset="utf-8"><title>fabricwatch report {when(lo)} – {when(hi)}</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:2px 6px;font-size:small}}</style></head>
<body>
<h1>fabricwatch report</h1>
<p>{when(lo)} – {when(hi)} (UTC). {len(incidents)} incidents; shaded in the charts by kind:
pfc_storm red, incast orange, ecmp_collapse purple, outlier grey.</p>
<h2>Incidents</h2>
<table><tr><th>start</th><th>end</th><th>kind</th><th>severity</th><th>status</th><th>root</th><th>jobs</th>
<th>summary</th><th>what it cost the jobs</th></tr>
{rows}
</table>
{sections}<h2>Charts</h2>
{figures}
</body></html>
"""
    path = out_dir / "index.html"
    path.write_text(text)
    return path


def _steps_table(steps: list[queries.StepSummary]) -> str:
    """The jobs' step time and the share of a step in collectives; nothing for a report whose jobs
    mark no steps."""
    if not steps:
        return ""

    def pct(share: float | None) -> str:
        return "unknown" if share is None else f"{share:.1%}"

    rows = "\n".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(v)}</td>"
            for v in (
                s.job,
                f"{s.steps} of {s.ranks} ranks",
                f"{s.median_ms:.1f} ms",
                f"{s.p99_ms:.1f} ms",
                pct(s.in_collectives),
                pct(s.exposed),
            )
        )
        + "</tr>"
        for s in steps
    )
    return f"""<h2>Steps</h2>
<p>Each job's training steps, as its profiler or its step() marks say; the share in collectives
where the source timed the step's kernels (exposed: not hidden behind compute).</p>
<table><tr><th>job</th><th>steps</th><th>median step time</th><th>p99 step time</th>
<th>in collectives (median)</th><th>exposed (median)</th></tr>
{rows}
</table>
"""


def _headroom_table(ports: list[headroom.Headroom], groups: list[headroom.Headroom]) -> str:
    """The switch ports and the uplink groups with the least headroom, hottest first."""
    if not ports and not groups:
        return ""

    def rows(ranking: list[headroom.Headroom], what: str) -> str:
        return "\n".join(
            "<tr>"
            + "".join(
                f"<td>{html.escape(v)}</td>"
                for v in (
                    what,
                    f"{h.device} {h.port}",
                    f"{h.mean:.0%}",
                    f"{h.p99:.0%}",
                    f"{h.peak:.0%}",
                    f"{h.hot_minutes} min"
                    + (f" from {when(h.first_hot)}" if h.first_hot is not None else ""),
                )
            )
            + "</tr>"
            for h in ranking
        )

    return f"""<h2>Capacity</h2>
<p>The switch ports (the busier direction of each) and the uplink groups (what their members send)
with the least headroom: a link should average 60-80 % of line rate with peaks below 95 %. From the
minute rollup: the p99 is of minute means.</p>
<table><tr><th></th><th>port or group</th><th>mean</th><th>p99 (minutes)</th><th>peak poll</th>
<th>at 80 % or more</th></tr>
{rows(ports, "port")}
{rows(groups, "uplink group")}
</table>
"""


def _bursts_table(ranking: list[headroom.Bursting]) -> str:
    """The switch ports whose queues burst longest, from their microburst findings."""
    if not ranking:
        return ""
    rows = "\n".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(v)}</td>"
            for v in (
                f"{b.device} {b.port}",
                str(b.findings),
                f"{b.open_s / 60:.1f} min",
                f"{b.share:.0%}",
                f"{b.peak_bytes / 1e3:.0f} KB",
                ", ".join(b.jobs),
            )
        )
        + "</tr>"
        for b in ranking
    )
    return f"""<h2>Microbursts</h2>
<p>The switch ports whose queues filled into the ECN marking band between two reads, poll after
poll, at a low mean rate: the findings open longest first, with the most of a window's polls
that burst and the deepest watermark of any burst.</p>
<table><tr><th>port</th><th>findings</th><th>open</th><th>polls that burst (most)</th>
<th>deepest watermark</th><th>jobs running</th></tr>
{rows}
</table>
"""


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in text).strip("_") or "x"
