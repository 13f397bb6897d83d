"""Poll many switches on one schedule, each in its own thread, so one dead switch delays no other.

Polls are aligned to wall-clock multiples of the interval, like the host collector's: every switch
and every host reads its poll N at the same instant. Each poll hands every switch's read to a small
thread pool and waits for the answers until the next boundary; a switch that has not answered by
then (its own socket timeout is shorter than the interval) costs only its own snapshot of that
poll, and while its read is still in flight it is skipped, never queued twice. Each kind of trouble
is said once per switch when it begins and once when it ends, and counted throughout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait

import msgspec

from fabricwatch.ingest.lldp.fabric import SiteSettings
from fabricwatch.ingest.nic.poll import CollectStats, ProblemLog, poll_times
from fabricwatch.ingest.sonic.switch import SonicSwitch, SwitchError
from fabricwatch.schemas.messages import Snapshot

MAX_THREADS = 32


class SwitchTarget(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One switch of the ``sonic:`` section's ``switches`` list."""

    name: str
    redis: str
    """Its COUNTERS_DB, ``redis://HOST:PORT/2`` (database 2 when the URL names none)."""
    config_redis: str = ""
    """Its CONFIG_DB, when not database 4 of the same server (SONiC's multi-database layouts)."""


class SonicSettings(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The ``sonic:`` section of a config file; a command-line option wins over its key."""

    interval_s: float = 1.0
    """Seconds between polls (SONiC refreshes port counters every second by default)."""
    timeout_s: float | None = None
    """Seconds one switch may take to answer (default: the interval, at most 5)."""
    switches: list[SwitchTarget] = msgspec.field(default_factory=list)
    lldp_interval_s: float = 30.0
    """Seconds between reads of the switches' LLDP neighbours, published to fabric.topology when
    they changed (when publishing; 0: none)."""
    site: SiteSettings = msgspec.field(default_factory=SiteSettings)
    web_bind: str = "127.0.0.1"
    web_port: int | None = None
    """Port of /metrics and /healthz (default: 6069 when publishing; 0: none)."""

    def __post_init__(self) -> None:
        if not 0.05 <= self.interval_s <= 60:
            raise ValueError(f"interval_s {self.interval_s}: must be between 0.05 and 60 seconds")
        names = [s.name for s in self.switches]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"switches: {', '.join(twice)} listed more than once")

    @property
    def timeout(self) -> float:
        return self.timeout_s if self.timeout_s is not None else min(self.interval_s, 5.0)


def poll_switches(
    switches: list[SonicSwitch],
    interval_s: float,
    count: int | None,
    warn: Callable[[str], None] = print,
    stats: CollectStats | None = None,
    stop: threading.Event | None = None,
    on_read: Callable[[str, float], None] | None = None,
    on_poll: Callable[[float], None] | None = None,
) -> Iterator[Snapshot]:
    """Yield one snapshot per switch that answered, per poll, ``count`` polls (forever when None),
    until ``stop`` is set. ``on_read`` gets each switch's read time, ``on_poll`` each poll's."""
    stats = stats if stats is not None else CollectStats()
    stop = stop or threading.Event()
    problems = ProblemLog(stats, warn)
    in_flight: dict[str, Future] = {}
    with ThreadPoolExecutor(max_workers=min(MAX_THREADS, len(switches)), thread_name_prefix="switch") as pool:
        for due in poll_times(interval_s, count, stats, stop, on_poll):
            asked = _ask(pool, switches, interval_s, in_flight, problems, on_read)
            done, _ = wait(asked.values(), timeout=max(0.0, due + interval_s - time.time() - 0.01))
            for name, future in asked.items():
                snap = _answer(name, future, done, problems)
                if snap is not None:
                    stats.snapshots += 1
                    yield snap
        for future in in_flight.values():
            future.cancel()


def _ask(
    pool: ThreadPoolExecutor,
    switches: list[SonicSwitch],
    interval_s: float,
    in_flight: dict[str, Future],
    problems: ProblemLog,
    on_read: Callable[[str, float], None] | None,
) -> dict[str, Future]:
    asked = {}
    for switch in switches:
        previous = in_flight.get(switch.name)
        if previous is not None and not previous.done():
            problems.failed(switch.name, "counters", "still answering an earlier poll; this poll skipped")
            continue
        asked[switch.name] = in_flight[switch.name] = pool.submit(_timed, switch, interval_s, on_read)
    return asked


def _timed(switch: SonicSwitch, interval_s: float, on_read: Callable[[str, float], None] | None) -> Snapshot:
    began = time.monotonic()
    try:
        return switch.read(interval_s)
    finally:
        if on_read is not None:
            on_read(switch.name, time.monotonic() - began)


def _answer(name: str, future: Future, done: set[Future], problems: ProblemLog) -> Snapshot | None:
    if future not in done:
        problems.failed(name, "counters", "no answer within the interval; its snapshot of this poll is lost")
        return None
    try:
        snap = future.result()
    except SwitchError as exc:
        problems.failed(name, "counters", f"{exc}; tried again next poll")
        return None
    problems.ok(name, "counters")
    return snap
