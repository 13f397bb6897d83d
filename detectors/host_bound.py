"""A NIC held back by its own host: the fabric delivers, the host does not take it. Its PCIe link
trained down (x8 instead of x16, Gen4 instead of Gen5), a slot shared with another device, buffers
on the wrong NUMA node: the NIC's PCIe transfers stall for lack of credits, its receive buffer
fills, and it pauses its leaf in short spells while its link runs well below line rate. Alibaba
counts such hosts among the fail-slow cases that cost a cluster most: nothing fails, one rank is
slow and every collective waits for it.

The signal is the NIC's own: mlx5 counts the seconds in which its outbound PCIe reads or writes
stalled more than 30 % of the time (``outbound_pci_stalled_{rd,wr}_events``). Stalls in
``persist_polls`` of the last ``window_polls`` polls make the symptom; the pauses it sends and the
throughput it reaches are its evidence (the shortfall against line rate). A NIC's stall counter
moves at most once a second: at polls shorter than a second, widen the window to match; at polls
longer than a second, a poll counts as stalled if any second in it was.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fabricwatch.detectors.evidence import evidence, port_symptoms, seen_now
from fabricwatch.detectors.incident_state import Group, Incident, SymptomKey
from fabricwatch.detectors.spec import Describer, Detector, IncidentKind, Placement, Poll, SymptomKind
from fabricwatch.detectors.systematic import SignalledStreaks, StreakConfig
from fabricwatch.schemas.config import AtLeastOne, PollWindow
from fabricwatch.schemas.messages import RootCause, Symptom

SIGNALS = frozenset({"pcie_stall_read_seconds", "pcie_stall_write_seconds"})
_US_PER_S = 1e6


class HostBoundConfig(StreakConfig, forbid_unknown_fields=True, frozen=True):
    persist_polls: AtLeastOne = 3
    """Polls with PCIe stalls, of the last ``window_polls``, that make a NIC host-bound: one
    stalled second is a burst of small transfers, three in four are a host that cannot keep up."""
    window_polls: PollWindow = 4


class HostBound(SignalledStreaks):
    signals = SIGNALS

    def __init__(self, config: HostBoundConfig) -> None:
        super().__init__(config)
        self.config = config

    def update(self, poll: Poll) -> list[Symptom]:
        frame = poll.frame
        if self.calm(frame):
            return []  # no stall counted and nothing open: the common poll, for free
        stalls = [c for c in (frame.port(n) for n in sorted(SIGNALS)) if c is not None]
        if not stalls:
            return []
        stalled = np.fmax.reduce(np.stack(stalls), axis=0)  # stalled seconds per second, either way
        known = np.isfinite(stalled)
        seen = known & (stalled * frame.dt_s >= 0.5)
        step = self._streaks.step(frame.device, seen, known, stalled, frame.ts_ns, frame.dt_s)
        state = step.ports
        rx, tx = frame.port("rx_bytes"), frame.port("tx_bytes")
        busiest = np.fmax(rx, tx) if rx is not None and tx is not None else (rx if rx is not None else tx)
        pausing = _pausing_share(frame)

        def found(p: int) -> dict[str, float | int | str]:
            line = float(poll.line_Bps[p])
            reached = float(busiest[p]) if busiest is not None else float("nan")
            return evidence(
                3,
                stalled_share=min(float(stalled[p]), 1.0),
                pausing_share=pausing[p],
                throughput_gbps=reached * 8e-9,
                line_gbps=line * 8e-9,
                shortfall_gbps=(line - reached) * 8e-9,
                stalled_polls=f"{step.polls(p)} of the last {self.config.window_polls}",
                recovering=step.recovering(p),
            )

        blind = f"no poll could read its PCIe counters for over {self.config.lack_of_data_s:.0f} s"
        return port_symptoms(
            "pcie_stalled", frame, state.since_ns, (state.active, step.cleared, step.ended), found, blind
        )


def _pausing_share(frame: Any) -> np.ndarray:
    """Share of the poll the NIC paused its leaf (any priority), NaN where it does not say."""
    duration = frame.port("tx_pfc_duration_us")
    if duration is None:
        pause_us, _ = frame.indexed("tx_pfc_duration_us")
        duration = np.fmax.reduce(pause_us, axis=1) if pause_us.size else None
    if duration is None:
        return np.full(len(frame.ports), np.nan)
    return np.minimum(duration / _US_PER_S, 1.0)


def host_root(placement: Placement, key: SymptomKey, sym: Symptom) -> RootCause:
    return RootCause(sym.device, sym.port)


def describe(
    d: Describer, incident: Incident, group: Group, latest: Symptom, active: set[SymptomKey]
) -> None:
    own = seen_now(incident, [s for s in group.members if s.kind == "pcie_stalled"])
    if not own:
        return  # no stall lately, not yet long enough to clear: it says what it said
    latest = max(own, key=lambda s: s.ts_ns)
    incident.severity = "warning"
    host = d.fabric.host_of(incident.root.device)
    incident.devices.add(incident.root.device)
    incident.hosts.add(host)
    d.jobs.attach(incident, {host}, incident.start_ns)
    ev = latest.evidence
    for key in ("throughput_gbps", "line_gbps", "shortfall_gbps", "pausing_share"):
        if key in ev:
            incident.evidence[key] = ev[key]
    known = "throughput_gbps" in ev and "line_gbps" in ev  # bytes unknown this poll: no throughput
    reached = f"; it reaches {ev['throughput_gbps']:.0f} of {ev['line_gbps']:.0f} Gb/s" if known else ""
    pauses = f", pausing its leaf {ev['pausing_share']:.0%} of the time" if ev.get("pausing_share") else ""
    job = f"; job {', '.join(incident.jobs)}" if incident.jobs else ""
    incident.summary = (
        f"{incident.root.device} is held back by its host: its PCIe transfers stall "
        f"({ev.get('stalled_polls', '')} polls){pauses}{reached}; the fabric is not the cause{job}"
    )


HOST_BOUND = IncidentKind(
    name="nic_host_bound",
    title="NIC held back by its host",
    colour="tab:pink",
    hint=(
        "Check the NIC's PCIe link (lspci -vv: LnkSta speed and width against LnkCap), its slot and "
        "riser, the NUMA node of its buffers and the host's IOMMU settings; the fabric is not the cause."
    ),
    describe=describe,
    carried=("throughput_gbps", "line_gbps", "shortfall_gbps"),
    delay_bound_s=lambda poll_s, config, severity: (config.host_bound.persist_polls + 1) * max(poll_s, 1.0),
    delay="(persist_polls + 1) x max(poll, 1 s)",
)

DETECTOR = Detector(
    name="host_bound",
    symptoms=(SymptomKind("pcie_stalled", "nic_host_bound", host_root),),
    incidents=(HOST_BOUND,),
    device_kinds=frozenset({"nic"}),
    make=lambda config: HostBound(config.host_bound),
    signals=SIGNALS,
    config=("host_bound", HostBoundConfig),
)
