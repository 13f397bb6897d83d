"""Scenario files: the YAML a user writes to describe a fabric, its jobs and the faults to inject.

Structure and types are checked by msgspec (its errors carry the key path); what msgspec cannot know
(host names that exist, times that make sense, loads that matter) is checked in ``_check``. Every
problem becomes one ``ScenarioError`` whose message starts with the offending key path, e.g.
``faults[1].root: unknown host 'h999'``, because a user fixes a YAML file by key, not by traceback.
The full format is documented in ``docs/scenarios.md``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Literal

import msgspec
import yaml

from fabricwatch.ingest.simulator.fault_kinds import (
    AbsorbedBurst,
    BalancedAllReduce,
    Burst,
    DegradingLink,
    DropBurst,
    EcmpCollapse,
    FailingOptic,
    Fault,
    HeadroomDrops,
    HostSelection,
    Idle,
    Incast,
    JobStop,
    LossyLink,
    NicRetransmit,
    NicSlowdown,
    PcieCappedNic,
    PfcStorm,
    SpeedDownshift,
    StepStretch,
    Straggler,
    SwitchStall,
)
from fabricwatch.schemas.config import ConfigError, check_keys
from fabricwatch.schemas.vocabulary import canonical

DEFAULT_START_NS = 1_767_225_600 * 1_000_000_000  # 2026-01-01T00:00:00Z: fixed, never now()


class _Strict(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """A scenario section (its fault kinds' base is ``fault_kinds.Strict``, the same)."""


class ScenarioError(ValueError):
    """A scenario that cannot be simulated; the message names the key path and the problem."""


class FabricSpec(_Strict):
    leaves: int = 4
    spines: int = 4
    hosts_per_leaf: int = 8
    nics_per_host: int = 1
    link_gbps: float = 400.0
    uplinks_per_spine: int = 1
    buffer_mb: float = 32.0
    ecn_kmin_kb: float = 150.0
    ecn_kmax_kb: float = 1500.0
    ecn_pmax: float = 0.2
    pfc_xoff_kb: float = 2000.0
    dcqcn_overload_limit: float = 4.0
    mtu: int = 4096
    hash_seed: int = 0


class Reset(_Strict):
    device: str
    at: float


class Refresh(_Strict):
    devices: str
    """Shell-style pattern of device names (``leaf*``, ``h00*/mlx5_0``)."""
    interval: float
    """Seconds between the device's refreshes of its counters: a read in between sees the last one."""


class Omit(_Strict):
    devices: str
    """Shell-style pattern of device names."""
    counters: list[str]
    """Counters those devices do not export (``queue_occupancy_bytes``: switches with watermarks
    but no current-depth gauge)."""


class CollectorSpec(_Strict):
    noise: float = 0.02
    jitter_ms: float = 2.0
    clock_skew_max: float = 0.0
    gap_probability: float = 0.0
    duplicate_probability: float = 0.0
    reorder_probability: float = 0.0
    reset_rate_per_hour: float = 0.0
    resets: list[Reset] = []
    counter_start: Literal["random", "zero", "near_wrap"] = "random"
    refresh: list[Refresh] = []
    """Devices that refresh their counters more slowly than they are polled (the first match wins)."""
    omit: list[Omit] = []
    """Counters some devices do not export (every matching rule applies)."""


ActivityOp = Literal["AllReduce", "ReduceScatter", "AllGather", "AllToAll", "SendRecv", "Reduce", "idle"]


class Calls(_Strict):
    """Timed calls of an activity (``calls.py``): each rank gives NCCL ``bytes`` per call, and the
    next call begins ``gap`` seconds (the step's compute) after one ends."""

    bytes: int = 256 << 20
    gap: float = 0.2
    comm: str = ""
    """Names the communicator: activities of a job that name the same one are one communicator
    (a job changing its message size, or pausing for a checkpoint, on the same ranks)."""


class Activity(_Strict):
    op: ActivityOp
    begin: float
    end: float
    load: float = 0.5
    burst: Burst | None = None
    root: str | None = None
    stages: int = 2
    calls: Calls | None = None
    steps: bool = False
    """The job's records mark each burst as a training step (``Steps``, what Kineto's
    ``ProfilerStep#N`` gives): a step runs from one burst's start to the next's."""


class Job(_Strict):
    name: str
    hosts: HostSelection
    placement: Literal["consecutive", "spread"] = "consecutive"
    first_host: int = 0
    qps_per_connection: int = 4
    schedule: list[Activity] = []


class Scenario(_Strict):
    duration: float
    name: str = ""
    description: str = ""
    seed: int = 0
    start_time: int | str = DEFAULT_START_NS
    poll_interval: float = 1.0
    fabric: FabricSpec = FabricSpec()
    collector: CollectorSpec = CollectorSpec()
    jobs: list[Job] = []
    faults: list[Fault] = []

    @property
    def start_ns(self) -> int:
        """Simulated epoch of t=0; validated at load, so it always parses."""
        return _parse_start(self.start_time)


def load_scenario(source: str | Path, overrides: Mapping[str, Any] | None = None) -> Scenario:
    """Load and validate a scenario from a file path or YAML text.

    ``overrides`` replaces top-level keys before validation (``{"duration": 20}`` for a quick run),
    so an override gets the same checks as the file.
    """
    text, origin = _read(source)
    try:
        raw = yaml.safe_load(text)
    except RecursionError:
        raise ScenarioError(f"{origin}: not valid YAML: nested too deeply") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{origin}: not valid YAML: {exc}") from None
    if raw is None:
        raw = {}
    if isinstance(raw, str) and "\n" not in text:
        raise ScenarioError(f"{origin}: no such file, and not a YAML mapping either: {text!r}")
    if not isinstance(raw, dict):
        raise ScenarioError(f"{origin}: expected a mapping of scenario keys, got {type(raw).__name__}")
    raw = {**raw, **(overrides or {})}
    if isinstance(raw.get("start_time"), date):
        raw["start_time"] = _date_to_text(raw["start_time"])
    try:
        check_keys(raw, Scenario, origin)
        scenario = msgspec.convert(raw, Scenario, str_keys=True)
        _check(scenario)
    except ConfigError as exc:  # an unknown key, with the one likely meant
        raise ScenarioError(str(exc)) from None
    except msgspec.ValidationError as exc:
        raise ScenarioError(f"{origin}: {_explain(str(exc))}") from None
    except ScenarioError as exc:
        raise ScenarioError(f"{origin}: {exc}") from None
    return scenario


def _read(source: str | Path) -> tuple[str, str]:
    if isinstance(source, Path) or (
        "\n" not in source and (source.endswith((".yaml", ".yml")) or Path(source).is_file())
    ):
        path = Path(source)
        try:
            return path.read_text(encoding="utf-8"), str(path)
        except OSError as exc:
            raise ScenarioError(f"{path}: cannot read: {exc.strerror}") from None
    return source, "scenario"


def _date_to_text(value: date) -> str:
    """PyYAML turns unquoted timestamps into datetimes; give them back as ISO text to parse in one place."""
    if isinstance(value, datetime):
        return value.isoformat()
    return datetime(value.year, value.month, value.day, tzinfo=UTC).isoformat()


_MSGSPEC_ERROR = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)


