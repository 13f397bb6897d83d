"""What a detector declares, once, in its own module; ``registry.py`` lists the declarations and
everything else reads them: stage 1 (which detectors run on which device, and which polls they may
skip), stage 2 (which symptom makes which incident, where it is rooted, what it says), the
evaluation (which kinds are scored) and the report (names and colours).

A detector is one or more of four shapes:

* a **device detector** (stage 1): ``make(config)`` builds one object per stage 1 that is given
  every poll of the devices of ``device_kinds`` (``update``) and returns symptoms;
* a **symptom kind** it emits, which either makes (or joins) an incident of an ``IncidentKind`` and
  is rooted by its ``root`` rule (stage 2), or is evidence only, read by other incidents;
* an **incident kind**, with its title, colour, hint, description and latency promise;
* a **job detector** (the job stage, ``job_stage.py``): ``job(config)`` builds one object that is
  given each communicator of each job (``check``) and returns its ``JobFinding``s, which the job
  stage turns into incidents of the detector's kinds, joined to the fabric's.

Kinds are data: ``Anomaly.kind`` is a string, so a sink or an alerter one release older stores and
delivers a kind it has never heard of.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import msgspec
import numpy as np

from fabricwatch.detectors.fabric import FabricMap
from fabricwatch.detectors.incident_state import Group, Incident, SymptomKey
from fabricwatch.detectors.job_calls import CommCalls
from fabricwatch.detectors.job_steps import JobSteps
from fabricwatch.detectors.jobs import JobAttribution
from fabricwatch.detectors.rates import CounterColumns, Layout, RateFrame
from fabricwatch.detectors.roots import Roots
from fabricwatch.schemas.messages import RootCause, Symptom


@dataclass(frozen=True)
class Poll:
    """One device's poll, as a device detector is given it."""

    frame: RateFrame
    line_Bps: np.ndarray
    """Line rate per port in bytes/s (from the topology, or the default link speed)."""
    fabric: FabricMap


@dataclass(slots=True)
class PollStack(CounterColumns):
    """Polls of one device kind, counter layout and port count, stacked for a detector's
    ``screen``: ``values`` is polls x ports x columns, so the columns read as in a poll's frame
    (``port``, ``aligned``) with a leading axis of polls."""

    frames: Sequence[RateFrame]
    line_Bps: np.ndarray
    """Polls x ports, as each poll's ``Poll.line_Bps``."""
    fabric: FabricMap
    layout: Layout
    values: np.ndarray
    dt_s: np.ndarray
    """Per poll, its interval in seconds."""

    @classmethod
    def of(cls, frames: Sequence[RateFrame], lines: Sequence[np.ndarray], fabric: FabricMap) -> PollStack:
        dt_s = np.array([f.dt_s for f in frames])
        if len(frames) == 1:  # one poll read as a stack (the in-process pipeline): views, no copy
            return cls(frames, lines[0][None], fabric, frames[0].layout, frames[0].values[None], dt_s)
        values = np.stack([f.values for f in frames])
        return cls(frames, np.stack(lines), fabric, frames[0].layout, values, dt_s)

    def only(self, which: np.ndarray) -> PollStack:
        """The polls of the stack where ``which`` (a boolean per poll) holds: the stack itself where
        it holds of every poll (a marking switch's polls all pause a little), not a copy."""
        if which.all():
            return self
        frames = [f for f, keep in zip(self.frames, which.tolist(), strict=True) if keep]
        return PollStack(
            frames, self.line_Bps[which], self.fabric, self.layout, self.values[which], self.dt_s[which]
        )

    def host_facing(self) -> np.ndarray:
        """Polls x ports: ``FabricMap.host_facing`` of each poll's device."""
        return np.stack([self.fabric.host_facing(f.device, f.ports) for f in self.frames])

    def topology_Bps(self) -> np.ndarray:
        """Polls x ports: each poll's line rate as the topology gives it, NaN where it does not
        (``FabricMap.speeds``)."""
        return np.stack([self.fabric.speeds(f.device, f.ports)[1] for f in self.frames])

    def above_zero(self, names: frozenset[str]) -> np.ndarray:
        """Per poll, ``RateFrame.any_above_zero``."""
        cols = self.layout.columns_of(names)
        return (self.values[..., cols] > 0).any(axis=(1, 2))


