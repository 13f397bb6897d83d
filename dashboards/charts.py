"""What every chart of the report shares: its size in pixels, its time axis, and the incidents
shaded behind it in their kind's colour."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates
import matplotlib.pyplot as plt
import numpy as np

from fabricwatch.detectors.registry import REGISTRY
from fabricwatch.storage.queries import Incident

DPI = 100


def kind_colour(kind: str) -> str:
    """The incident kind's own colour (``spec.IncidentKind.colour``); grey for a kind this build
    does not know (stored by a newer one)."""
    declared = REGISTRY.incidents.get(kind)
    return declared.colour if declared is not None else "tab:gray"


def figure(size_px: tuple[int, int], rows: int) -> tuple[Any, Any]:
    fig, axes = plt.subplots(rows, 1, figsize=(size_px[0] / DPI, size_px[1] / DPI), dpi=DPI, sharex=True)
    return fig, np.atleast_1d(axes)


def save(fig: Any, path: Path) -> Path:
    """Saved at exactly the figure's pixel size (no tight bounding box: the size is a promise)."""
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def time_axis(ax: Any) -> None:
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=UTC))
    ax.set_xlabel("time (UTC)")


def shade(ax: Any, incidents: list[Incident], touches: Any) -> list[Incident]:
    shown = []
    for inc in incidents:
        if touches(inc):
            ax.axvspan(
                np.datetime64(inc.start_ns, "ns"),
                np.datetime64(inc.end_ns, "ns"),
                color=kind_colour(inc.kind),
                alpha=0.15,
                lw=0,
            )
            shown.append(inc)
    return shown
