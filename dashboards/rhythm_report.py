"""The report's view of each job's rhythm: the period its hosts' NICs repeat with over time, as the
fabric alone shows it, beside the step time its records mark where it marks any, and a table that
says whether the two agree (``storage/job_rhythm.py``, ``docs/capacity.md``)."""

from __future__ import annotations

import html
from pathlib import Path

import numpy as np

from fabricwatch.dashboards.charts import figure, save, shade, time_axis
from fabricwatch.storage.job_rhythm import AGREE, JobRhythm
from fabricwatch.storage.queries import Incident


def rhythm_chart(
    rhythms: list[JobRhythm], incidents: list[Incident], path: Path, size_px: tuple[int, int]
) -> Path:
    """One line per job: its NICs' median period at each judgment; dashed in the same colour, the
    median step its records marked. A job whose rhythm finding opened is shaded while it was open."""
    fig, (ax,) = figure(size_px, 1)
    for n, r in enumerate(rhythms):
        colour = f"C{n % 10}"
        times, period = _broken(r.times, r.period_s)
        ax.plot(
            times,
            period,
            color=colour,
            lw=1.2,
            marker=".",
            label=f"{r.job}: the fabric ({r.nics} NICs)",
        )
        if len(r.step_s):
            ax.plot(r.step_times, r.step_s, color=colour, lw=1.0, ls="--", label=f"{r.job}: its steps")
    jobs = {r.job for r in rhythms}
    shade(
        ax,
        incidents,
        lambda inc: inc.kind in ("rhythm", "job_slowdown", "job_hang") and bool(jobs & set(inc.jobs)),
    )
    ax.set_ylabel("period (s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper right", fontsize="x-small")
    ax.set_title(
        "Each job's rhythm: the period its NICs' traffic repeats with, and its step time", fontsize="medium"
    )
    time_axis(ax)
    fig.tight_layout()
    return save(fig, path)


def rhythm_table(rhythms: list[JobRhythm]) -> str:
    """Per job, the fabric's period (median and range over the report) beside the records' step
    time; nothing for a report whose NICs said no period."""
    if not rhythms:
        return ""

    def agreement(r: JobRhythm) -> str:
        step = r.median_step_s
        if step is None:
            return "no steps marked"
        return f"{step:.2f} s: {'agrees' if r.agrees else 'differs'} ({r.median_s / step - 1:+.0%})"

    rows = "\n".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(v)}</td>"
            for v in (
                r.job,
                str(r.nics),
                f"{r.median_s:.2f} s",
                "–".join(f"{q:.2f}" for q in np.quantile(r.period_s, [0.1, 0.9])) + " s",
                agreement(r),
            )
        )
        + "</tr>"
        for r in rhythms
    )
    return f"""<h2>Rhythm</h2>
<p>The period each job's traffic repeats with, read from its hosts' NIC byte rates alone (the
median of its NICs' at each judgment; a judgment whose window spans a change of pace reads a
period of neither, a few times the step), beside the median step its own records mark; the two agree
within {AGREE:.0%}. Over time: <code>rhythm.png</code>.</p>
<table><tr><th>job</th><th>NICs</th><th>period (median)</th><th>period (10th–90th percentile)</th>
<th>step time (its records)</th></tr>
{rows}
</table>
"""


def _broken(times: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The series with a NaN in each gap longer than two of its usual steps, so that a line is
    not drawn across a time no NIC said a period (a job that hangs carries no rhythm)."""
    if len(times) < 3:
        return times, values
    step = np.median(np.diff(times))
    gaps = np.flatnonzero(np.diff(times) > 2 * step) + 1
    return np.insert(times, gaps, times[gaps - 1] + step), np.insert(values.astype(float), gaps, np.nan)
