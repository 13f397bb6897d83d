"""Optics out of range: a transceiver whose own diagnostics cross its own alarm or warning
thresholds. The module knows its limits (its EEPROM carries them, ``ethtool -m`` and SONiC's
``TRANSCEIVER_DOM_THRESHOLD`` read them): a weak received signal, a laser whose power falls or
whose bias climbs as it ages, a module running hot. This is the evidence behind "replace the optic"
before the link starts to lose frames or to flap.

Per port, each sensor is judged in the direction that fails (``ingest/optics.py``): received and
transmitted power below their low thresholds, bias and temperature above their high ones, against
the alarm and the warning threshold. A sensor without a threshold (or without a reading) is
unknown. Out of range in ``persist_polls`` of the last ``window_polls`` checks makes the symptom; an
alarm makes it critical. The readings move slowly and never read zero, so the detector is paced
(``paced.py``).

Both ends of a link make one incident. Which part: a module whose own laser is out of range
(transmit power, bias, temperature) is the part; a weak signal received at one end only points at
the far end's transmitter or the fibre between; at both ends, at the fibre.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fabricwatch.detectors.evidence import evidence, port_symptoms
from fabricwatch.detectors.incident_state import Group, Incident, SymptomKey
from fabricwatch.detectors.link_errors import attach_ends, both_ends_seen, link_root
from fabricwatch.detectors.paced import PacedConfig, PacedStreaks, delay_bound
from fabricwatch.detectors.spec import Describer, Detector, IncidentKind, Poll, PollStack, SymptomKind
from fabricwatch.schemas.config import Positive
from fabricwatch.schemas.messages import RootCause, Symptom


@dataclass(frozen=True)
class Sensor:
    name: str
    low: bool
    """Fails low (power) rather than high (bias, temperature)."""
    words: str
    unit: str
    suffix: str
    """Of its gauges' names: the unit they are sent in (nW, uA, thousandths of a degree)."""
    scale: float
    """From what is sent to ``unit``."""

    def gauge(self, threshold: str = "") -> str:
        """Its reading's gauge, or that of its ``alarm`` or ``warning`` threshold."""
        side = ("_low_" if self.low else "_high_") + threshold if threshold else ""
        return f"optic_{self.name}{side}{self.suffix}"


SENSORS = (
    Sensor("rx_power", True, "received power", "mW", "_nw", 1e-6),
    Sensor("tx_power", True, "transmitted power", "mW", "_nw", 1e-6),
    Sensor("bias", False, "laser bias", "mA", "_ua", 1e-3),
    Sensor("temperature", False, "temperature", "C", "_mc", 1e-3),
)
OWN_LASER = frozenset({"tx_power", "bias", "temperature"})
"""Sensors of a module's own transmitter: out of range, that module is the part."""


class OpticsConfig(PacedConfig, forbid_unknown_fields=True, frozen=True):
    every_s: Positive = 10.0
    """Seconds between two checks of a device (xcvrd refreshes SONiC's readings every 60 s)."""
    clear_after_s: Positive = 120.0
    lack_of_data_s: Positive = 180.0
    """Longer than elsewhere: a switch's readings are refreshed once a minute."""


