"""``fabricwatch collect sonic``: SONiC switches' counters out of their Redis into Kafka or a trace."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING

from fabricwatch.cli import options
from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import encode

if TYPE_CHECKING:
    from fabricwatch.ingest.sonic.poll import SonicSettings, SwitchTarget
    from fabricwatch.ingest.sonic.switch import SonicSwitch, SwitchStats
    from fabricwatch.ingest.sonic.topology import TopologyWatch
    from fabricwatch.streams.kafka_io import BrokerSettings, Publisher
    from fabricwatch.switch_assignments import Assignments

HELP = "poll SONiC switches' COUNTERS_DB (Redis) into Kafka (--broker) or a trace file (--out)"
DESCRIPTION = """Poll SONiC switches' counters out of their Redis (COUNTERS_DB: ports, queues,
priority groups, watermarks, the PFC watchdog) at every wall-clock multiple of --interval, one
pipelined round trip per switch per poll, and publish one snapshot per switch per poll to
fabric.counters (--broker), or write a trace that replay reads (--out), or both. One switch with
--redis and --name; many from the config file's sonic: section. Counters the switch refreshes
less often than it is polled (CONFIG_DB's FLEX_COUNTER_TABLE) go out as unknown between refreshes,
never as zero. A switch that is down costs only itself, reported once. SIGTERM or Ctrl-C stops it."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sonic", help=HELP, description=DESCRIPTION)
    p.add_argument("--redis", default=None, help="one switch's COUNTERS_DB, redis://HOST:PORT/2")
    options.add_name(p)
    options.add_out(p)
    options.add_broker(p, "Kafka bootstrap HOST:PORT to publish to")
    options.add_config(p, section="sonic")
    options.add_interval(p, "polls, 0.05 to 60")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds a switch may take to answer (default: the interval)",
    )
    options.add_count(p, "polls")
    options.add_lldp_interval(p, "the switches' LLDP neighbours (APPL_DB)")
    p.add_argument(
        "--assigned",
        action="store_true",
        help="poll the switches the broker's consumer group assigns this replica from the fabric.switches "
        "topic (run several replicas; each switch is polled by one) instead of the configured list",
    )
    p.add_argument(
        "--publish-switches",
        action="store_true",
        help="put the configured switches on the fabric.switches topic for --assigned replicas, and exit",
    )
    options.add_web(p, "collect sonic")


def settings_of(args: argparse.Namespace) -> SonicSettings:
    """The config file's ``sonic:`` section, with the options given on the command line over it
    and ``--redis``/``--name`` added to its switches."""
    from fabricwatch.cli.collect_outputs import with_options
    from fabricwatch.ingest.sonic.poll import SonicSettings, SwitchTarget
    from fabricwatch.schemas.config import ConfigError, ConfigFile

    base = ConfigFile(args.config).section("sonic", SonicSettings)
    if bool(args.redis) != bool(args.name):
        raise ConfigError("--redis and --name go together: the switch's Redis and its name in the fabric")
    switches = [*base.switches, SwitchTarget(args.name, args.redis)] if args.redis else base.switches
    flags = {
        "interval_s": args.interval,
        "timeout_s": args.timeout,
        "lldp_interval_s": args.lldp_interval,
        "switches": switches,
        "web_bind": args.web_bind,
        "web_port": args.web_port,
    }
    cfg = with_options(base, flags)
    if not cfg.switches and not args.assigned:
        raise ConfigError("no switches: give --redis URL --name NAME, or list them in the sonic: section")
    return cfg