def _explain(message: str) -> str:
    """Rewrite msgspec's ``<problem> - at `$.a.b``` as ``a.b: <problem>``, naming unknown keys in the path."""
    m = _MSGSPEC_ERROR.match(message)
    assert m is not None  # the pattern matches any text
    what, path = m["what"], (m["path"] or "").lstrip(".")
    for pattern, template in (
        (r"Object contains unknown field `(.+)`", "unknown key"),
        (r"Object missing required field `(.+)`", "required key is missing"),
    ):
        fm = re.fullmatch(pattern, what)
        if fm:
            path = f"{path}.{fm[1]}" if path else fm[1]
            what = template
            break
    else:
        what = what[:1].lower() + what[1:]
    return f"{path or 'scenario'}: {what}"


def _parse_start(value: int | str) -> int:
    if isinstance(value, int):
        return value
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp()) * 1_000_000_000 + parsed.microsecond * 1000


class _Problems:
    """Collects the first problem; checks read as a flat list of rules."""

    def __init__(self) -> None:
        self.first: str | None = None

    def require(self, ok: bool, path: str, problem: str) -> None:
        if not ok and self.first is None:
            self.first = f"{path}: {problem}"


def _check(sc: Scenario) -> None:
    p = _Problems()
    _check_top(sc, p)
    _check_fabric(sc.fabric, p)
    _check_collector(sc, p)
    if p.first is None:
        names = _Names(sc.fabric)
        _check_jobs(sc, names, p)
        _check_faults(sc, names, p)
        for i, reset in enumerate(sc.collector.resets):
            p.require(names.device(reset.device), f"collector.resets[{i}].device", _unknown(reset.device))
            p.require(reset.at >= 0, f"collector.resets[{i}].at", "must not be negative")
    if p.first is not None:
        raise ScenarioError(p.first)


