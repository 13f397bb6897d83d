"""Dropped packets, told apart by cause, as a loss rate (dropped / offered) per port, on NICs and
switches alike.

* **A lossless class dropping** (ingress priority-group drops: the PFC headroom ran out; a lossless
  egress queue or priority discarding): on RoCE it should never happen, each drop is a go-back-N
  retransmission of a whole window. It means a buffer or PFC configuration problem (headroom too
  small for the cable, PFC off at one end, a priority not mapped to its lossless queue): critical
  at any rate.
* **A lossy class dropping** (other egress queues): what lossy classes do under load; a warning
  from ``min_loss_ratio``, critical from ``critical_ratio`` (the brief's 0.01 %: RoCE then loses
  about a tenth of its useful bandwidth to retransmissions).
* **Port discards the device does not attribute to a class** (``rx_discards``/``tx_discards``
  alone): as a lossy class, said as unattributed.
* **Drops at a port whose link is down** are the dead link's: said as such.

Drops that congestion explains (an incast's overflowing queue, a storm, a dead link) are linked
to that incident in stage 2 (``IncidentKind.caused_by``) rather than paged on their own. As with
damaged frames, only what is systematic is said: drops in ``persist_polls`` of the last
``window_polls`` polls (``systematic.py``); one overflowing microburst is the capacity view's.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from fabricwatch.detectors.evidence import capped, evidence, port_symptoms, worst_so_far
from fabricwatch.detectors.incident_state import Group, Incident, SymptomKey
from fabricwatch.detectors.rates import RateFrame, known_sum
from fabricwatch.detectors.spec import Describer, Detector, IncidentKind, Placement, Poll, SymptomKind
from fabricwatch.detectors.systematic import SignalledStreaks, StreakConfig
from fabricwatch.schemas.config import Positive
from fabricwatch.schemas.messages import RootCause, Symptom

SIGNALS = frozenset({"pg_drops", "rx_prio_discards", "queue_drops", "rx_discards", "tx_discards"})

Priority = msgspec.Meta(ge=0, le=7)


class DropsConfig(StreakConfig, forbid_unknown_fields=True, frozen=True):
    lossless_priorities: tuple[int, ...] = (3, 4)
    """Priorities (and their queues and ingress priority groups) that PFC keeps lossless: SONiC's
    default buffer profile makes 3 and 4 lossless, and RoCE deployments put RDMA on 3."""
    min_loss_ratio: Positive = 1e-6
    """Dropped per offered packet below which a lossy class's poll is not counted (lossy classes
    drop a little under load by design); a lossless class's drops count at any rate."""
    critical_ratio: Positive = 1e-4
    """Loss at or above this (0.01 %) is critical on any class: the brief's bound."""

    def __post_init__(self) -> None:
        super().__post_init__()
        bad = [p for p in self.lossless_priorities if not 0 <= p <= 7]
        if bad:
            raise ValueError(f"lossless_priorities must be between 0 and 7, not {bad}")


