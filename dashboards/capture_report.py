"""The report's burst captures (``storage/captures.py``): each capture's rate per millisecond, with
the mean a poll over the same seconds would have shown drawn beside it, and a table of their
figures with the incident that asked for each (``docs/capacity.md``)."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from fabricwatch.dashboards.charts import figure, save
from fabricwatch.storage.captures import Captured
from fabricwatch.storage.queries import when


def capture_chart(c: Captured, path: Path, size_px: tuple[int, int]) -> Path:
    """Per direction, every millisecond's rate as a share of line rate, and the capture's mean:
    what a poll spanning it reads."""
    fig, axes = figure((size_px[0], size_px[1] // 2), 2)
    for ax, side in zip(axes, ("rx", "tx"), strict=True):
        rate = 100 * c.per_bin[side] / c.line_Bps
        ms = np.arange(len(rate)) * c.bin_s * 1e3
        ax.plot(ms, rate, lw=0.8, drawstyle="steps-post", label=f"{side} per {c.bin_s * 1e3:g} ms")
        ax.axhline(100 * c.mean[side] / c.line_Bps, color="k", ls="--", lw=1.0, label="what a poll reads")
        ax.set_ylabel(f"{side} (% of line rate)", fontsize="small")
        ax.set_ylim(0, 105)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper right", fontsize="x-small")
    axes[-1].set_xlabel("ms since the capture began")
    why = f" for {c.incident}" if c.incident else " (by hand)"
    axes[0].set_title(f"{c.host} {c.netdev} from {when(c.start_ns)}{why}", fontsize="medium")
    fig.tight_layout()
    return save(fig, path)


def capture_table(taken: list[Captured]) -> str:
    """One row per capture; nothing for a report with none."""
    if not taken:
        return ""

    def pct(c: Captured, d: dict[str, float]) -> str:
        return " / ".join(f"{100 * d[s] / c.line_Bps:.0f}%" for s in ("rx", "tx"))

    rows = "\n".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(v)}</td>"
            for v in (
                when(c.start_ns),
                f"{c.host} {c.netdev}",
                c.incident or "by hand",
                pct(c, c.peak),
                pct(c, c.p99),
                pct(c, c.mean),
                " / ".join(f"{c.hot_s[s] * 1e3:.0f} ms" for s in ("rx", "tx")),
                " / ".join(str(c.bursts[s]) for s in ("rx", "tx")),
                "unknown" if c.ecn_marked is None else f"{c.ecn_marked} / {c.cnp_sent}",
            )
        )
        + "</tr>"
        for c in taken
    )
    return f"""<h2>Burst captures</h2>
<p>Interfaces sampled every millisecond or faster for a few seconds (<code>fabricwatch collect
burst</code>, by hand or when an incident opened on the host): per direction (rx / tx), the busiest
millisecond, the 99th percentile and the mean (what a poll reads) as shares of line rate, the time
at 90 % of it or more, the bursts (runs of milliseconds at half of it or more) and, on an RDMA NIC,
the ECN-marked packets it received and the CNPs it sent back (unknown elsewhere). Per millisecond:
<code>capture-*.png</code>.</p>
<table><tr><th>when</th><th>interface</th><th>asked for by</th><th>busiest ms</th><th>p99 ms</th>
<th>mean</th><th>at 90 % or more</th><th>bursts</th><th>ECN-marked / CNPs sent</th></tr>
{rows}
</table>
"""
