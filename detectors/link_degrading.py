"""A degrading link: forward error correction works harder and harder before a single frame is
lost. On a 400G or 200G PAM4 link RS(544,514) FEC corrects bit errors all the time; it fails (and
frames are lost, ``link_errors``) once the bit error rate before correction passes about 2.4e-4.
A link whose pre-FEC bit error rate has climbed to within a few decades of that limit is an optic
or cable wearing out: a warning, with time to replace it in a maintenance window rather than
after it has cost a job.

The pre-FEC bit error rate is the corrected bits per second over the bits the link carries: the
line rate, since PAM4 links send FEC codewords (idle ones too) whether or not there is traffic.
Where the device counts corrected codewords only, each stands for at least one bit: the rate is
then a lower bound, and said to be one.

Corrected bits move on every poll of a healthy PAM4 link, so they cannot be a calm-poll signal:
the detector is paced (``paced.py``), and checks a device every ``every_s`` seconds. Its streaks
count checks, not polls. Both ends of a link make one incident, and the part is named as for
link corruption (``link_errors.locate``): one end degrading points at the far end's transmitter.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fabricwatch.detectors.evidence import evidence, port_symptoms, seen_now, worst_so_far
from fabricwatch.detectors.incident_state import Group, Incident, SymptomKey
from fabricwatch.detectors.link_errors import both_ends_seen, link_root, locate, lost_frames
from fabricwatch.detectors.paced import PacedConfig, PacedStreaks, delay_bound
from fabricwatch.detectors.rates import CounterColumns
from fabricwatch.detectors.spec import Describer, Detector, IncidentKind, Poll, PollStack, SymptomKind
from fabricwatch.schemas.config import AtLeastOne, Positive
from fabricwatch.schemas.messages import Symptom

FEC_LIMIT_BER = 2.4e-4
"""The pre-FEC bit error rate RS(544,514) ("KP4") FEC corrects to a frame loss ratio of about
1e-13 (IEEE 802.3bs); above it, frames are lost."""


class LinkDegradingConfig(PacedConfig, forbid_unknown_fields=True, frozen=True):
    warn_ber: Positive = 1e-5
    """Pre-FEC bit error rate from which a link is degrading: Oracle's OCI HPC health checks fail
    a mlx5 link whose raw BER passes 1e-5 (oracle/oci-dr-hpc-v2, ``EXPECTED_RAW_PHYSICAL_BER``);
    24 times below the KP4 limit (``FEC_LIMIT_BER``), three decades above the 1e-12 to 2e-9 sound
    links read in SONiC's ``show interfaces counters fec-stats`` (sonic-swss PR 3757)."""
    persist_polls: AtLeastOne = 3
    """Checks at or above ``warn_ber``, of the last ``window_polls`` checks, that make a link
    degrading (three: 20 to 30 s at the default pace; one noisy check is not wear)."""
    clear_after_s: Positive = 120.0
    """A link below ``warn_ber`` this long (and ``window_polls`` checks) has recovered."""


class LinkDegrading(PacedStreaks):
    def __init__(self, config: LinkDegradingConfig) -> None:
        super().__init__(config)
        self.config = config

    def update(self, poll: Poll) -> list[Symptom]:
        frame = poll.frame
        read = _read(frame, poll.fabric.speeds(frame.device, frame.ports)[1], self.config.warn_ber)
        if read is None:
            return []
        bits, lower_bound, known, ber, seen = read
        cfg = self.config
        step = self.step(frame, seen, known, ber)
        state = step.ports

        def found(p: int) -> dict[str, float | int | str]:
            peak = state.peak[p]
            out = evidence(
                1,
                fec_margin=FEC_LIMIT_BER / peak if peak > 0 else float("nan"),
                corrected_bits_ps=bits[p],
                counted_as="at least (from corrected codewords)" if lower_bound else "corrected bits",
                degraded_checks=f"{step.polls(p)} of the last {cfg.window_polls}",
                recovering=step.recovering(p),
            )
            # Rates of 1e-7 and below: three significant digits, where evidence keeps decimals.
            out.update(
                {
                    k: float(f"{v:.3g}")
                    for k, v in (("pre_fec_ber", ber[p]), ("peak_pre_fec_ber", peak))
                    if np.isfinite(v)
                }
            )
            return out

        blind = f"no check could read its FEC counters for over {cfg.lack_of_data_s:.0f} s"
        return port_symptoms(
            "fec_degrading", frame, state.since_ns, (state.active, step.cleared, step.ended), found, blind
        )

    def screen(self, stack: PollStack) -> np.ndarray:
        """Per due check of the stack: whether no port of it is at or above ``warn_ber``."""
        read = _read(stack, stack.topology_Bps(), self.config.warn_ber)
        return np.ones(len(stack.frames), bool) if read is None else ~read[4].any(axis=-1)