def _check_top(sc: Scenario, p: _Problems) -> None:
    p.require(0.1 <= sc.poll_interval <= 10, "poll_interval", "must be between 0.1 and 10 seconds")
    p.require(sc.duration >= sc.poll_interval, "duration", "must be at least one poll interval")
    p.require(sc.duration <= 7 * 86400, "duration", "must be at most a week of simulated time")
    p.require(sc.seed >= 0, "seed", "must be a non-negative integer")
    try:
        ns = _parse_start(sc.start_time)
        p.require(ns > 0, "start_time", "must be after 1970-01-01")
        p.require(
            ns >= 10**17, "start_time", "an integer start_time is in nanoseconds; this looks like seconds"
        )
    except ValueError:
        p.require(False, "start_time", f"not an ISO 8601 time or integer ns: {sc.start_time!r}")


def _check_fabric(f: FabricSpec, p: _Problems) -> None:
    for key in ("leaves", "spines", "hosts_per_leaf", "nics_per_host", "uplinks_per_spine"):
        p.require(getattr(f, key) >= 1, f"fabric.{key}", "must be at least 1")
    p.require(f.leaves * f.hosts_per_leaf <= 100_000, "fabric.hosts_per_leaf", "too many hosts")
    p.require(f.nics_per_host <= 16, "fabric.nics_per_host", "must be at most 16")
    p.require(f.link_gbps > 0, "fabric.link_gbps", "must be positive")
    p.require(f.buffer_mb > 0, "fabric.buffer_mb", "must be positive")
    p.require(0 < f.ecn_kmin_kb < f.ecn_kmax_kb, "fabric.ecn_kmax_kb", "must be above ecn_kmin_kb (> 0)")
    p.require(0 < f.ecn_pmax <= 1, "fabric.ecn_pmax", "must be in (0, 1]")
    p.require(f.pfc_xoff_kb > f.ecn_kmin_kb, "fabric.pfc_xoff_kb", "must be above ecn_kmin_kb")
    p.require(f.pfc_xoff_kb * 1024 < f.buffer_mb * 2**20, "fabric.pfc_xoff_kb", "must be below the buffer")
    p.require(f.dcqcn_overload_limit > 1, "fabric.dcqcn_overload_limit", "must be above 1")
    p.require(256 <= f.mtu <= 9000, "fabric.mtu", "must be between 256 and 9000 bytes")


def _check_collector(sc: Scenario, p: _Problems) -> None:
    c = sc.collector
    p.require(0 <= c.noise <= 0.5, "collector.noise", "must be between 0 and 0.5")
    p.require(
        0 <= c.jitter_ms * 1e-3 <= sc.poll_interval / 10, "collector.jitter_ms", "must be in [0, poll/10]"
    )
    p.require(
        0 <= c.clock_skew_max <= sc.poll_interval / 2, "collector.clock_skew_max", "must be in [0, poll/2]"
    )
    for key in ("gap_probability", "duplicate_probability", "reorder_probability"):
        p.require(0 <= getattr(c, key) < 1, f"collector.{key}", "must be in [0, 1)")
    p.require(0 <= c.reset_rate_per_hour <= 3600, "collector.reset_rate_per_hour", "must be in [0, 3600]")
    for i, rule in enumerate(c.refresh):
        p.require(rule.interval > 0, f"collector.refresh[{i}].interval", "must be positive")
    names = canonical()
    for i, omit in enumerate(c.omit):
        for j, name in enumerate(omit.counters):
            p.require(name in names, f"collector.omit[{i}].counters[{j}]", f"not a counter name: {name!r}")


