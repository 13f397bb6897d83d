"""Fail-slow links: a port whose link came up below the speed the topology gives it (a 400G link
running at 200G after a lane failed, or after auto-negotiation settled low). Nothing is lost and
nothing goes down, so no other detector sees it; the job just runs slower on every collective that
crosses it, and an ECMP group with such a member is unbalanced by construction.

The port's speed is the ``link_speed_mbps`` gauge (an RDMA port's ``rate`` file, SONiC STATE_DB
``speed``, OpenConfig ``negotiated-port-speed``). What the link should run at is the topology's link speed:
the speed a switch is configured for (SONiC's CONFIG_DB/APPL_DB ``speed``), or the site's
``link_gbps``; never the speed the port reads now. A port the topology does not cable is not judged.
A speed never reads zero, so the detector is paced (``paced.py``); a down port says nothing here.
"""

from __future__ import annotations

import numpy as np

from fabricwatch.detectors.evidence import evidence, port_symptoms, seen_now
from fabricwatch.detectors.incident_state import Group, Incident, SymptomKey
from fabricwatch.detectors.link_errors import attach_ends, both_ends_seen, link_root
from fabricwatch.detectors.paced import PacedConfig, PacedStreaks, delay_bound
from fabricwatch.detectors.rates import CounterColumns
from fabricwatch.detectors.spec import Describer, Detector, IncidentKind, Poll, PollStack, SymptomKind
from fabricwatch.schemas.config import AtLeastOne
from fabricwatch.schemas.messages import Symptom


class LinkSpeedConfig(PacedConfig, forbid_unknown_fields=True, frozen=True):
    persist_polls: AtLeastOne = 2
    """Checks below speed, of the last ``window_polls``, that make a slow link: a renegotiation
    in progress reads low once."""


class LinkSpeed(PacedStreaks):
    def __init__(self, config: LinkSpeedConfig) -> None:
        super().__init__(config)
        self.config = config

    def update(self, poll: Poll) -> list[Symptom]:
        frame = poll.frame
        read = _read(frame, poll.fabric.speeds(frame.device, frame.ports)[1])
        if read is None:
            return []
        speed, expected, known, slow = read
        step = self.step(frame, slow, known, expected - speed)
        state = step.ports

        def found(p: int) -> dict[str, float | int | str]:
            return evidence(
                1,
                speed_gbps=speed[p] / 1000,
                expected_gbps=expected[p] / 1000,
                shortfall_gbps=state.peak[p] / 1000,
                slow_checks=f"{step.polls(p)} of the last {self.config.window_polls}",
                recovering=step.recovering(p),
            )

        blind = f"no check could read its speed for over {self.config.lack_of_data_s:.0f} s"
        return port_symptoms(
            "link_slow", frame, state.since_ns, (state.active, step.cleared, step.ended), found, blind
        )

    def screen(self, stack: PollStack) -> np.ndarray:
        """Per due check of the stack: whether no port of it is below speed."""
        read = _read(stack, stack.topology_Bps())
        return np.ones(len(stack.frames), bool) if read is None else ~read[3].any(axis=-1)


def _read(
    cols: CounterColumns, topology_Bps: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Per port (of a poll or of a stack of them): the speed it reads and the speed it should run
    at in Mb/s, whether it can be judged, and whether it is slow; None where the device reports
    no speed."""
    speed = cols.port("link_speed_mbps")
    if speed is None:
        return None
    expected = topology_Bps * 8e-6  # Mb/s; NaN: not cabled
    known = np.isfinite(speed) & (speed > 0) & np.isfinite(expected)
    down = cols.port("oper_down")
    if down is not None:
        known &= ~(down > 0)  # a down link has no speed to judge
    # 1 % of slack: a 100G port may report 99,999 Mb/s, never half.
    slow = known & (speed < 0.99 * np.where(known, expected, 0.0))
    return speed, expected, known, slow


def describe(
    d: Describer, incident: Incident, group: Group, latest: Symptom, active: set[SymptomKey]
) -> None:
    own = seen_now(incident, [s for s in group.members if s.kind == "link_slow"])
    if not own:
        return  # back at speed, not yet long enough to clear: it says what it said
    latest = max(own, key=lambda s: s.ts_ns)
    incident.severity = "warning"
    ends = sorted({(s.device, s.port) for s in own})
    attach_ends(d, incident, ends)
    ev = latest.evidence
    speed, expected = float(ev.get("speed_gbps", 0.0)), float(ev.get("expected_gbps", 0.0))
    incident.evidence["speed_gbps"] = speed
    incident.evidence["expected_gbps"] = expected
    share = f" ({speed / expected:.0%} of it)" if expected else ""
    at = " and ".join(f"{dev} {port}" for dev, port in ends)
    far = d.fabric.peer(incident.root.device, incident.root.port)
    cable = f"{incident.root.device} {incident.root.port}" + (f" to {far[0]} {far[1]}" if far else "")
    incident.hint = (
        f"Check the link {cable}: a lane down (reseat or replace the optic, then the cable) or a "
        f"port configured or negotiated at the wrong speed (compare both ends' speed and FEC settings)."
    )
    job = f"; job {', '.join(incident.jobs)}" if incident.jobs else ""
    incident.summary = (
        f"link at {at} runs at {speed:g} Gb/s, below the {expected:g} Gb/s it should{share}: "
        f"every flow across it is capped, nothing is lost{job}"
    )


SLOW = IncidentKind(
    name="slow_link",
    title="Link below speed",
    colour="tab:cyan",
    hint="Reseat or replace the optic (a lane is down), then the cable; compare both ends' speed settings.",
    describe=describe,
    carried=("speed_gbps", "expected_gbps"),
    delay_bound_s=delay_bound("link_speed", 2),
    delay="(persist_polls + 1) x every_s + 2 polls (a check's wait for the far end)",
    ripe=both_ends_seen("link_slow"),
)

DETECTOR = Detector(
    name="link_speed",
    symptoms=(SymptomKind("link_slow", "slow_link", link_root),),
    incidents=(SLOW,),
    device_kinds=frozenset({"nic", "switch"}),
    make=lambda config: LinkSpeed(config.link_speed),
    config=("link_speed", LinkSpeedConfig),
    paced=True,
)