def run(args: argparse.Namespace) -> int:
    from fabricwatch.cli.collect_outputs import check_destination, outcomes, outputs_of, serve_metrics
    from fabricwatch.collector_metrics import CollectMetrics
    from fabricwatch.ingest.nic.poll import CollectStats
    from fabricwatch.ingest.sonic.poll import poll_switches

    cfg = settings_of(args)
    if args.publish_switches:
        from fabricwatch.switch_assignments import publish_switches

        sent = publish_switches(options.broker_settings(args), cfg.switches, [])
        print(f"put {sent} of {len(cfg.switches)} switches on {topics.SWITCHES}")
        return 0 if sent == len(cfg.switches) else 1
    check_destination(args)
    stopping = options.Stopping()
    stats = CollectStats()
    switches: dict[str, SonicSwitch] = {}
    with ExitStack() as stack:
        stack.callback(lambda: [s.close() for s in switches.values()])
        outputs, publisher = outputs_of(args, cfg.interval_s, stack, [s.name for s in cfg.switches])
        published = outcomes(publisher) if publisher else None
        switch_stats: dict[str, SwitchStats] = {}
        metrics = CollectMetrics(stats, cfg.interval_s, published, switch_stats)
        serve_metrics(stack, metrics, cfg.web_bind, cfg.web_port, "collect sonic", publisher, _warn)
        lldp = _lldp(cfg, publisher, stack)

        def poll(targets: list[SwitchTarget], stop: threading.Event) -> None:
            current = [_switch(switches, t, cfg) for t in targets]
            switch_stats.update({s.name: s.stats for s in current})
            while not current and not stop.wait(cfg.interval_s):
                metrics.observe_poll(0.0)  # nothing assigned yet (or more replicas than shares): healthy
            if not current:
                return
            polls = poll_switches(
                current,
                cfg.interval_s,
                args.count,
                _warn,
                stats,
                stop,
                metrics.observe_read,
                metrics.observe_poll,
            )
            for snap in polls:
                for put in outputs:
                    put(snap)
                for report in lldp.due() if lldp is not None else []:
                    publisher.send(topics.TOPOLOGY, report.source, encode(report), report.ts_ns)

        if args.assigned:
            _assigned_rounds(options.broker_settings(args), stack, stopping.event, poll)
        else:
            poll(cfg.switches, stopping.event)
    print(
        f"collected {stats.snapshots} snapshots of {len(switches)} switches in {stats.polls} polls "
        f"({stats.late_polls} late, {sum(stats.problems.values())} switch polls that gave nothing)"
    )
    return stopping.exit_code


def _assigned_rounds(
    settings: BrokerSettings,
    stack: ExitStack,
    stop: threading.Event,
    poll: Callable[[list[SwitchTarget], threading.Event], None],
) -> None:
    """Poll this replica's share of the switches, a new round whenever the share changes."""
    from fabricwatch.switch_assignments import Assignments

    assignments = Assignments(settings, _warn)
    stack.callback(assignments.close)
    while not stop.is_set():
        assignments.changed.clear()
        targets = assignments.current()
        _warn(f"assigned {len(targets)} switches: {', '.join(t.name for t in targets) or 'none yet'}")
        round_stop = threading.Event()
        threading.Thread(target=_until_changed, args=(assignments, stop, round_stop), daemon=True).start()
        poll(targets, round_stop)


def _until_changed(assignments: Assignments, stop: threading.Event, round_stop: threading.Event) -> None:
    """End the round when the share changes or the collector stops."""
    while not (assignments.changed.wait(0.5) or stop.is_set()):
        continue
    round_stop.set()


def _switch(switches: dict[str, SonicSwitch], target: SwitchTarget, cfg: SonicSettings) -> SonicSwitch:
    """The poller of one switch, kept across assignment rounds (its name maps and history stay)."""
    from fabricwatch.ingest.sonic.switch import SonicSwitch

    known = switches.get(target.name)
    if known is None or known.url != target.redis:
        known = switches[target.name] = SonicSwitch(
            target.name, target.redis, cfg.timeout, target.config_redis, _warn
        )
    return known


def _lldp(cfg: SonicSettings, publisher: Publisher | None, stack: ExitStack) -> TopologyWatch | None:
    """The switches' LLDP neighbours, when publishing (a trace has no use for them)."""
    from fabricwatch.ingest.sonic.topology import TopologyWatch

    if not cfg.lldp_interval_s or publisher is None:
        return None
    switches = {s.name: s.redis for s in cfg.switches}
    watch = TopologyWatch(switches, cfg.site, cfg.lldp_interval_s, cfg.timeout, _warn)
    stack.callback(watch.close)
    return watch


def _warn(text: str) -> None:
    print(f"fabricwatch collect sonic: {text}", file=sys.stderr, flush=True)
