"""Links that go down: dead (down and staying down) or flapping (down, up, down again). A flapping
link is one incident with its flap count, not one per flap; a dead link is an incident until it is
back. Both ends of the link join one incident (``link_errors.link_root``).

Stage 1 reads, per port, the ``oper_down`` gauge (the port's state when read) and the counters of
transitions: ``link_downed`` (downs) or else ``carrier_changes`` (downs and ups, two a flap). A
flap shorter than a poll shows only in the counters; a link down since before the first poll only
in the gauge.

A link taken down on purpose is not a fault: the end taken down (``admin_down``) says so
(``on_purpose`` in its symptom's evidence), and its far end, which reads only that its link went
down, joins it in the link's one incident; the incident is then said as a finding, not paged
(``describe``). The far end may be read first: its incident fires, and the admin end's next read,
within a poll, makes it a finding before any receiver is told (the alerter moves an alert nobody
was told of, ``alerts/alerter.py``). An uncabled port shut on purpose says nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from fabricwatch.detectors.evidence import evidence, port_symptoms
from fabricwatch.detectors.incident_state import Group, Incident, SymptomKey
from fabricwatch.detectors.link_errors import link_root
from fabricwatch.detectors.persistence import LACK_OF_DATA_S
from fabricwatch.detectors.spec import Describer, Detector, IncidentKind, Poll, PollStack, SymptomKind
from fabricwatch.schemas.config import Positive
from fabricwatch.schemas.messages import Symptom

SIGNALS = frozenset({"oper_down", "link_downed", "carrier_changes"})


class LinkStateConfig(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    stable_after_s: Positive = 30.0
    """A link up, without a transition, this long (and 2 polls) has stopped flapping: its incident
    clears. Shorter, and a link that went down again is the same flapping link."""
    lack_of_data_s: Positive = LACK_OF_DATA_S


@dataclass
class _Ports:
    active: np.ndarray
    since_ns: np.ndarray
    flaps: np.ndarray
    """Downs counted since the incident began (a transition counter's increments, or a gauge seen
    going down between two polls that showed it up)."""
    stable_s: np.ndarray
    """Seconds of known polls up and without a transition."""
    was_down: np.ndarray
    """The last state read (down or up); unknown polls leave it as it was."""
    known_ns: np.ndarray
    """The last poll whose link columns could be read (the state itself may be unknown)."""

    @classmethod
    def empty(cls, n: int) -> _Ports:
        flags, ints, floats = (np.zeros(n, bool), np.zeros(n, np.int64), np.zeros(n))
        return cls(flags, ints, floats, floats.copy(), flags.copy(), ints.copy())


class LinkState:
    """Per device, per port: down, flapping or stable. Free on a poll where every port is up and no
    transition was counted while nothing is open."""

    def __init__(self, config: LinkStateConfig) -> None:
        self.config = config
        self._devices: dict[str, _Ports] = {}

    def open(self, device: str) -> bool:
        state = self._devices.get(device)
        return state is not None and bool(state.active.any() or state.was_down.any())

    def screen(self, stack: PollStack) -> np.ndarray:
        """Per poll (``spec.Screening``): no link state or transition above zero. On a device with
        nothing open (no port down or reported), such a poll reads every port up or unknown and
        starts nothing; ``update`` would only move what a port's next event resets before anything
        reads it (its time stable, when it was last read, its flaps)."""
        return ~stack.above_zero(SIGNALS)

    def pass_over(self, poll: Poll) -> None:
        """A poll the screen passed over leaves nothing to keep."""

    def update(self, poll: Poll) -> list[Symptom]:
        frame = poll.frame
        state = self._devices.get(frame.device)
        if state is None and not frame.any_above_zero(SIGNALS):
            return []  # every link up and none counted going down: the common poll, for free
        n = len(frame.ports)
        was_down = state.was_down if state is not None and state.active.size == n else np.zeros(n, bool)
        read = _read(frame, was_down)
        if read is None:
            return []
        down, up, downs, readable, on_purpose = read
        # A port read down with no transition counted is a fault only where the topology expects
        # a link, or after it went down while watched (an uncabled port is down, and enabled by
        # default on many switches).
        watched = state is not None and state.active.size == n
        expected = _cabled(poll, frame.ports) if down.any() else np.zeros(n, bool)
        if watched:
            expected |= ~state.was_down
        event = (down & expected) | (downs > 0)
        if state is None and not event.any():
            return []
        if state is None or state.active.size != n:
            state = self._devices[frame.device] = _Ports.empty(n)
        cfg, ts = self.config, frame.ts_ns
        known = down | up
        # A gauge seen going down between two polls is a down no counter may have counted.
        counted = np.where(down & ~state.was_down & (downs == 0) & ~on_purpose, 1.0, downs)
        started = event & ~state.active
        state.since_ns[started] = ts - int(frame.dt_s * 1e9)
        state.flaps = np.where(started, 0.0, state.flaps) + np.where(event, counted, 0.0)
        state.active |= started
        quiet = up & (downs == 0)
        state.stable_s = np.where(event, 0.0, np.where(quiet, state.stable_s + frame.dt_s, state.stable_s))
        state.was_down = np.where(known, down, state.was_down)
        state.known_ns = np.where(readable, ts, state.known_ns)
        stable = max(cfg.stable_after_s, 2 * frame.dt_s)
        cleared = state.active & quiet & (state.stable_s >= stable)
        ended = state.active & (ts - state.known_ns > cfg.lack_of_data_s * 1e9)
        state.active &= ~(cleared | ended)

        def found(p: int) -> dict[str, float | int | str]:
            is_down = bool(state.was_down[p])
            said = evidence(
                1,
                state="down" if is_down else "up",
                flaps=int(state.flaps[p]),
                up_for_s=float(state.stable_s[p]) if not is_down else float("nan"),
            )
            if on_purpose[p]:
                said["on_purpose"] = 1
            return said

        blind = f"no poll could read its state for over {cfg.lack_of_data_s:.0f} s"
        return port_symptoms("link_down", frame, state.since_ns, (state.active, cleared, ended), found, blind)


def _read(frame: Any, was_down: np.ndarray) -> tuple[np.ndarray, ...] | None:
    """Per port: read down, read up, downs counted this poll, and whether any of its link columns
    could be read; None when the device reports no link state at all.

    The state is the ``oper_down`` gauge's; without one, the parity of ``carrier_changes`` since
    the last known state; without either, traffic says a link is up (a dead link carries nothing)
    and only a counted down says it is down. Neither down nor up is unknown: it neither clears
    an incident nor extends it. A port taken down on purpose (``admin_down``) reads down as it
    is, counts no downs, and is marked (the last mask)."""
    gauge, downed, changes = (frame.port(k) for k in ("oper_down", "link_downed", "carrier_changes"))
    if gauge is None and downed is None and changes is None:
        return None
    n = len(frame.ports)
    nan = np.full(n, np.nan)
    gauge = nan if gauge is None else gauge
    flips = nan if changes is None else np.round(changes * frame.dt_s)
    if downed is not None:
        downs = np.round(downed * frame.dt_s)
    else:
        # carrier_changes counts downs and ups: from up, the first change is a down; from down, an up.
        downs = np.where(was_down, np.floor(flips / 2), np.ceil(flips / 2))
    readable = np.isfinite(gauge) | np.isfinite(downs) | np.isfinite(flips)
    downs = np.where(np.isfinite(downs), downs, 0.0)
    by_parity = np.isfinite(flips)
    parity_down = by_parity & ((flips + was_down) % 2 == 1)
    moving = [c for c in (frame.port("rx_packets"), frame.port("tx_packets")) if c is not None]
    traffic = np.nansum(np.stack(moving), axis=0) if moving else nan
    gauged = np.isfinite(gauge)
    down = np.where(gauged, gauge > 0.5, np.where(by_parity, parity_down, (downs > 0) & ~(traffic > 0)))
    up = np.where(gauged, gauge <= 0.5, np.where(by_parity, ~parity_down, traffic > 0))
    admin = frame.port("admin_down")
    on_purpose = np.zeros(n, bool) if admin is None else admin > 0.5
    downs = np.where(on_purpose, 0.0, downs)
    return down, up, downs, readable, on_purpose


def _cabled(poll: Poll, ports: list[str]) -> np.ndarray:
    return np.array([poll.fabric.peer(poll.frame.device, p) is not None for p in ports])


def describe(
    d: Describer, incident: Incident, group: Group, latest: Symptom, active: set[SymptomKey]
) -> None:
    own = [s for s in group.members if s.kind == "link_down"]
    ends = sorted({(s.device, s.port) for s in own})
    flaps = max((int(s.evidence.get("flaps", 0)) for s in own), default=0)
    incident.evidence["flaps"] = max(flaps, int(incident.evidence.get("flaps", 0)))
    down = any(s.evidence.get("state") == "down" for s in own)
    incident.evidence["state"] = "down" if down else "up"
    taken = sorted({(s.device, s.port) for s in own if s.evidence.get("on_purpose")})
    if taken:
        incident.evidence["taken_down_at"] = ", ".join(f"{dev} {port}" for dev, port in taken)
    if taken or incident.evidence.get("on_purpose"):
        incident.evidence["on_purpose"] = 1  # said once, it stays: the link's end may come up first
        incident.finding = True
    # A host cut off, or a fabric link's traffic on fewer members; on purpose, the operator's own.
    incident.severity = "info" if incident.finding else "critical"
    devices = {dev for dev, _ in ends} | {incident.root.device}
    incident.devices |= devices
    hosts = {d.fabric.host_of(dev) for dev in devices if d.fabric.is_nic(dev)}
    incident.hosts |= hosts
    d.jobs.attach(incident, hosts, incident.start_ns)
    far = d.fabric.peer(incident.root.device, incident.root.port)
    link = f"{incident.root.device} {incident.root.port}" + (f" <-> {far[0]} {far[1]}" if far else "")
    n = incident.evidence["flaps"]
    if incident.finding:
        where = incident.evidence.get("taken_down_at", "one end")
        what = f"was taken down on purpose (admin down at {where})" if down else "is back up"
    elif down:
        what = "is down" if n <= 1 else f"is down again ({n} times since it began)"
    else:
        what = f"flaps: down {n} times" if n > 1 else "went down and came back"
    job = f"; job {', '.join(incident.jobs)}" if incident.jobs else ""
    ends = [(incident.root.device, incident.root.port), *([far] if far else [])]
    fewer = _groups_short(d, ends, active) if down else ""
    incident.evidence.pop("ecmp_groups", None)
    if fewer:
        incident.evidence["ecmp_groups"] = fewer
    incident.summary = f"link {link} {what}{job}" + (f"; {fewer}" if fewer else "")
    if incident.finding:
        incident.hint = f"Taken down on purpose: enable {where} again when the work on it is done."
        return
    incident.hint = (
        f"Check the optic and cable of {link}: reseat or replace the optic of a link that flaps; "
        "for one that stays down, check the far end is powered and its port enabled."
    )


def _groups_short(d: Describer, ends: list[tuple[str, str]], active: set[SymptomKey]) -> str:
    """The ECMP groups the down link is a member of, each with how many of its members are up
    (those without an active link down incident of their own, approximately: a flapping one
    counts as down between its flaps): its traffic runs on the others, which is no collapse."""
    down = {(key[1], key[2]) for key in active if key[0] == "link_down"}
    said = []
    for device, port in ends:
        for group in d.fabric.ecmp_groups(device):
            if port in group.members:
                members = set(group.members)
                up = len(members) - len({(device, m) for m in members} & down)
                said.append(f"{group.id} runs on {up} of {len(members)} members")
    return ", ".join(said)


def _delay_bound_s(poll_s: float, config: Any, severity: str) -> float:
    """Seen in the first poll after it went down."""
    return poll_s


DOWN = IncidentKind(
    name="link_down",
    title="Link down or flapping",
    colour="tab:red",
    hint="Check the optic and the cable of the link; then the far end's port.",
    describe=describe,
    carried=("flaps",),
    updated_on=("flaps", "state", "on_purpose"),
    delay_bound_s=_delay_bound_s,
    delay="1 poll",
)

DETECTOR = Detector(
    name="link_state",
    symptoms=(SymptomKind("link_down", "link_down", link_root),),
    incidents=(DOWN,),
    device_kinds=frozenset({"nic", "switch"}),
    make=lambda config: LinkState(config.link_state),
    signals=SIGNALS,
    config=("link_state", LinkStateConfig),
)