class _Names:
    """Which names exist in a fabric, without building it."""

    def __init__(self, f: FabricSpec) -> None:
        self.fabric = f
        self.n_hosts = f.leaves * f.hosts_per_leaf

    def host(self, name: str) -> bool:
        i = _index(name, "h", 3)
        return i is not None and i < self.n_hosts

    def nic(self, name: str) -> bool:
        host, _, dev = name.partition("/mlx5_")
        return self.host(host) and dev.isdigit() and int(dev) < self.fabric.nics_per_host

    def leaf(self, name: str) -> bool:
        i = _index(name, "leaf", 2)
        return i is not None and i < self.fabric.leaves

    def spine(self, name: str) -> bool:
        i = _index(name, "spine", 2)
        return i is not None and i < self.fabric.spines

    def device(self, name: str) -> bool:
        return self.nic(name) or self.leaf(name) or self.spine(name)

    def switch_port(self, device: str, port: str) -> bool:
        f = self.fabric
        n = f.hosts_per_leaf * f.nics_per_host + f.spines * f.uplinks_per_spine
        if self.spine(device):
            n = f.leaves * f.uplinks_per_spine
        i = _index(port, "Ethernet", 1)
        return i is not None and i % 8 == 0 and i // 8 < n


def _index(name: str, prefix: str, digits: int) -> int | None:
    """The number in a generated name (``h007`` -> 7), or None unless the name is spelt exactly so."""
    rest = name[len(prefix) :]
    if not name.startswith(prefix) or not rest.isdigit() or name != f"{prefix}{int(rest):0{digits}d}":
        return None
    return int(rest)


def _unknown(name: str) -> str:
    return f"unknown device {name!r}"


def _check_hosts(sel: HostSelection | None, path: str, names: _Names, p: _Problems, spare: int = 0) -> None:
    if isinstance(sel, int):
        p.require(2 <= sel <= names.n_hosts - spare, path, f"must be between 2 and {names.n_hosts - spare}")
    elif sel is not None:
        for i, h in enumerate(sel):
            p.require(names.host(h), f"{path}[{i}]", f"unknown host {h!r}")
        p.require(len(set(sel)) == len(sel), path, "lists a host twice")
        p.require(len(sel) >= 2 - spare, path, "needs at least two hosts")


def _check_window(begin: float, end: float, path: str, p: _Problems) -> None:
    p.require(begin >= 0, f"{path}.begin", "must not be negative")
    p.require(end > begin, f"{path}.end", "must be after begin")


def _check_burst(burst: Burst | None, path: str, p: _Problems) -> None:
    if burst is not None:
        p.require(burst.duration > 0, f"{path}.duration", "must be positive")
        p.require(burst.period > burst.duration, f"{path}.period", "must be longer than the burst duration")


def _check_load(load: float, path: str, p: _Problems) -> None:
    p.require(0 < load <= 1, path, "must be a fraction of line rate in (0, 1]")


def _check_qps(qps: int | None, path: str, p: _Problems) -> None:
    p.require(qps is None or 1 <= qps <= 64, path, "must be between 1 and 64")


def _check_jobs(sc: Scenario, names: _Names, p: _Problems) -> None:
    seen: set[str] = set()
    for j, job in enumerate(sc.jobs):
        path = f"jobs[{j}]"
        p.require(bool(job.name) and job.name not in seen, f"{path}.name", "must be non-empty and unique")
        seen.add(job.name)
        _check_hosts(job.hosts, f"{path}.hosts", names, p)
        p.require(0 <= job.first_host < names.n_hosts, f"{path}.first_host", "not a host index")
        _check_qps(job.qps_per_connection, f"{path}.qps_per_connection", p)
        n_hosts = job.hosts if isinstance(job.hosts, int) else len(job.hosts)
        for a, act in enumerate(job.schedule):
            apath = f"{path}.schedule[{a}]"
            _check_window(act.begin, act.end, apath, p)
            _check_load(act.load, f"{apath}.load", p)
            _check_burst(act.burst, f"{apath}.burst", p)
            p.require(
                not act.steps or act.burst is not None, f"{apath}.steps", "needs a burst: a step per burst"
            )
            if act.op == "Reduce":
                p.require(act.root is not None, f"{apath}.root", "a Reduce needs a root host")
            if act.root is not None:
                members = job.hosts if isinstance(job.hosts, list) else None
                ok = names.host(act.root) and (members is None or act.root in members)
                p.require(ok, f"{apath}.root", f"unknown host {act.root!r} or not in the job")
            if act.op == "SendRecv":
                ok = 2 <= act.stages <= n_hosts
                p.require(ok, f"{apath}.stages", f"must be between 2 and the job's {n_hosts} hosts")


