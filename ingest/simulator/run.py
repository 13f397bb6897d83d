"""The simulation loop: walk the timeline segment by segment, poll every device, write the trace.

Time is integer nanoseconds from the start, cut at every event (poll, activity or burst edge, fault
stage, reset), so nothing depends on float accumulation and the fabric is constant within a segment.
All randomness comes from one PCG64 stream drawn in a fixed order, and nothing reads the wall clock
except the returned ``wall_seconds``: the same scenario and seed give the same bytes.

What a collector gets wrong on purpose (each optional, see ``collector`` in docs/scenarios.md):
read-time jitter, per-device clock skew, missed polls, duplicated and reordered deliveries, and
counter resets. A record's ``ts_ns`` is when the snapshot was delivered (true time, non-decreasing in
the file); the snapshot's own ``ts_ns`` is the device-side reading time, skew included.
"""

from __future__ import annotations

import fnmatch
import time
from collections import OrderedDict, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fabricwatch.ingest.simulator.bursts import BurstTruth
from fabricwatch.ingest.simulator.calls import call_timers, pace
from fabricwatch.ingest.simulator.congestion import solve
from fabricwatch.ingest.simulator.counters import (
    NIC_TABLE,
    PHY_GAUGES,
    QUEUE,
    SWITCH_TABLE,
    Bank,
    Rates,
    Table,
    rates,
)
from fabricwatch.ingest.simulator.fabric import NIC_PORT, Fabric, build_fabric
from fabricwatch.ingest.simulator.faults import FaultPlan, plan_faults
from fabricwatch.ingest.simulator.graphs import comm_graphs
from fabricwatch.ingest.simulator.hot_links import hot_link_labels
from fabricwatch.ingest.simulator.scenario import Scenario
from fabricwatch.ingest.simulator.steps import step_messages
from fabricwatch.ingest.simulator.traffic import NS, ActivityRun, Flows, job_activities
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import CounterSpec, Label, Phase, PhaseMessage, Snapshot, phase_time
from fabricwatch.schemas.trace import TraceWriter

SOURCE = "sim"
STATE_CACHE = 256  # distinct fabric states kept solved; bursty scenarios revisit a few states
OCCUPANCY_SPREAD = 0.3  # an instantaneous queue reading wanders this much around its equilibrium
PEAK_EXCESS = 0.25  # a watermark catches peaks up to this much above the equilibrium


@dataclass(frozen=True)
class SimStats:
    records: int
    snapshots: int
    values: int
    simulated_seconds: float
    wall_seconds: float


@dataclass(frozen=True)
class _Device:
    name: str
    kind: str  # "nic" | "switch"
    rows: slice
    ports: list[str]


def simulate(scenario: Scenario, out: Path, seed: int | None = None) -> SimStats:
    """Simulate ``scenario`` into a trace at ``out`` (gzipped if it ends in .gz).

    ``seed`` overrides the scenario's, so one file can give many independent runs.
    """
    wall = time.perf_counter()
    seed = scenario.seed if seed is None else seed
    fabric = build_fabric(scenario.fabric)
    activities = job_activities(scenario, fabric)
    plan = plan_faults(scenario, fabric, activities)
    sim = _Simulation(scenario, fabric, activities + plan.activities, plan, seed)
    plan.labels += sim.traffic_labels()
    meta = {
        "scenario": scenario.name,
        "seed": seed,
        "duration_s": sim.end_ns / NS,
        "poll_interval_s": scenario.poll_interval,
        "hosts": len(fabric.hosts),
    }
    with TraceWriter(out, "simulate", scenario.start_ns, meta) as writer:
        sim.run(writer)
    return SimStats(writer.records, sim.snapshots, sim.values, sim.end_ns / NS, time.perf_counter() - wall)


