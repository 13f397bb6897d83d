"""``fabricwatch collect sonic``: SONiC switches' counters out of their Redis into Kafka or a trace."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from fabricwatch.cli import options
from fabricwatch.schemas import topics

if TYPE_CHECKING:
    from fabricwatch.ingest.sonic.poll import SonicSettings

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
    options.add_logging(p, under=True)


def settings_of(args: argparse.Namespace) -> SonicSettings:
    """The config file's ``sonic:`` section, with the options given on the command line over it
    and ``--redis``/``--name`` added to its switches."""
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
    cfg = options.with_options(base, flags)
    if not cfg.switches and not args.assigned:
        raise ConfigError("no switches: give --redis URL --name NAME, or list them in the sonic: section")
    return cfg


def run(args: argparse.Namespace) -> int:
    from fabricwatch.collectors import sonic
    from fabricwatch.collectors.frame import Frame, Web

    cfg = settings_of(args)
    if args.publish_switches:
        from fabricwatch.collectors.switch_assignments import publish_switches

        sent = publish_switches(options.broker_settings(args), cfg.switches, [])
        print(f"put {sent} of {len(cfg.switches)} switches on {topics.SWITCHES}")
        return 0 if sent == len(cfg.switches) else 1
    destination = options.destination(args)
    options.start_logging(args, "collect sonic", cfg)
    stopping = options.Stopping()
    meta = {"poll_interval_s": cfg.interval_s, "devices": [s.name for s in cfg.switches]}
    web = Web(cfg.web_bind, cfg.web_port)
    with Frame("collect sonic", destination, sonic.TOPICS, stopping.event, web, meta) as frame:
        collect = sonic.run_assigned if args.assigned else sonic.run
        collector = collect(cfg, frame, args.count)
    print(collector.summary())
    return stopping.exit_code
