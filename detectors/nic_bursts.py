"""A NIC whose receive buffer fills between two reads, often enough to cost: the NIC side of the
``microbursts`` finding.

mlx5 counts the times its port's receive buffer passed 85 % full (``rx_buffer_passed_thres_phy``),
bnxt the same (``rx_buffer_passed_threshold``), both mapped to ``rx_buffer_passed_thres``: a burst
came in faster than the NIC hands it to its host, and a lossless priority pauses the leaf at XOFF
soon after. Within a poll whose mean receive rate stayed below ``max_mean_utilisation`` of line
rate, that is a burst the poll's averages hide, as a switch queue's watermark in the marking band
is (``microbursts.py``). One is nothing; the finding is a NIC bursting in ``min_share`` of the
polls of the last ``window_s`` (at least ``min_bursts``), from the window's first burst, until
that share or count halves: the rule of ``schemas/bursts.py``, as for a switch queue.

The counter reads zero on a NIC that does not burst, so this detector declares it as its signal:
a NIC's calm polls are skipped until one bursts. From then on, while a burst is in its window,
stage 1 gives it every poll (``open``), so the share is of the polls read; before the first burst
the window is taken as read at the NIC's poll interval (an unread one could only have burst less).
A NIC that an open incident already explains (host-bound: its PCIe stalls, the same buffer
filling for good) is that incident's, not a finding of its own.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from fabricwatch.detectors.evidence import evidence, seen_now
from fabricwatch.detectors.incident_state import Group, Incident, SymptomKey
from fabricwatch.detectors.spec import Describer, Detector, Placement, Poll, SymptomKind
from fabricwatch.schemas.bursts import MicroburstConfig
from fabricwatch.schemas.messages import RootCause, Symptom

SIGNALS = frozenset({"rx_buffer_passed_thres"})
HOST_BOUND = "pcie_stalled"
"""The host-bound detector's symptom (``host_bound.py``): a NIC that shows it is that incident's."""
_NS = 1_000_000_000


@dataclass
class _Nic:
    polls: deque[tuple[int, bool, float]] = field(default_factory=deque)
    """The polls read since the first burst of the window: time, burst, buffer passes."""
    since_ns: int = 0
    active: bool = False


class NicBursts:
    SIGNALS = SIGNALS

    def __init__(self, config: MicroburstConfig) -> None:
        self.config = config
        self._nics: dict[str, _Nic] = {}

    def open(self, device: str) -> bool:
        return device in self._nics

    def update(self, poll: Poll) -> list[Symptom]:
        frame = poll.frame
        passed, rx = frame.port("rx_buffer_passed_thres"), frame.port("rx_bytes")
        if passed is None or rx is None:
            return []
        c = self.config
        events = float(np.nansum(passed) * frame.dt_s)
        util = float(np.nanmax(rx / poll.line_Bps)) if np.isfinite(rx).any() else np.nan
        burst = events > 0 and util < c.max_mean_utilisation  # an unknown rate is no burst
        nic = self._nics.get(frame.device)
        if nic is None:
            if not burst:
                return []
            nic = self._nics[frame.device] = _Nic()
        nic.polls.append((frame.ts_ns, burst, events))
        while nic.polls and nic.polls[0][0] <= frame.ts_ns - c.window_s * _NS:
            nic.polls.popleft()
        bursts = sum(b for _, b, _ in nic.polls)
        read = max(len(nic.polls), round(c.window_s / max(frame.dt_s, 1e-3)))
        share = bursts / read
        was = nic.active
        if not nic.active and bool(c.often(np.array(bursts), np.array(share))):
            nic.active, nic.since_ns = True, next(t for t, b, _ in nic.polls if b)
        elif nic.active and bool(c.rare(np.array(bursts), np.array(share))):
            nic.active = False
        if not bursts and not nic.active:
            del self._nics[frame.device]  # calm again: its polls are skipped
        if not (nic.active or was):
            return []
        found = evidence(
            3,
            bursts=bursts,
            polls=read,
            window_s=c.window_s,
            buffer_passes=sum(e for _, _, e in nic.polls),
            rx_utilisation=util,
        )
        port = frame.ports[0] if frame.ports else ""
        return [
            Symptom(
                "nic_microburst", frame.device, frame.ts_ns, nic.since_ns, nic.active, port, evidence=found
            )
        ]


def nic_burst_root(placement: Placement, key: SymptomKey, sym: Symptom) -> RootCause | None:
    if (sym.device, sym.port) in placement.ports_with(HOST_BOUND):
        return None  # a host-bound NIC's buffer fills for good: that incident's
    return RootCause(sym.device, sym.port)


def describe_nic_side(d: Describer, incident: Incident, group: Group) -> bool:
    """The summary of a NIC's microburst finding (``microbursts.describe`` hands it over); False
    when the group holds no NIC symptom."""
    own = seen_now(incident, [s for s in group.members if s.kind == "nic_microburst"])
    if not own:
        return False
    ev = max(own, key=lambda s: s.ts_ns).evidence
    bursts, polls = int(ev.get("bursts", 0)), int(ev.get("polls", 0))
    host = d.fabric.host_of(incident.root.device)
    incident.severity = "info"
    incident.devices.add(incident.root.device)
    if host:
        incident.hosts.add(host)
    most = max(bursts / polls if polls else 0.0, float(incident.evidence.get("most_bursting", 0.0)))
    incident.evidence.update(bursts=bursts, polls=polls, most_bursting=most)
    d.jobs.attach(incident, {host} if host else set(), incident.start_ns)
    job = f"; job {', '.join(incident.jobs)} {', '.join(incident.collectives)}" if incident.jobs else ""
    incident.summary = (
        f"Microbursts into {incident.root.device}: its receive buffer passed its threshold in {bursts} of "
        f"its last {polls} polls (at most {float(ev.get('window_s', 0)):.0f} s) at a mean of "
        f"{float(ev.get('rx_utilisation', 0)):.0%} of line rate: bursts come in faster than its host "
        f"takes them{job}"
    )
    return True


DETECTOR = Detector(
    name="nic_microbursts",
    symptoms=(SymptomKind("nic_microburst", "microbursts", nic_burst_root),),
    device_kinds=frozenset({"nic"}),
    make=lambda config: NicBursts(config.microbursts),
    signals=SIGNALS,
    config=("microbursts", MicroburstConfig),
)
