"""Link corruption: frames that arrive damaged (bad CRC/FCS) or are lost to uncorrectable FEC
codewords, per port, on NICs and switches alike. A failing optic or cable stops or slows training
more often than congestion does (Meta puts switches and cables behind 8 % of Llama 3's unexpected
interruptions), and on RoCE every lost frame is a go-back-N retransmission: even 0.01 % loss costs
about a tenth of a link's useful bandwidth.

Stage 1 says which ports receive damaged frames, and only where it is systematic: errors in
``persist_polls`` of the last ``window_polls`` polls. One burst (a reseated cable, a flap, a
cosmic ray) is not a failing part. Stage 2 joins the two ends of a link (from the topology) into
one incident and names the likely part: errors received at one end only point at the far end's
transmitter or optic; errors at both ends at the cable between them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from fabricwatch.detectors.evidence import capped, evidence, port_symptoms, worst_so_far
from fabricwatch.detectors.incident_state import Group, Incident, SymptomKey
from fabricwatch.detectors.spec import Describer, Detector, IncidentKind, Placement, Poll, Ripe, SymptomKind
from fabricwatch.detectors.systematic import SignalledStreaks, StreakConfig
from fabricwatch.schemas.config import Positive
from fabricwatch.schemas.messages import RootCause, Symptom

_NS = 1_000_000_000

FRAME_ERRORS = ("rx_crc_errors", "rx_errors")
"""Damaged frames received, in order of preference: a device that counts CRC errors apart from
its other receive errors (length, alignment) says exactly what a bad link does."""

SIGNALS = frozenset({*FRAME_ERRORS, "fec_uncorrectable_blocks"})


class LinkErrorsConfig(StreakConfig, forbid_unknown_fields=True, frozen=True):
    min_error_ratio: Positive = 1e-9
    """Damaged frames per frame received below which a poll's errors are not counted (1e-9: a
    healthy link's post-FEC error rate is far below it, a failing one's far above)."""
    critical_ratio: Positive = 1e-4
    """Loss at or above this (0.01 % of frames) is critical: RoCE's retransmissions then cost
    about 10 % of the link's bandwidth. Below it, a warning: the part is failing."""


class LinkErrors(SignalledStreaks):
    """Per device, per port, a bit history of polls with errors (``systematic.Systematic``): free
    on the common poll, where no error counter moved and nothing is open."""

    signals = SIGNALS

    def __init__(self, config: LinkErrorsConfig) -> None:
        super().__init__(config)
        self.config = config

    def update(self, poll: Poll) -> list[Symptom]:
        frame = poll.frame
        if self.calm(frame):
            return []  # no error counter moved and nothing open: the common poll, for free
        lost = lost_frames(frame)
        if lost is None:
            return []
        cfg = self.config
        rx = frame.port("rx_packets")
        frames = (np.full(len(frame.ports), np.nan) if rx is None else rx) + lost
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(frames > 0, lost / frames, np.nan)
        step = self._streaks.count(frame, lost, ratio, cfg.min_error_ratio)
        state = step.ports

        def found(p: int) -> dict[str, float | int | str]:
            return evidence(
                6,
                error_ratio=ratio[p],
                peak_error_ratio=state.peak[p],
                damaged_fps=lost[p],
                rx_pps=frames[p],
                symbol_errors_ps=_at(frame.port("symbol_errors"), p),
                fec_uncorrectable_ps=_at(frame.port("fec_uncorrectable_blocks"), p),
                erroring_polls=f"{step.polls(p)} of the last {cfg.window_polls}",
                severity="critical" if state.peak[p] >= cfg.critical_ratio else "warning",
            )

        blind = f"no poll could read its error counters for over {cfg.lack_of_data_s:.0f} s"
        return port_symptoms(
            "link_errors", frame, state.since_ns, (state.active, step.cleared, step.ended), found, blind
        )


def lost_frames(frame: Any) -> np.ndarray | None:
    """Damaged frames per second per port: CRC (or receive) errors or uncorrectable FEC codewords
    (each a frame, or part of one, lost on the wire), whichever counts more; None when the device
    counts neither. NaN where every counter it has is unknown this poll."""
    crc = next((c for c in (frame.port(n) for n in FRAME_ERRORS) if c is not None), None)
    fec = frame.port("fec_uncorrectable_blocks")
    parts = [c for c in (crc, fec) if c is not None]
    if not parts:
        return None
    # The larger, not the sum: a frame lost to FEC most often fails its CRC too, and counted twice
    # would halve the loss at which critical_ratio trips.
    return np.fmax.reduce(np.stack(parts), axis=0)


def _at(column: np.ndarray | None, p: int) -> float:
    return float("nan") if column is None else float(column[p])


def link_root(placement: Placement, key: SymptomKey, sym: Symptom) -> RootCause:
    """The link, the same from either end: its NIC end if it has one (a host's cable), else the
    end that sorts first. Both ends' errors make one incident."""
    end = (sym.device, sym.port)
    far = placement.fabric.peer(*end)
    if far is None:
        return RootCause(*end)
    ends = sorted((end, far), key=lambda e: (not placement.fabric.is_nic(e[0]), e))
    return RootCause(*ends[0])


End = tuple[str, str]


def _erroring(group: Group, kind: str = "link_errors") -> set[End]:
    """The ends whose own symptoms are in the group (beside them: NICs retransmitting, folded in)."""
    return {(s.device, s.port) for s in group.members if s.kind == kind}