class Optics(PacedStreaks):
    def __init__(self, config: OpticsConfig) -> None:
        super().__init__(config)
        self.config = config
        self._judged: dict[str, np.ndarray] = {}
        """Per device, ports x sensors: which sensors a check has judged (reading and threshold)."""

    def update(self, poll: Poll) -> list[Symptom]:
        frame = poll.frame
        levels = _levels(frame)
        if levels is None:
            return []
        worst = np.fmax.reduce(levels, axis=-1)  # per port: 2 alarm, 1 warning, 0 in range, NaN unknown
        judged = self._judged.get(frame.device)
        if judged is None or judged.shape != levels.shape:
            judged = self._judged[frame.device] = np.zeros(levels.shape, bool)
        judged |= np.isfinite(levels)
        # In range only when every sensor ever judged is known now: one readable sensor in range
        # must not clear another's fault that has gone unreadable.
        known = (worst >= 1) | (np.isfinite(worst) & ~(judged & np.isnan(levels)).any(axis=1))
        step = self.step(frame, known & (worst >= 1), known, worst)
        state = step.ports

        def found(p: int) -> dict[str, float | int | str]:
            out = evidence(3, severity="critical" if state.peak[p] >= 2 else "warning")
            out["out_of_range"] = ", ".join(_said(frame, p, levels[p]))
            out["out_of_range_sensors"] = " ".join(
                sensor.name for sensor, lv in zip(SENSORS, levels[p], strict=True) if lv >= 1
            )
            out["checks"] = f"{step.polls(p)} of the last {self.config.window_polls}"
            return out

        blind = f"no check could read its module's diagnostics for over {self.config.lack_of_data_s:.0f} s"
        return port_symptoms(
            "optic_out_of_range",
            frame,
            state.since_ns,
            (state.active, step.cleared, step.ended),
            found,
            blind,
        )

    def screen(self, stack: PollStack) -> np.ndarray:
        """Per due check of the stack: whether every sensor reads in range or unknown, and every
        sensor it reads was judged before (a check that judges a sensor first is remembered)."""
        levels = _levels(stack)
        passed = np.ones(len(stack.frames), bool)
        if levels is None:
            return passed
        none = np.zeros(levels.shape[1:], bool)
        judged = [self._judged.get(f.device, none) for f in stack.frames]
        before = np.stack([j if j.shape == none.shape else none for j in judged])
        new = np.isfinite(levels) & ~before
        return ~((levels >= 1) | new).any(axis=(1, 2))

    def pass_over(self, poll: Poll) -> None:
        """As a paced detector's, and the sensors judged: those of another port count since the
        screen (the device changed its ports within the batch) are taken afresh."""
        judged = self._judged.get(poll.frame.device)
        if judged is not None and judged.shape[0] != len(poll.frame.ports):
            self.update(poll)  # says nothing: nothing is seen and nothing is open
            return
        super().pass_over(poll)


def _levels(frame: Any) -> np.ndarray | None:
    """Ports x sensors: 2 past the alarm threshold, 1 past the warning, 0 within, NaN unknown;
    None where the device reports no optic reading. Every sensor in one pass: a check of a
    64-port switch reads 256 readings against 512 thresholds."""
    value_cols, warning_cols, alarm_cols = _sensor_columns(frame.layout)
    if (value_cols < 0).all():
        return None
    value, warning, alarm = (_gauges(frame.values, cols) for cols in (value_cols, warning_cols, alarm_cols))
    past_warning, past_alarm = _past(value, warning), _past(value, alarm)
    levels = np.where(past_alarm == 1, 2.0, np.fmax(past_warning, past_alarm))
    return None if levels.ndim == 2 and np.isnan(levels).all() else levels


_LOW = np.array([sensor.low for sensor in SENSORS])