class Drops(SignalledStreaks):
    """Per device, per port, a bit history of polls with drops; free on a poll where no drop
    counter moved and nothing is open."""

    signals = SIGNALS

    def __init__(self, config: DropsConfig) -> None:
        super().__init__(config)
        self.config = config
        self._lossless = np.array(sorted(set(config.lossless_priorities)), dtype=np.int64)

    def update(self, poll: Poll) -> list[Symptom]:
        frame = poll.frame
        if self.calm(frame):
            return []
        cfg = self.config
        lossless, lossy, ingress, egress = self._dropped(frame)
        lost = _add(ingress, egress)
        # Each direction's drops against what was offered to it; the worse of the two.
        ratio = np.fmax(_ratio(ingress, frame.port("rx_packets")), _ratio(egress, frame.port("tx_packets")))
        offered = _add(frame.port("rx_packets"), frame.port("tx_packets"), lost)
        step = self._streaks.count(frame, lost, ratio, cfg.min_loss_ratio, regardless=lossless > 0)
        state = step.ports
        down = frame.port("oper_down")

        def found(p: int) -> dict[str, float | int | str]:
            cause = _cause(p, lossless, lossy, down)
            critical = cause == "lossless_class" or state.peak[p] >= cfg.critical_ratio
            return evidence(
                6,
                loss_ratio=ratio[p],
                peak_loss_ratio=state.peak[p],
                dropped_pps=lost[p],
                lossless_dropped_pps=lossless[p],
                lossy_dropped_pps=lossy[p],
                offered_pps=offered[p],
                cause=cause,
                dropping_polls=f"{step.polls(p)} of the last {cfg.window_polls}",
                severity="critical" if critical else "warning",
            )

        blind = f"no poll could read its drop counters for over {cfg.lack_of_data_s:.0f} s"
        return port_symptoms(
            "drops", frame, state.since_ns, (state.active, step.cleared, step.ended), found, blind
        )

    def _dropped(self, frame: RateFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per port, packets per second dropped on the lossless classes, on the lossy ones, at
        ingress and at egress (NaN where unknown). Ingress counts a priority group's drops or a
        priority's discards, whichever is larger (a device keeps one or the other); each direction
        counts the larger of its classes' sum and the port's own discards, which most devices
        count a class's drop in too."""
        n = len(frame.ports)
        pg_lossless, pg_lossy = self._by_class(frame, "pg_drops", n)
        prio_lossless, prio_lossy = self._by_class(frame, "rx_prio_discards", n)
        queue_lossless, queue_lossy = self._by_class(frame, "queue_drops", n)
        in_lossless, in_lossy = np.fmax(pg_lossless, prio_lossless), np.fmax(pg_lossy, prio_lossy)
        ingress = np.fmax(_add(in_lossless, in_lossy), _column(frame, "rx_discards", n))
        egress = np.fmax(_add(queue_lossless, queue_lossy), _column(frame, "tx_discards", n))
        return _add(in_lossless, queue_lossless), _add(in_lossy, queue_lossy), ingress, egress

    def _by_class(self, frame: RateFrame, name: str, n: int) -> tuple[np.ndarray, np.ndarray]:
        """A per-priority or per-queue drop counter summed over the lossless and the lossy ones."""
        values, numbers = frame.indexed(name)
        lossless = np.isin(numbers, self._lossless)
        return known_sum(values[:, lossless], n), known_sum(values[:, ~lossless], n)


def _cause(p: int, lossless: np.ndarray, lossy: np.ndarray, down: np.ndarray | None) -> str:
    if down is not None and down[p] > 0.5:
        return "link_down"
    if lossless[p] > 0:
        return "lossless_class"
    return "lossy_class" if lossy[p] > 0 else "unattributed"


def _ratio(dropped: np.ndarray, passed: np.ndarray | None) -> np.ndarray:
    """Dropped per packet offered (passed + dropped); NaN where either is unknown or none moved."""
    if passed is None:
        return np.full(dropped.shape, np.nan)
    offered = passed + dropped
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(offered > 0, dropped / offered, np.nan)


def _column(frame: RateFrame, name: str, n: int) -> np.ndarray:
    found = frame.port(name)
    return np.full(n, np.nan) if found is None else found


def _add(*parts: np.ndarray | None) -> np.ndarray:
    """Sum of the known parts; NaN where none is known."""
    known = [p for p in parts if p is not None]
    return known_sum(np.stack(known, axis=1), len(known[0]))


def port_root(placement: Placement, key: SymptomKey, sym: Symptom) -> RootCause:
    """Drops are where the buffer overflows: the port itself."""
    return RootCause(sym.device, sym.port)


_CAUSES = {
    "lossless_class": (
        "a lossless class dropped: PFC did not hold it",
        "Check the buffer profile of {at} (PFC headroom for the cable length, xoff) and that PFC is "
        "enabled on the lossless priority at both ends of the link; then the DSCP-to-priority map.",
    ),
    "lossy_class": (
        "a lossy class dropped",
        "Check that RDMA traffic is classified into the lossless priority (DSCP trust and map) at "
        "{at}; if it is, the lossy queue is overloaded.",
    ),
    "unattributed": (
        "dropped (the device does not say which class)",
        "Check which queue drops at {at} (per-queue counters) and its buffer profile.",
    ),
    "link_down": (
        "dropped while its link is down",
        "See the link down incident of {at}: the drops are its traffic.",
    ),
}


def describe(
    d: Describer, incident: Incident, group: Group, latest: Symptom, active: set[SymptomKey]
) -> None:
    own = [s for s in group.members if s.kind == "drops"]
    latest = max(own, key=lambda s: s.ts_ns, default=latest)  # not a retransmitting peer's, folded in
    worst_so_far(incident, own, "peak_loss_ratio")
    cause = str(latest.evidence.get("cause", incident.evidence.get("cause", "unattributed")))
    if incident.evidence.get("cause") == "lossless_class":
        cause = "lossless_class"  # the finding that makes it critical stays the incident's
    incident.evidence["cause"] = cause
    incident.devices.add(incident.root.device)
    if d.fabric.is_nic(incident.root.device):
        host = d.fabric.host_of(incident.root.device)
        incident.hosts.add(host)
        d.jobs.attach(incident, {host}, incident.start_ns)
    at = f"{incident.root.device} {incident.root.port}"
    what, hint = _CAUSES.get(cause, _CAUSES["unattributed"])
    ratio = f"{incident.evidence['peak_loss_ratio']:.1e}"
    polls = latest.evidence.get("dropping_polls", "")
    job = f"; job {', '.join(incident.jobs)}" if incident.jobs else ""
    echoes = sorted({d.fabric.host_of(s.device) for s in group.members if s.kind != "drops"} - incident.hosts)
    peers = f"; its peers retransmit ({capped(echoes)})" if echoes else ""
    if echoes:
        incident.evidence["retransmitting_peers"] = capped(echoes)
    incident.summary = (
        f"packets dropped at {at}: {what} (up to {ratio} of packets, drops in {polls} polls){job}{peers}"
    )
    incident.hint = hint.format(at=at)


def _delay_bound_s(poll_s: float, config: Any, severity: str) -> float:
    """Drops in ``persist_polls`` polls, found at the next."""
    return (config.drops.persist_polls + 1) * poll_s


LOSS = IncidentKind(
    name="packet_loss",
    title="Packet loss",
    colour="tab:olive",
    hint="Check the buffer profile and PFC configuration of the dropping port.",
    describe=describe,
    carried=("peak_loss_ratio", "cause"),
    delay_bound_s=_delay_bound_s,
    delay="(persist_polls + 1) x poll",
    loses_frames=lambda group: True,
    caused_by=("link_down", "pfc_storm", "incast", "ecmp_collapse"),
)

DETECTOR = Detector(
    name="drops",
    symptoms=(SymptomKind("drops", "packet_loss", port_root),),
    incidents=(LOSS,),
    device_kinds=frozenset({"nic", "switch"}),
    make=lambda config: Drops(config.drops),
    signals=SIGNALS,
    config=("drops", DropsConfig),
)