def describe(
    d: Describer, incident: Incident, group: Group, latest: Symptom, active: set[SymptomKey]
) -> None:
    own = [s for s in group.members if s.kind == "link_errors"]
    latest = max(own, key=lambda s: s.ts_ns, default=latest)  # not a retransmitting peer's, folded in
    worst_so_far(incident, own, "peak_error_ratio")
    erroring = _erroring(group)
    if not erroring:
        # Kept open by peers' retransmissions after its own errors cleared: it says what it said.
        part = str(incident.evidence.get("likely_part", ""))
        if part:
            incident.root = RootCause(*part.rsplit(" ", 1))
        return
    at, part, hosts = locate(d, incident, group, erroring)
    # Its own NIC ends resend too: they are the link, not its peers.
    echoes = sorted({d.fabric.host_of(s.device) for s in group.members if s.kind != "link_errors"} - hosts)
    if echoes:
        incident.evidence["retransmitting_peers"] = capped(echoes)
        incident.hosts |= set(echoes)
    ratio = f"{incident.evidence['peak_error_ratio']:.1e}"
    polls = latest.evidence.get("erroring_polls", "")
    job = f"; job {', '.join(incident.jobs)}" if incident.jobs else ""
    peers = f"; its peers retransmit ({capped(echoes)})" if echoes else ""
    incident.summary = (
        f"damaged frames received at {at} (up to {ratio} of frames, systematic: errors in {polls} polls): "
        f"likely {part}{job}{peers}"
    )


def attach_ends(d: Describer, incident: Incident, ends: Iterable[End]) -> set[str]:
    """A link incident's devices (its ends' and its root's), hosts (of its NIC ends) and jobs
    (those hosts'); returns the hosts."""
    devices = {dev for dev, _ in ends} | {incident.root.device}
    incident.devices |= devices
    hosts = {d.fabric.host_of(dev) for dev in devices if d.fabric.is_nic(dev)}
    incident.hosts |= hosts
    d.jobs.attach(incident, hosts, incident.start_ns)
    return hosts


def locate(d: Describer, incident: Incident, group: Group, erroring: set[End]) -> tuple[str, str, set[str]]:
    """The failing part of a link from the ends that see it (``erroring``): one end only points
    at the far end's transmitter or optic (the incident is rooted there), both at the cable. Sets
    the root, the ends, the likely part, the hint, the devices, hosts and jobs; returns the ends
    in words, the part and the link's own hosts."""
    identity = (group.root.device, group.root.port)
    far = d.fabric.peer(*identity)
    # Both ends seen once is the cable for the incident's life: the ends clear one after the other.
    both = len(erroring) > 1 or incident.evidence.get("ends") == "both"
    transmitter = None if both or far is None else next(iter({identity, far} - erroring), None)
    if transmitter is not None:
        incident.root = RootCause(*transmitter)
    incident.evidence["likely_part"] = f"{incident.root.device} {incident.root.port}"
    hosts = attach_ends(d, incident, erroring)
    at = " and ".join(f"{dev} {port}" for dev, port in sorted(erroring))
    if transmitter is not None:
        incident.evidence["ends"] = "one"
        incident.hint = (
            f"Replace or reseat the optic at {transmitter[0]} {transmitter[1]}; if errors continue, "
            f"the cable to {at}, then the optic there."
        )
        return at, f"the transmitter or optic at {transmitter[0]} {transmitter[1]}, which sends them", hosts
    if both:
        incident.evidence["ends"] = "both"
        cable = " and ".join(f"{dev} {port}" for dev, port in sorted({identity} | ({far} if far else set())))
        incident.hint = f"Replace the cable of {cable}; if errors continue, the optics at each end."
        return at, "the cable between them, or both optics", hosts
    incident.evidence["ends"] = "one (far end not in the topology)"
    incident.hint = f"Check the optic and cable of {at} and of the port it is cabled to."
    return at, "this link (its far end is not in the topology)", hosts


def both_ends_seen(kind: str) -> Ripe:
    """A link's incident ripe once its symptom ``kind`` is seen at both ends, or its far end is
    not in the topology: errors at one end may be the first poll of errors at both, so it waits a
    poll of its group (at most) for the other end before saying which part fails."""

    def ripe(placement: Placement, group: Group) -> bool:
        far = placement.fabric.peer(group.root.device, group.root.port)
        return far is None or len(_erroring(group, kind)) > 1

    return ripe


def _delay_bound_s(poll_s: float, config: Any, severity: str) -> float:
    """Errors in ``persist_polls`` polls, found at the next; where one end only receives them, a
    poll's wait for the other end before naming the part (a cable at both ends is found within
    ``persist_polls + 1``: 3 polls by default, the issue's bound at 1e-6 of frames)."""
    return (config.link_errors.persist_polls + 2) * poll_s


CORRUPTION = IncidentKind(
    name="link_corruption",
    title="Link corruption",
    colour="tab:brown",
    hint="Replace or reseat the optic at the far end of the port receiving damaged frames; then the cable.",
    describe=describe,
    carried=("peak_error_ratio", "ends", "likely_part"),
    delay_bound_s=_delay_bound_s,
    delay="(persist_polls + 2) x poll (a poll's wait for the far end)",
    ripe=both_ends_seen("link_errors"),
    loses_frames=lambda group: True,
)

DETECTOR = Detector(
    name="link_errors",
    symptoms=(SymptomKind("link_errors", "link_corruption", link_root),),
    incidents=(CORRUPTION,),
    device_kinds=frozenset({"nic", "switch"}),
    make=lambda config: LinkErrors(config.link_errors),
    signals=SIGNALS,
    config=("link_errors", LinkErrorsConfig),
)