def _check_faults(sc: Scenario, names: _Names, p: _Problems) -> None:
    f = sc.fabric
    group_size = f.spines * f.uplinks_per_spine
    for i, fault in enumerate(sc.faults):
        path = f"faults[{i}]"
        p.require(fault.start >= 0, f"{path}.start", "must not be negative")
        p.require(fault.duration > 0, f"{path}.duration", "must be positive")
        if isinstance(fault, PfcStorm):
            p.require(names.host(fault.root) or names.nic(fault.root), f"{path}.root", _host(fault.root))
            p.require(fault.propagation_delay > 0, f"{path}.propagation_delay", "must be positive")
        elif isinstance(fault, SwitchStall):
            p.require(names.host(fault.toward), f"{path}.toward", _host(fault.toward))
            p.require(fault.propagation_delay > 0, f"{path}.propagation_delay", "must be positive")
        elif isinstance(fault, Incast | AbsorbedBurst):
            p.require(names.host(fault.receiver), f"{path}.receiver", _host(fault.receiver))
            _check_hosts(fault.senders, f"{path}.senders", names, p, spare=1)
            ok = not isinstance(fault.senders, list) or fault.receiver not in fault.senders
            p.require(ok, f"{path}.senders", "must not include the receiver")
            _check_load(fault.load, f"{path}.load", p)
            _check_qps(fault.qps, f"{path}.qps", p)
            n = fault.senders if isinstance(fault.senders, int) else len(fault.senders)
            if isinstance(fault, Incast):
                p.require(n * fault.load > 1, f"{path}.load", "senders x load must exceed line rate")
            else:
                _check_burst(fault.burst, f"{path}.burst", p)
                p.require(
                    n * fault.load < f.dcqcn_overload_limit,
                    f"{path}.load",
                    f"overload {n * fault.load:.1f}x would trigger PFC: a benign burst must stay "
                    f"below fabric.dcqcn_overload_limit ({f.dcqcn_overload_limit}x)",
                )
        elif isinstance(fault, EcmpCollapse):
            _check_collapse(fault, path, names, p, group_size)
        elif isinstance(fault, BalancedAllReduce):
            _check_hosts(fault.hosts, f"{path}.hosts", names, p)
            _check_load(fault.load, f"{path}.load", p)
            _check_qps(fault.qps, f"{path}.qps", p)
            p.require(group_size >= 2, f"{path}", "needs a fabric with at least two uplinks per leaf")
        elif isinstance(fault, Idle):
            p.require(names.leaf(fault.leaf), f"{path}.leaf", _unknown(fault.leaf))
            _check_load(fault.load, f"{path}.load", p)
        elif isinstance(fault, LossyLink):
            _check_link_end(fault, path, names, p)
            p.require(0 < fault.loss_rate < 0.1, f"{path}.loss_rate", "must be in (0, 0.1)")
        elif isinstance(fault, DegradingLink):
            _check_link_end(fault, path, names, p)
            ok = 0 < fault.pre_fec_ber < 2.4e-4
            p.require(ok, f"{path}.pre_fec_ber", "must be in (0, 2.4e-4): above it FEC fails (lossy_link)")
        elif isinstance(fault, FailingOptic):
            _check_link_end(fault, path, names, p)
            p.require(
                0 <= fault.power_mw < 0.2, f"{path}.power_mw", "must be in [0, 0.2): past its low alarm"
            )
        elif isinstance(fault, SpeedDownshift):
            _check_link_end(fault, path, names, p)
            p.require(0 < fault.factor < 1, f"{path}.factor", "must be in (0, 1)")
        elif isinstance(fault, HeadroomDrops | DropBurst):
            _check_drops(fault, path, names, p)
        elif isinstance(fault, NicRetransmit):
            p.require(names.host(fault.nic) or names.nic(fault.nic), f"{path}.nic", _host(fault.nic))
            p.require(0 < fault.rate < 0.1, f"{path}.rate", "must be in (0, 0.1)")
        elif isinstance(fault, Straggler):
            p.require(names.host(fault.host), f"{path}.host", _host(fault.host))
            p.require(fault.job in {j.name for j in sc.jobs}, f"{path}.job", f"unknown job {fault.job!r}")
            p.require(fault.delay > 0, f"{path}.delay", "must be positive")
        elif isinstance(fault, StepStretch | JobStop):
            job = next((j for j in sc.jobs if j.name == fault.job), None)
            p.require(job is not None, f"{path}.job", f"unknown job {fault.job!r}")
            bursty = job is not None and any(a.burst for a in job.schedule)
            p.require(job is None or bursty, f"{path}.job", "has no bursty activity: no steps to change")
            if isinstance(fault, StepStretch):
                p.require(fault.factor > 1, f"{path}.factor", "must be above 1 (a step that takes longer)")
        elif isinstance(fault, NicSlowdown | PcieCappedNic):
            p.require(names.host(fault.nic) or names.nic(fault.nic), f"{path}.nic", _host(fault.nic))
            p.require(0 < fault.factor < 1, f"{path}.factor", "must be in (0, 1)")