class DeviceDetector(Protocol):
    def update(self, poll: Poll) -> list[Symptom]:
        """Symptoms that started, changed or cleared in this poll."""
        ...

    def open(self, device: str) -> bool:
        """Whether a streak of the device's is running or reported: its next poll matters even if
        it carries none of the detector's signals."""
        ...


@runtime_checkable
class Screening(DeviceDetector, Protocol):
    """A device detector that can tell, for a whole batch's polls of one layout in one numpy pass,
    which of them it would judge for nothing: a marking switch's incast screen costs a stack's
    pass, not one per switch. Detectors that read every poll (no ``signals``), those of rare
    events (a marking NIC's poll shows none of theirs) and the paced ones (their due checks)."""

    def screen(self, stack: PollStack) -> np.ndarray:
        """Per poll of the stack: whether, its device having no streak open, ``update`` would say
        nothing and change nothing but what ``pass_over`` keeps. Read from the poll, and from
        no state but what the batch's earlier polls can only add to (the sensors optics judged)."""
        ...

    def pass_over(self, poll: Poll) -> None:
        """What ``update`` keeps of a poll its screen passed over (the incast detector: the
        switch's rates when no queue is congested)."""
        ...


class PacedDetector(DeviceDetector, Protocol):
    every_s: float
    """Seconds between two checks of a device."""

    def due(self, device: str, ts_ns: int) -> bool:
        """Whether the device's poll at ``ts_ns`` is to be checked (``paced.Pacer``)."""
        ...

    def next_due_ns(self, device: str) -> int | None:
        """When the device is next due; None before its first check."""
        ...


class Recorder(PacedDetector, Protocol):
    def record(self, poll: Poll) -> None:
        """Take note of one poll's rates, calm or not."""
        ...


@runtime_checkable
class StackedRecorder(Recorder, Protocol):
    """A recorder that reads a batch's polls of one layout in one numpy pass (``readings``), and
    then records each in turn from its reading: noting a switch's poll reads every queue."""

    def readings(self, stack: PollStack) -> Sequence[Any]:
        """Per poll of the stack, what ``record`` takes of it. Read from the poll alone."""
        ...

    def record(self, poll: Poll, reading: Any = None) -> None:
        """``Recorder.record``, from the poll's ``reading`` where given."""
        ...


@dataclass(frozen=True)
class JobFinding:
    """What a job detector finds wrong with one communicator of a job, as of one check. The same
    ``key`` from check to check is one incident; a finding no longer returned has cleared."""

    kind: str
    job: str
    comm: str
    key: str
    """Which incident it is, within its job and communicator (a rank, a collective and size)."""
    start_ns: int
    severity: str
    root: RootCause
    """The host or rank to blame where the job's records point at one (a straggler), else the
    job itself (``RootCause(job, group="job:<job>")``, shown as such); a fabric cause, when one
    is found, is named by ``caused_by``."""
    summary: str
    hint: str
    evidence: dict[str, float | int | str]
    hosts: tuple[str, ...] = ()
    collective: str = ""


class JobDetector(Protocol):
    def check(self, comm: CommCalls, now_ns: int) -> list[JobFinding]:
        """What is wrong with ``comm`` now (its occurrences completed so far, the time)."""
        ...


@runtime_checkable
class StepJudge(Protocol):
    """A job detector that also judges a job's steps (``job_steps``)."""

    def check_steps(self, steps: JobSteps, now_ns: int) -> list[JobFinding]:
        """What is wrong with the job's steps now (those completed so far, the time)."""
        ...