def _sensor_columns(layout: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per sensor, the column of its reading, of its warning and of its alarm threshold (-1: the
    layout lacks it)."""

    def cols(threshold: str) -> np.ndarray:
        found = [layout.col(sensor.gauge(threshold)) for sensor in SENSORS]
        return np.array([-1 if c is None else c for c in found], dtype=np.intp)

    return cols(""), cols("warning"), cols("alarm")


def _gauges(values: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Ports x sensors of these columns, NaN where a column is -1 (with the leading axis of a
    stack's polls, if any)."""
    return np.where(cols >= 0, values[..., np.maximum(cols, 0)], np.nan)


def _past(value: np.ndarray, threshold: np.ndarray) -> np.ndarray:
    """1 where the value is past the threshold in its sensor's failing direction, 0 where within,
    NaN where either is unknown (a threshold of 0 is one the module leaves unset)."""
    known = np.isfinite(value) & np.isfinite(threshold) & (threshold > 0)
    with np.errstate(invalid="ignore"):
        past = np.where(_LOW, value < threshold, value > threshold)
    return np.where(known, past.astype(float), np.nan)


def _said(frame: Any, p: int, levels: np.ndarray) -> list[str]:
    out = []
    for sensor, level in zip(SENSORS, levels, strict=True):
        if not level >= 1:
            continue
        kind = "alarm" if level >= 2 else "warning"
        limit = float(frame.port(sensor.gauge(kind))[p]) * sensor.scale
        value = float(frame.port(sensor.gauge())[p]) * sensor.scale
        side = "below its low" if sensor.low else "above its high"
        out.append(
            f"{sensor.words} {value:.3g} {sensor.unit} {side} {kind} threshold {limit:.3g} {sensor.unit}"
        )
    return out


def describe(
    d: Describer, incident: Incident, group: Group, latest: Symptom, active: set[SymptomKey]
) -> None:
    # Only ends out of range now: a symptom still open while its end is back in range (it clears
    # after ``clear_after_s``) says nothing new, and the incident keeps what it said.
    own = [s for s in group.members if s.kind == "optic_out_of_range" and s.evidence.get("out_of_range")]
    if not own:
        part = str(incident.evidence.get("likely_part", ""))
        if part:
            incident.root = RootCause(*part.rsplit(" ", 1))
        return
    if any(s.evidence.get("severity") == "critical" for s in own):
        incident.severity = "critical"
    elif incident.severity != "critical":
        incident.severity = "warning"
    latest_at = {(s.device, s.port): s for s in sorted(own, key=lambda s: s.ts_ns)}
    ends = sorted(latest_at)
    lasers = [
        e for e in ends if OWN_LASER & set(str(latest_at[e].evidence.get("out_of_range_sensors")).split())
    ]
    identity = (group.root.device, group.root.port)
    far = d.fabric.peer(*identity)
    if lasers:
        part, where = lasers[0], "its module (its own laser is out of range)"
    elif far is None:
        part, where = identity, "this link's optics or fibre (its far end is not in the topology)"
    elif len(ends) == 1:
        part = next(iter({identity, far} - set(ends)), identity)
        where = "the transmitter at the far end, or the fibre between (a weak signal arrives)"
    else:
        part, where = identity, "the fibre between the ends (both receive a weak signal)"
    incident.root = RootCause(*part)
    incident.evidence["likely_part"] = f"{part[0]} {part[1]}"
    attach_ends(d, incident, ends)
    said = "; ".join(
        f"{dev} {port}: {latest_at[(dev, port)].evidence.get('out_of_range', '')}" for dev, port in ends
    )
    incident.evidence["out_of_range"] = said
    job = f"; job {', '.join(incident.jobs)}" if incident.jobs else ""
    incident.summary = f"optics out of range ({said}): likely {where} at {part[0]} {part[1]}{job}"
    incident.hint = f"Replace or reseat the optic at {part[0]} {part[1]}" + (
        "." if lasers else "; clean or replace the fibre if the reading stays low, then the far optic."
    )


OPTICS = IncidentKind(
    name="optics_out_of_range",
    title="Optics out of range",
    colour="tab:gray",
    hint="Replace or reseat the optic whose diagnostics cross its own thresholds; for a weak received "
    "signal, clean or replace the fibre, then the far end's optic.",
    describe=describe,
    carried=("likely_part",),
    delay_bound_s=delay_bound("optics", 2),
    delay="(persist_polls + 1) x every_s + 2 polls (a check's wait for the far end)",
    ripe=both_ends_seen("optic_out_of_range"),
)

DETECTOR = Detector(
    name="optics",
    symptoms=(SymptomKind("optic_out_of_range", "optics_out_of_range", link_root),),
    incidents=(OPTICS,),
    device_kinds=frozenset({"nic", "switch"}),
    make=lambda config: Optics(config.optics),
    config=("optics", OpticsConfig),
    paced=True,
)