def _read(
    cols: CounterColumns, topology_Bps: np.ndarray, warn_ber: float
) -> tuple[np.ndarray, bool, np.ndarray, np.ndarray, np.ndarray] | None:
    """Per port (of a poll or of a stack of them): corrected bits per second, whether they are a
    lower bound, whether the port can be judged, its pre-FEC bit error rate and whether that is
    at or above ``warn_ber``; None where the device counts no corrected bits."""
    corrected = _corrected_bits(cols)
    if corrected is None:
        return None
    bits, lower_bound = corrected
    line_bps = _line_bps(cols, topology_Bps)
    down = cols.port("oper_down")
    known = np.isfinite(bits) & (line_bps > 0)
    if down is not None:
        known &= ~(down > 0)  # a down link carries no bits: its FEC says nothing
    lost = lost_frames(cols)
    if lost is not None:
        # Losing frames (or unknown whether it does): link corruption's, not a degrading link.
        known &= np.isfinite(lost) & ~(lost > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        ber = np.where(known, bits / line_bps, np.nan)
        seen = known & (ber >= warn_ber)
    return bits, lower_bound, known, ber, seen


def _line_bps(cols: CounterColumns, topology_Bps: np.ndarray) -> np.ndarray:
    """Bits per second each port's link carries: the speed it came up at, else the topology's for
    it; NaN where neither is known (an assumed speed would make a 100G link's BER read 4x low)."""
    topology = topology_Bps * 8.0
    speed = cols.port("link_speed_mbps")
    return topology if speed is None else np.where(speed > 0, speed * 1e6, topology)


def _corrected_bits(frame: Any) -> tuple[np.ndarray, bool] | None:
    """Corrected bits per second per port, and whether they are a lower bound (counted from
    corrected codewords, each at least one bit); None where the device counts neither."""
    bits = frame.port("fec_corrected_bits")
    if bits is not None:
        return bits, False
    blocks = frame.port("fec_corrected_blocks")
    return None if blocks is None else (blocks, True)


def describe(
    d: Describer, incident: Incident, group: Group, latest: Symptom, active: set[SymptomKey]
) -> None:
    own = [s for s in group.members if s.kind == "fec_degrading"]
    latest = max(own, key=lambda s: s.ts_ns, default=latest)
    worst_so_far(incident, own, "peak_pre_fec_ber")
    incident.severity = "warning"
    erroring = {(s.device, s.port) for s in own}
    if not erroring or not seen_now(incident, own):
        return  # back below warn_ber, not yet long enough to clear: it says what it said
    at, part, _ = locate(d, incident, group, erroring)
    # Linked to a link corruption of the same link (``caused_by``): it loses frames already.
    lost = "frames are lost on it already" if incident.caused_by else "no frame lost yet"
    if not incident.caused_by:
        incident.hint = f"No frame is lost yet: plan it for a maintenance window. {incident.hint}"
    peak = float(incident.evidence["peak_pre_fec_ber"])
    incident.evidence["fec_margin"] = round(FEC_LIMIT_BER / peak, 1) if peak > 0 else 0.0
    bound = "at least " if latest.evidence.get("counted_as", "").startswith("at least") else ""
    job = f"; job {', '.join(incident.jobs)}" if incident.jobs else ""
    incident.summary = (
        f"FEC corrects ever more at {at}: pre-FEC bit error rate {bound}{peak:.1e}, "
        f"{incident.evidence['fec_margin']}x below the {FEC_LIMIT_BER:.1e} at which frames are lost "
        f"(in {latest.evidence.get('degraded_checks', '')} checks); {lost}: likely {part}{job}"
    )


DEGRADING = IncidentKind(
    name="link_degrading",
    title="Degrading link",
    colour="tab:olive",
    hint="Plan to replace the optic at the far end of the port whose FEC corrects ever more; then the cable.",
    describe=describe,
    carried=("peak_pre_fec_ber", "ends", "likely_part"),
    delay_bound_s=delay_bound("fec_degrading", 2),
    caused_by=("link_corruption",),
    delay="(persist_polls + 1) x every_s + 2 polls",
    ripe=both_ends_seen("fec_degrading"),
)

DETECTOR = Detector(
    name="fec_degrading",
    symptoms=(SymptomKind("fec_degrading", "link_degrading", link_root),),
    incidents=(DEGRADING,),
    device_kinds=frozenset({"nic", "switch"}),
    make=lambda config: LinkDegrading(config.fec_degrading),
    config=("fec_degrading", LinkDegradingConfig),
    paced=True,
)