def _host(name: str) -> str:
    return f"unknown host {name!r}"


def _check_collapse(fault: EcmpCollapse, path: str, names: _Names, p: _Problems, group_size: int) -> None:
    f = names.fabric
    p.require(names.leaf(fault.leaf), f"{path}.leaf", _unknown(fault.leaf))
    p.require(group_size >= 2, path, "needs a fabric with at least two uplinks per leaf")
    p.require(f.leaves >= 2, path, "needs at least two leaves")
    _check_load(fault.load, f"{path}.load", p)
    _check_qps(fault.qps, f"{path}.qps", p)
    p.require(1 <= fault.members_used < group_size, f"{path}.members_used", f"must be in [1, {group_size})")
    if isinstance(fault.hosts, int):
        p.require(1 <= fault.hosts <= f.hosts_per_leaf, f"{path}.hosts", "must fit on the leaf")
    elif fault.hosts is not None:
        _check_hosts(fault.hosts, f"{path}.hosts", names, p, spare=1)
        leaf = _index(fault.leaf, "leaf", 2)
        for i, h in enumerate(fault.hosts):
            on_leaf = names.host(h) and _index(h, "h", 3) // f.hosts_per_leaf == leaf  # type: ignore[operator]
            p.require(on_leaf, f"{path}.hosts[{i}]", f"{h} is not on {fault.leaf}")
    n = f.hosts_per_leaf if fault.hosts is None else fault.hosts
    n = n if isinstance(n, int) else len(n)
    hot = n * f.nics_per_host * fault.load / fault.members_used
    p.require(
        hot >= 0.25,
        f"{path}.load",
        f"puts {hot:.0%} of line rate on the members it uses; a collapse matters from 25% (a warning "
        "below saturation)",
    )


def _check_link_end(
    fault: LossyLink | DegradingLink | FailingOptic | SpeedDownshift, path: str, names: _Names, p: _Problems
) -> None:
    """A link fault's ``device`` (a host, a NIC or a switch) and, on a switch, its ``port``."""
    endpoint = names.host(fault.device) or names.nic(fault.device)
    switch = names.leaf(fault.device) or names.spine(fault.device)
    p.require(endpoint or switch, f"{path}.device", _unknown(fault.device))
    if switch:
        ok = names.switch_port(fault.device, fault.port)
        p.require(ok, f"{path}.port", f"unknown port {fault.port!r} on {fault.device}")


def _check_drops(fault: HeadroomDrops | DropBurst, path: str, names: _Names, p: _Problems) -> None:
    switch = names.leaf(fault.device) or names.spine(fault.device)
    p.require(switch, f"{path}.device", f"{_unknown(fault.device)} (drops at ingress are a switch's)")
    if switch:
        ok = names.switch_port(fault.device, fault.port)
        p.require(ok, f"{path}.port", f"unknown port {fault.port!r} on {fault.device}")
    p.require(0 < fault.drop_rate < 0.1, f"{path}.drop_rate", "must be in (0, 0.1)")
