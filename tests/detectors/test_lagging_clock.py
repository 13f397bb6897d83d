"""Found under `fabricwatch evaluate --seeds 1-5` (skew_half_poll_10s_64h, seeds 1-3): at 10 s
polls, a switch whose clock ran a few seconds behind the others never had an incident. Stage 2
gave a symptom seen for the first time a one-second interval, so it expired on arrival (older
than three intervals by the fabric's clock), and again at every poll."""

from __future__ import annotations

from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.incidents import Correlator
from fabricwatch.schemas.messages import RootCause, Symptom

S = 1_000_000_000
T0 = 1_800_000_000 * S


def test_a_symptom_from_a_switch_clock_seconds_behind_still_makes_an_incident():
    corr = Correlator(fabric=FabricMap(None))
    events = []
    for poll in range(3):
        now = T0 + poll * 10 * S
        ts = now - 5 * S  # the switch's clock, five seconds behind the fabric's
        corr.on_symptom(
            Symptom("incast", "leaf01", ts, T0 - 15 * S, port="Ethernet104", priority=3, evidence={})
        )
        events += corr.tick(now)
    firing = [e for e in events if e.status == "firing"]
    assert len(firing) == 1 and firing[0].root == RootCause("leaf01", "Ethernet104", 3)
    assert not [e for e in events if e.status == "resolved"]