class ClockWatch(Protocol):
    """A detector timed by the fabric's clock rather than by what a poll shows: told of every
    poll, swept as stage 1's time moves (``silence``)."""

    def seen(self, device: str, device_kind: str, ts_ns: int, source: str = "") -> bool:
        """A poll of the device, read from input partition ``source``; True when its rates span a
        spell the watch found the device dark (averages over it, which no detector should judge as
        the device's present)."""
        ...

    def seen_many(
        self, devices: Sequence[str], kinds: Sequence[str], ts_ns: Sequence[int], sources: Sequence[str]
    ) -> list[int]:
        """``seen`` of a batch's polls in turn, with the same results: the positions of those
        that return ``True``."""
        ...

    def sweep(self, now_ns: int, by_source: Mapping[str, int] | None = None) -> list[Symptom]:
        """Symptoms that started or cleared as time moved to ``now_ns`` (per input partition:
        ``by_source``)."""
        ...

    def forget(self, devices: Iterable[str], now_ns: int) -> list[Symptom]:
        """Stop timing these devices (read by another worker now); clear what was reported."""
        ...


class Placement(Protocol):
    """What stage 2 offers a root rule or a ripeness test while a tick groups the active symptoms
    (``incidents.Placement``)."""

    @property
    def fabric(self) -> FabricMap: ...

    @property
    def roots(self) -> Roots: ...

    explained: set[str]
    """Devices of open incidents whose kind explains what else they show."""

    def ports_with(self, kind: str) -> set[tuple[str, str]]:
        """(device, port) of every active symptom of ``kind``."""
        ...

    def storm_root(self, key: SymptomKey, sym: Symptom) -> RootCause:
        """The open storm a paused port belongs to (membership is sticky)."""
        ...

    def hosts_held(self) -> set[str]:
        """The hosts of every open incident that is not a finding (its victims, its jobs')."""
        ...

    def jobs_on(self, host: str, at_ns: int, since_ns: int | None = None) -> list[str]:
        """The jobs whose phases run on ``host`` at ``at_ns``, and already did at ``since_ns``
        (the same phase all along), by name."""
        ...


class Describer(Protocol):
    """What a kind's ``describe`` is given (``describe.Describer``)."""

    @property
    def fabric(self) -> FabricMap: ...

    @property
    def roots(self) -> Roots: ...

    jobs: JobAttribution


RootRule = Callable[[Placement, SymptomKey, Symptom], RootCause | None]
"""Where a symptom's incident is rooted (its identity); None leaves the symptom out this tick."""

Describe = Callable[[Describer, Incident, Group, Symptom, set[SymptomKey]], None]
"""Fills in an incident's severity, hosts, jobs, evidence and summary from its group, its latest
symptom and the keys of every active symptom."""

DelayBound = Callable[[float, Any, str], float | None]
"""``(poll_s, detector config, label severity)`` -> the latest a fault of the kind may be found,
in seconds after it began (None: no promise)."""

Ripe = Callable[[Placement, Group], bool]
"""Whether a new incident may fire now; one that is not waits one poll of its group, at most."""


@dataclass(frozen=True)
class SymptomKind:
    name: str
    incident: str | None = None
    """The incident kind this symptom makes or joins; None: evidence for other incidents only."""
    root: RootRule | None = None
    until_cleared: bool = False
    """Held by stage 2 until stage 1 clears it, never expired for want of updates: a symptom about
    a device that is not reporting (``silence``) gets none."""


