"""``fabricwatch ingest gnmic|telegraf``: gNMI telemetry that gnmic or Telegraf write to Kafka,
translated into switch snapshots on ``fabric.counters``."""

from __future__ import annotations

import argparse

from fabricwatch.cli import options

HELP = "translate gnmic's or Telegraf's gNMI output on a Kafka topic into switch snapshots"
DESCRIPTION = """Consume the Kafka topic gnmic (format: event or json) or Telegraf (gnmi input,
json serializer) writes switch telemetry to, group each device's values by sample into one
snapshot, map OpenConfig paths (interfaces, Ethernet, QoS queues) and SR Linux's native
statistics onto fabricwatch's counters, and publish the snapshots to fabric.counters. Run as many
as the topic has partitions (one consumer group); keep each device on one partition (gnmic
insert-key: true, Telegraf routing_tag = "source"). Where the subscription includes OpenConfig /lldp
(and the ports' ethernet state for their speeds), each switch's links to the others go to
fabric.topology once its neighbour table settles, with spines and pods from the config's gnmi: site:.
SIGTERM or Ctrl-C sends what is open and stops."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ingest", help=HELP, description=DESCRIPTION)
    p.add_argument("format", choices=("gnmic", "telegraf"), help="who writes the topic")
    p.add_argument("--from-topic", required=True, help="the topic gnmic's or Telegraf's Kafka output writes")
    options.add_broker(p, "Kafka bootstrap HOST:PORT of both topics")
    options.add_config(p, section="broker and gnmi")
    p.add_argument("--group", default=None, help="consumer group (default: fabricwatch-ingest-FORMAT)")
    p.add_argument(
        "--from-beginning",
        action="store_true",
        help="a new group starts at the topic's beginning (default: at its end, what arrives from now)",
    )
    p.add_argument(
        "--window",
        type=float,
        default=0.25,
        help="seconds of device timestamps that make one sample (default: 0.25)",
    )
    p.add_argument(
        "--grace",
        type=float,
        default=2.0,
        help="seconds to wait for a device's next sample before sending the open one (default: 2)",
    )
    p.add_argument(
        "--no-topology",
        action="store_true",
        help="publish no topology from the switches' /lldp neighbours (default: publish it)",
    )
    options.add_web(p, "ingest")
    options.add_logging(p)


def run(args: argparse.Namespace) -> int:
    from fabricwatch.collectors import gnmi_translator
    from fabricwatch.collectors.frame import Destination, Frame, Web
    from fabricwatch.ingest.gnmi.snapshots import SnapshotAssembler
    from fabricwatch.ingest.gnmi.subscribe import GnmiSettings
    from fabricwatch.ingest.gnmi.topology import LldpAssembler
    from fabricwatch.schemas.config import ConfigFile

    if not 0 < args.window < 60 or not 0 < args.grace < 600:
        raise ValueError("--window must be between 0 and 60 s and --grace between 0 and 600 s")
    destination = Destination(broker=options.broker_settings(args))
    options.start_logging(args, "ingest")
    stopping = options.Stopping()
    web = Web(args.web_bind or "127.0.0.1", args.web_port)
    with Frame("ingest", destination, gnmi_translator.TOPICS, stopping.event, web) as frame:
        assembler = SnapshotAssembler(args.window, args.grace, frame.warn)
        topology = None
        if not args.no_topology:
            site = ConfigFile(args.config).section("gnmi", GnmiSettings).site if args.config else None
            topology = LldpAssembler(site, settle_s=args.grace)
        group = args.group or f"fabricwatch-ingest-{args.format}"
        stats = gnmi_translator.translate(
            frame, args.format, args.from_topic, group, assembler, args.from_beginning, topology=topology
        )
    a = assembler.stats
    if topology is not None and topology.stats.leaves:
        t = topology.stats
        print(f"topology: {t.reports} reports from {t.leaves} LLDP values and {t.deletes} deletes")
    print(
        f"read {stats.messages} messages ({stats.bad_messages} with problems), {a.points} values; "
        f"sent {a.snapshots} snapshots; {a.late} late, {a.duplicates} repeated, "
        f"{a.unknown_paths} of unknown paths, {a.without_port} without an interface"
    )
    return stopping.exit_code