class _Simulation:
    def __init__(
        self, sc: Scenario, fabric: Fabric, activities: list[ActivityRun], plan: FaultPlan, seed: int
    ) -> None:
        self.sc, self.fabric, self.activities, self.plan = sc, fabric, activities, plan
        self.rng = np.random.Generator(np.random.PCG64(seed))
        self.poll_ns = round(sc.poll_interval * NS)
        self.end_ns = int(sc.duration * NS) // self.poll_ns * self.poll_ns
        c = sc.collector
        n_sw_rows = int(fabric.switch_rows[-1])
        self.nic_bank = Bank(NIC_TABLE, fabric.n_nics, c.counter_start, self.rng)
        self.sw_bank = Bank(SWITCH_TABLE, n_sw_rows, c.counter_start, self.rng)
        self.devices = [_Device(n, "nic", slice(i, i + 1), [NIC_PORT]) for i, n in enumerate(fabric.nics)]
        rows = fabric.switch_rows
        self.devices += [
            _Device(n, "switch", slice(int(rows[s]), int(rows[s + 1])), fabric.switch_ports[s])
            for s, n in enumerate(fabric.switches)
        ]
        self.sw_sizes = np.diff(rows)
        self._index = {d.name: i for i, d in enumerate(self.devices)}
        self.skew_ns = np.round(self.rng.uniform(-1, 1, len(self.devices)) * c.clock_skew_max * NS).astype(
            np.int64
        )
        self.events = self._events()
        self.cache: OrderedDict[tuple, tuple[Rates, dict[int, float]]] = OrderedDict()
        self.timers = call_timers(sc, activities)
        """Activities with timed calls, by index: their pace is taken from each state."""
        self.steps = step_messages(activities, sc.start_ns)
        self.next_step = 0
        phases = [a.phase for a in activities if a.phase]
        graphs = comm_graphs(fabric, activities)
        self.phases: list[PhaseMessage] = sorted([*graphs, *phases], key=_delivery)
        self.next_phase = 0
        self.held: dict[int, Snapshot] = {}
        self.refresh_ns = self._refresh_intervals()
        self.exported = self._exported_columns()
        self.refreshed: dict[int, tuple[int, list[list[int]]]] = {}
        """Per slowly refreshed device, when it last refreshed and the values it shows since."""
        self.snapshots = self.values = 0
        # State of the segment just integrated: what a read slightly in the past rewinds along.
        self.last_nic = np.zeros_like(self.nic_bank.total)
        self.last_sw = np.zeros_like(self.sw_bank.total)
        self.last_seconds = 0.0
        self.queue = np.zeros(n_sw_rows)
        self.peak = np.zeros(n_sw_rows)

    def _refresh_intervals(self) -> dict[int, int]:
        """Device index -> refresh interval in ns, for devices slower than the poll."""
        out: dict[int, int] = {}
        for i, dev in enumerate(self.devices):
            rule = next(
                (r for r in self.sc.collector.refresh if fnmatch.fnmatchcase(dev.name, r.devices)), None
            )
            if rule is not None and round(rule.interval * NS) > self.poll_ns:
                out[i] = round(rule.interval * NS)
        return out

    def _exported_columns(self) -> dict[int, tuple[list[CounterSpec], list[int]]]:
        """Device index -> the counters it exports and their columns, for devices that omit some."""
        out: dict[int, tuple[list[CounterSpec], list[int]]] = {}
        for i, dev in enumerate(self.devices):
            omitted = {
                name
                for rule in self.sc.collector.omit
                if fnmatch.fnmatchcase(dev.name, rule.devices)
                for name in rule.counters
            }
            specs = (NIC_TABLE if dev.kind == "nic" else SWITCH_TABLE).specs
            if omitted & {s.name for s in specs}:
                cols = [c for c, spec in enumerate(specs) if spec.name not in omitted]
                out[i] = ([specs[c] for c in cols], cols)
        return out

    def _as_refreshed(self, d: int, t_ns: int, values: list[list[int]]) -> list[list[int]]:
        """What a slowly refreshed device shows at poll ``t_ns``: its values as of its last refresh
        (at a multiple of its interval), so reads between refreshes repeat them."""
        interval = self.refresh_ns.get(d)
        if interval is None:
            return values
        at = t_ns // interval * interval
        last = self.refreshed.get(d)
        if last is None or last[0] < at:
            self.refreshed[d] = last = (at, values)
        return last[1]

    def _events(self) -> dict[int, list[tuple[str, int, str, int]]]:
        """Resets and firmware events by time: ("reset", device, "", 0) or ("bump", nic, counter, n)."""
        c = self.sc.collector
        events: dict[int, list[tuple[str, int, str, int]]] = defaultdict(list)
        for r in c.resets:
            events[round(r.at * NS)].append(("reset", self._index[r.device], "", 0))
        seconds = self.end_ns / NS
        counts = self.rng.poisson(c.reset_rate_per_hour * seconds / 3600, len(self.devices))
        times = self.rng.uniform(0, seconds, int(counts.sum()))
        for dev, t in zip(np.repeat(np.arange(len(self.devices)), counts), times, strict=True):
            events[round(t * NS)].append(("reset", int(dev), "", 0))
        for imp in self.plan.impulses:
            events[round(imp.t * NS)].append(("bump", imp.port, imp.counter, imp.amount))
        return events

    def _edges(self) -> np.ndarray:
        times = [a.edges() for a in self.activities] + [np.array(c.edges()) for c in self.plan.conditions]
        ns = np.round(np.concatenate([np.zeros(0), *times]) * NS).astype(np.int64)
        polls = np.arange(0, self.end_ns + 1, self.poll_ns, dtype=np.int64)
        events = np.fromiter(self.events, dtype=np.int64, count=len(self.events))
        edges = np.unique(np.concatenate([polls, ns, events]))
        return edges[(edges >= 0) & (edges <= self.end_ns)]

    def run(self, writer: TraceWriter) -> None:
        t0 = self.sc.start_ns
        writer.write_message(topics.TOPOLOGY, "fabric", t0, self.fabric.topology(t0))
        for label in self.plan.labels:
            # Right after the topology, so a reader has the ground truth before any data.
            writer.write_message(topics.LABELS, label.kind, t0, label)
        edges = self._edges()
        self._poll(writer, 0)
        for a, b in zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True):
            for event in self.events.get(a, ()):
                self._apply(event)
            state, paces = self._state((a + b) / 2 / NS)
            self._integrate(state, (b - a) / NS)
            for i, timer in self.timers.items():
                timer.advance(a / NS, b / NS, paces.get(i, 1.0), self.sc.start_ns)
            if b % self.poll_ns == 0:
                self._poll(writer, b)
                self._calls_until(writer, b)
        self._flush(writer)

    def traffic_labels(self) -> list[Label]:
        """The findings the run's traffic makes rather than a fault: capacity (``hot_links``) and
        microbursts (``bursts``), from its noise-free state, segment by segment, in one pass (the
        solved states are cached for the run itself)."""
        sc, edges = self.sc, self._edges()
        bursts = BurstTruth(self.fabric, self.end_ns / NS, sc.poll_interval, sc.fabric.ecn_kmin_kb * 1024)
        paused = SWITCH_TABLE.col("rx_pfc_duration_us", QUEUE)

        def segments() -> Iterator[tuple[float, float, np.ndarray]]:
            for a, b in zip(edges[:-1].tolist(), edges[1:].tolist(), strict=True):
                state = self._state((a + b) / 2 / NS)[0]
                bursts.add(a / NS, b / NS, state.util, state.queue, state.switch[:, paused] / 1e6)
                yield a / NS, b / NS, state.util

        hot = hot_link_labels(
            self.fabric, segments(), self.end_ns / NS, sc.poll_interval, sc.start_ns, sc.collector.noise
        )
        return hot + bursts.labels(sc.start_ns)

    def _apply(self, event: tuple[str, int, str, int]) -> None:
        what, index, counter, amount = event
        if what == "bump":
            n_nics = self.fabric.n_nics
            bank, row = (self.nic_bank, index) if index < n_nics else (self.sw_bank, index - n_nics)
            bank.bump(row, counter, amount)
            return
        device = self.devices[index]
        (self.nic_bank if device.kind == "nic" else self.sw_bank).reset(device.rows)

    def _state(self, t: float) -> tuple[Rates, dict[int, float]]:
        """The solved fabric at time ``t`` (seconds), from the cache when this state was seen before,
        and the pace of each running activity with timed calls."""
        on = tuple(i for i, a in enumerate(self.activities) if a.on_at(t))
        stages = tuple((j, s) for j, c in enumerate(self.plan.conditions) if (s := c.stage_at(t)) is not None)
        key = (on, stages)
        hit = self.cache.get(key)
        if hit is not None:
            self.cache.move_to_end(key)
            return hit
        flows = Flows.concat([self.activities[i].flows for i in on])
        st = solve(self.fabric, flows, [(self.plan.conditions[j], s) for j, s in stages])
        offsets = np.cumsum([0] + [len(self.activities[i].flows.demand) for i in on])
        paces = {
            i: pace(st.flow_rate[lo:hi], flows.demand[lo:hi])
            for i, lo, hi in zip(on, offsets[:-1], offsets[1:], strict=True)
            if i in self.timers
        }
        self.cache[key] = result = (rates(self.fabric, st), paces)
        if len(self.cache) > STATE_CACHE:
            self.cache.popitem(last=False)
        return result

    def _integrate(self, r: Rates, seconds: float) -> None:
        """Advance every counter by one segment, with per-link traffic noise that never exceeds line rate."""
        f = self.fabric
        sigma = self.sc.collector.noise
        noise = 1.0 + sigma * self.rng.standard_normal(f.n_links)
        noise = np.clip(noise, 0.0, 1.0 / np.maximum(r.util, 1e-9))
        self.last_nic = r.nic * _multiplier(NIC_TABLE, noise[f.nic_up], noise[f.nic_down])
        out, inn = f.port_out[f.n_nics :], f.port_in[f.n_nics :]
        self.last_sw = r.switch * _multiplier(SWITCH_TABLE, noise[out], noise[inn])
        self.last_seconds = seconds
        self.nic_bank.add(self.last_nic, seconds)
        self.sw_bank.add(self.last_sw, seconds)
        self.queue = r.queue
        peaks = r.queue * (1.0 + PEAK_EXCESS * self.rng.random(len(r.queue)))
        np.maximum(self.peak, peaks, out=self.peak)

    def _poll(self, writer: TraceWriter, t_ns: int) -> None:
        """Read every device at ``t_ns`` (minus its jitter) and deliver the snapshots in read order."""
        c = self.sc.collector
        n_dev, n_nics = len(self.devices), self.fabric.n_nics
        jitter_ns = np.round(self.rng.uniform(0, 2 * c.jitter_ms * 1e6, n_dev)).astype(np.int64)
        jitter_ns *= t_ns > 0  # the first poll is the start of time: nothing is read before it
        gap = self.rng.random(n_dev) < c.gap_probability
        t = t_ns / NS
        for device, start, end in self.plan.silences:
            gap[self._index[device]] |= start <= t < end
        dup = self.rng.random(n_dev) < c.duplicate_probability
        hold = self.rng.random(n_dev) < c.reorder_probability
        back = np.minimum(jitter_ns / NS, self.last_seconds)
        nic_values = self.nic_bank.read(self.last_nic, back[:n_nics])
        sw_values = self.sw_bank.read(self.last_sw, np.repeat(back[n_nics:], self.sw_sizes))
        spread = 1.0 + OCCUPANCY_SPREAD * (self.rng.random(len(self.queue)) - 0.5)
        occupancy = self.queue * spread
        read_sw = np.repeat(~gap[n_nics:], self.sw_sizes)
        peak = np.maximum(self.peak, occupancy)
        sw_values[:, self.sw_bank.occupancy] = np.round(occupancy).astype(np.uint64)
        sw_values[:, self.sw_bank.watermark] = np.round(peak).astype(np.uint64)
        self.peak = np.where(read_sw, occupancy, peak)  # read-and-clear, on the devices actually read
        self._link_states(t, nic_values, sw_values)
        for values, rate, table in (
            (nic_values, self.last_nic, NIC_TABLE),
            (sw_values, self.last_sw, SWITCH_TABLE),
        ):
            cols = [table.col(name) for name in PHY_GAUGES]
            values[:, cols] = np.round(rate[:, cols]).astype(np.uint64)
        rows = nic_values.tolist() + sw_values.tolist()
        read_ns = self.sc.start_ns + t_ns - jitter_ns
        for d in np.argsort(read_ns, kind="stable").tolist():
            if gap[d]:
                continue
            dev = self.devices[d]
            specs = (NIC_TABLE if dev.kind == "nic" else SWITCH_TABLE).specs
            first = dev.rows.start + (0 if dev.kind == "nic" else n_nics)
            values = self._as_refreshed(d, t_ns, rows[first : first + len(dev.ports)])
            if d in self.exported:
                specs, cols = self.exported[d]
                values = [[row[c] for c in cols] for row in values]
            snap = Snapshot(
                device=dev.name,
                device_kind=dev.kind,  # type: ignore[arg-type]
                ts_ns=int(read_ns[d] + self.skew_ns[d]),
                counters=specs,
                ports=dev.ports,
                values=values,
                source=SOURCE,
            )
            at = int(read_ns[d])
            self._phases_until(writer, at)
            copies = [] if hold[d] and d not in self.held else [snap] * (2 if dup[d] else 1)
            if not copies:
                self.held[d] = snap
            elif d in self.held:
                copies.append(self.held.pop(d))
            for s in copies:
                writer.write_message(topics.COUNTERS, dev.name, at, s)
            self.snapshots += len(copies)
            self.values += len(copies) * len(dev.ports) * len(specs)
        self._phases_until(writer, self.sc.start_ns + t_ns)

    def _link_states(self, t: float, nic_values: np.ndarray, sw_values: np.ndarray) -> None:
        """``oper_down`` of every port whose link a ``down`` condition holds at ``t`` seconds, and
        ``admin_down`` of the end a planned one was taken down at."""
        held = [c for c in self.plan.conditions if c.kind == "down" and c.stage_at(t) is not None]
        if not held:
            return
        down = [link for c in held for link in c.links]
        admin = [c.links[0] for c in held if c.amount == 1.0]
        f = self.fabric
        nic = np.isin(f.nic_up, down) | np.isin(f.nic_down, down)
        sw = np.isin(f.port_out[f.n_nics :], down) | np.isin(f.port_in[f.n_nics :], down)
        nic_values[nic, NIC_TABLE.col("oper_down")] = 1
        sw_values[sw, SWITCH_TABLE.col("oper_down")] = 1
        nic_values[np.isin(f.nic_up, admin), NIC_TABLE.col("admin_down")] = 1
        sw_values[np.isin(f.port_out[f.n_nics :], admin), SWITCH_TABLE.col("admin_down")] = 1

    def _calls_until(self, writer: TraceWriter, t_ns: int) -> None:
        """Deliver the timed calls and the steps that ended by ``t_ns``, as the job's records would:
        at the poll."""
        at = self.sc.start_ns + t_ns
        for i, timer in self.timers.items():
            for msg in timer.take(self.activities[i].job):
                writer.write_message(topics.PHASES, msg.job, at, msg)
        while self.next_step < len(self.steps) and self.steps[self.next_step][0] <= at:
            steps = self.steps[self.next_step][1]
            writer.write_message(topics.PHASES, steps.job, at, steps)
            self.next_step += 1

    def _phases_until(self, writer: TraceWriter, t_ns: int) -> None:
        """Deliver phases that began by ``t_ns``, interleaved with snapshots so record times never go back."""
        while self.next_phase < len(self.phases) and phase_time(self.phases[self.next_phase]) <= t_ns:
            phase = self.phases[self.next_phase]
            writer.write_message(topics.PHASES, phase.job, phase_time(phase), phase)
            self.next_phase += 1

    def _flush(self, writer: TraceWriter) -> None:
        """Snapshots still held back for reordering are delivered at the end of the run."""
        at = self.sc.start_ns + self.end_ns
        for d in sorted(self.held):
            writer.write_message(topics.COUNTERS, self.devices[d].name, at, self.held[d])
            self.snapshots += 1
            self.values += len(self.devices[d].ports) * len(self.held[d].counters)
        self.held.clear()
        self._phases_until(writer, at)


def _delivery(msg: PhaseMessage) -> tuple[int, bool]:
    """By time (a graph's is its communicator's first call), a graph before the phases it explains."""
    return phase_time(msg), isinstance(msg, Phase)


def _multiplier(table: Table, tx: np.ndarray, rx: np.ndarray) -> np.ndarray:
    """Per-cell noise factor: tx columns follow the egress link's noise, rx columns the ingress link's."""
    return 1.0 + (tx - 1.0)[:, None] * table.tx_noisy + (rx - 1.0)[:, None] * table.rx_noisy