@dataclass(frozen=True)
class IncidentKind:
    name: str
    title: str
    colour: str
    """A matplotlib colour name, for the report."""
    hint: str
    """What to do, unless the description sets one of its own."""
    describe: Describe
    carried: tuple[str, ...] = ()
    """Evidence that is the incident's over its life, not its latest symptom's: kept from update
    to update (a peak, a sticky finding)."""
    finding: bool = False
    """A state of the fabric between incidents (capacity, microbursts), not a fault: its anomalies
    say so (``Anomaly.finding``), and the alerter routes them apart from incident pages."""
    needs_model: bool = False
    """Found only with a learned model loaded: not scored by the evaluation otherwise."""
    delay_bound_s: DelayBound | None = None
    delay: str = ""
    """The bound in words, for the evaluation's printout (``detection_time_s + 1 poll``)."""
    ripe: Ripe | None = None
    """None: fires as soon as its symptoms are grouped."""
    reported_root: Callable[[Placement, Group], RootCause] | None = None
    """The root reported once its symptoms are grouped, where it is not the identity the root rule
    gave (an incast is identified by its receiving host, reported at its first rail's leaf port)."""
    freezes_traffic: bool = False
    """While it is open, other incidents on its devices do not resolve: their silence is its doing."""
    blinds: bool = False
    """While it is open nothing is known of its root device: no other incident on that device
    resolves, whatever its kind (a storm's root gone dark is not a storm over)."""
    explains_devices: bool = True
    """A learned outlier on a device of such an incident is part of it, not an incident of its own."""
    updated_on: tuple[str, ...] = ()
    """Evidence whose change is news (an ``updated`` event), beside severity, devices, jobs and root:
    a link down again, its flap count."""
    loses_frames: Callable[[Group], bool] | None = None
    """Whether a group of this kind is a link that damages or drops frames: NICs whose only oddity
    is retransmissions, on hosts that share a job with its NIC ends, are its echo and join it
    (``Correlator._fold_retransmission_echoes``)."""
    caused_by: tuple[str, ...] = ()
    """Incident kinds that, open at one of its ports when it fires (their root's or a symptom's
    port, or either end of the link), cause it: it fires linked to that incident
    (``Anomaly.caused_by``) and the alerter does not page it on its own (drops at an incast's
    overflowing queue, at a dead link)."""


@dataclass(frozen=True)
class Detector:
    name: str
    symptoms: tuple[SymptomKind, ...] = ()
    incidents: tuple[IncidentKind, ...] = ()
    device_kinds: frozenset[str] = frozenset()
    """Devices whose polls ``make``'s detector is given (``nic``, ``switch``)."""
    make: Callable[[Any], DeviceDetector] | None = None
    """Builds the device detector from the whole detector config; None for a detector that runs
    in stage 2 only, or whose object is given to stage 1 (the learned outliers)."""
    watch: Callable[[Any], ClockWatch] | None = None
    """Builds, from the whole detector config, a stage-1 watch timed by the fabric's clock."""
    signals: frozenset[str] | None = None
    """Counters of which at least one must be above zero in a poll for the detector to say
    anything about it while no streak of the device is open. Declared, a device kind all of whose
    detectors declare theirs has its calm polls skipped by the batch path; None: every poll."""
    config: tuple[str, type[msgspec.Struct]] | None = None
    """Its section of the ``detectors:`` config: key and struct (defaults when absent)."""
    job: Callable[[Any], JobDetector] | None = None
    """Builds, from the whole detector config, a job detector of the job stage."""
    paced: bool = False
    """A detector of slow faults whose signals never read zero on a healthy port (corrected FEC
    codewords on a PAM4 link, a negotiated speed, an optic's power): declaring them would end the
    calm-poll skip for every device. Its ``make`` builds a ``PacedDetector``, given a device's poll
    whenever it says the device is due (calm or not), and no other; its ``signals`` are ignored."""
    records: bool = False
    """A paced detector that also takes note of every poll of its devices (``Recorder.record``,
    calm or not): what it judges at its checks is a series of polls (a job's rhythm), and noting
    one costs a lookup and a write, not a detector's pass."""


def by_the_job_stage(*_: object) -> None:
    """The ``describe`` of a job detector's incident kinds: the job stage words them from its
    findings; no symptom makes them in stage 2."""
    raise TypeError("a job incident is described by the job stage, not from symptoms")
