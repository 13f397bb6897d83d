"""RDMA transport retransmissions at a NIC: packets that arrived out of sequence (its peers resent
them), NAKs for sequence errors and ACK timeouts (it resent its own), against the RDMA packets it
moved. On RoCE every lost packet costs a go-back-N window, so a NIC that keeps retransmitting
loses bandwidth whatever the cause.

Stage 1 says which NICs retransmit systematically: in ``persist_polls`` of the last
``window_polls`` polls (``systematic.py``), at least ``min_ratio`` of their packets. Stage 2 decides
whose fault it is. Retransmissions whose NIC shares a job with a host at, or under, a link that
loses frames (a link corruption, packet loss or a link down incident: a kind's ``loses_frames``)
are that link's echo and join its incident (``Correlator._fold_retransmission_echoes``). Those no
such link explains are an incident of their own, rooted at the NIC: the host side (the NIC's
firmware, PCIe, memory registration, or a peer's). An incident waits one poll before it fires, for
the link incident that may explain it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fabricwatch.detectors.evidence import evidence, port_symptoms, worst_so_far
from fabricwatch.detectors.incident_state import Group, Incident, SymptomKey
from fabricwatch.detectors.rates import RateFrame, known_sum
from fabricwatch.detectors.spec import Describer, Detector, IncidentKind, Placement, Poll, SymptomKind
from fabricwatch.detectors.systematic import SignalledStreaks, StreakConfig
from fabricwatch.schemas.config import Positive
from fabricwatch.schemas.messages import RootCause, Symptom

RESENT_BY_PEERS = ("out_of_sequence",)
"""Counted on receive: a peer resent these (they arrived after a gap)."""
RESENT_HERE = ("packet_seq_err", "implied_nak_seq_err", "local_ack_timeout_err")
"""Counted on send: this NIC resends after a NAK or a timeout."""
SIGNALS = frozenset({*RESENT_BY_PEERS, *RESENT_HERE})


class RetransmissionsConfig(StreakConfig, forbid_unknown_fields=True, frozen=True):
    min_ratio: Positive = 1e-6
    """Retransmission events per RDMA packet below which a poll is not counted (1e-6: a link losing
    one frame in a million is the brief's early sign)."""
    critical_ratio: Positive = 1e-3
    """From this many per packet a NIC is critical: with go-back-N windows of hundreds of packets,
    a tenth or more of its bandwidth goes to resending."""


class Retransmissions(SignalledStreaks):
    """Per NIC, a bit history of polls with retransmissions; free on a poll where none was counted
    and nothing is open."""

    signals = SIGNALS

    def __init__(self, config: RetransmissionsConfig) -> None:
        super().__init__(config)
        self.config = config

    def update(self, poll: Poll) -> list[Symptom]:
        frame = poll.frame
        if self.calm(frame):
            return []
        n = len(frame.ports)
        received = _sum(frame, RESENT_BY_PEERS, n)
        resent = _sum(frame, RESENT_HERE, n)
        ratio = np.fmax(
            _per(received, frame, ("rdma_rx_packets", "rx_packets")),
            _per(resent, frame, ("rdma_tx_packets", "tx_packets")),
        )
        cfg = self.config
        step = self._streaks.count(frame, np.fmax(received, resent), ratio, cfg.min_ratio)
        state = step.ports

        def found(p: int) -> dict[str, float | int | str]:
            return evidence(
                6,
                retransmit_ratio=ratio[p],
                peak_retransmit_ratio=state.peak[p],
                out_of_sequence_ps=received[p],
                resent_ps=resent[p],
                retransmitting_polls=f"{step.polls(p)} of the last {cfg.window_polls}",
                severity="critical" if state.peak[p] >= cfg.critical_ratio else "warning",
            )

        blind = f"no poll could read its transport counters for over {cfg.lack_of_data_s:.0f} s"
        return port_symptoms(
            "retransmitting", frame, state.since_ns, (state.active, step.cleared, step.ended), found, blind
        )


def _sum(frame: RateFrame, names: tuple[str, ...], n: int) -> np.ndarray:
    """Per port, the sum of the counters the device has; NaN where none is known."""
    columns = [c for c in (frame.port(name) for name in names) if c is not None]
    return known_sum(np.stack(columns, axis=1) if columns else np.empty((n, 0)), n)


def _per(events: np.ndarray, frame: RateFrame, packets: tuple[str, ...]) -> np.ndarray:
    """Events per packet, from the first packet counter the device has (its RDMA share first)."""
    moved = next((c for c in (frame.port(name) for name in packets) if c is not None), None)
    if moved is None:
        return np.full(events.shape, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(moved > 0, events / moved, np.nan)


def nic_root(placement: Placement, key: SymptomKey, sym: Symptom) -> RootCause:
    return RootCause(sym.device, sym.port)


def describe(
    d: Describer, incident: Incident, group: Group, latest: Symptom, active: set[SymptomKey]
) -> None:
    own = [s for s in group.members if s.kind == "retransmitting"]
    worst_so_far(incident, own, "peak_retransmit_ratio")
    nic = incident.root.device
    incident.devices.add(nic)
    host = d.fabric.host_of(nic)
    incident.hosts.add(host)
    d.jobs.attach(incident, {host}, incident.start_ns)
    job = f"; job {', '.join(incident.jobs)}" if incident.jobs else ""
    ratio = f"{incident.evidence['peak_retransmit_ratio']:.1e}"
    incident.summary = (
        f"RDMA retransmissions at {nic} (up to {ratio} of its packets, "
        f"in {latest.evidence.get('retransmitting_polls', '')} polls) and no lossy link on its "
        f"paths: the host side{job}"
    )
    incident.hint = (
        f"No link on {nic}'s paths loses frames: check {host}'s NIC firmware and PCIe link "
        "(lspci link state, AER errors), memory registration, and its peers' NICs."
    )


def _delay_bound_s(poll_s: float, config: Any, severity: str) -> float:
    """Retransmissions in ``persist_polls`` polls, found at the next, then one poll's wait for a
    link incident that would explain them."""
    return (config.retransmissions.persist_polls + 2) * poll_s


RETRANSMISSION = IncidentKind(
    name="rdma_retransmission",
    title="RDMA retransmissions",
    colour="tab:pink",
    hint="Check the NIC's firmware and PCIe link, and its peers' NICs.",
    describe=describe,
    carried=("peak_retransmit_ratio",),
    delay_bound_s=_delay_bound_s,
    delay="(persist_polls + 2) x poll (a poll's wait for a link that explains it)",
    ripe=lambda placement, group: False,
)

DETECTOR = Detector(
    name="retransmissions",
    symptoms=(SymptomKind("retransmitting", "rdma_retransmission", nic_root),),
    incidents=(RETRANSMISSION,),
    device_kinds=frozenset({"nic"}),
    make=lambda config: Retransmissions(config.retransmissions),
    signals=SIGNALS,
    config=("retransmissions", RetransmissionsConfig),
)
