"""``fabricwatch collect``: this host's RDMA NICs to Kafka (a daemon on every node) or a trace file."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from fabricwatch.cli import collect_burst, collect_gnmi, collect_sonic, options
from fabricwatch.ingest.nic.vendors import vendor_help

if TYPE_CHECKING:
    from fabricwatch.ingest.nic.poll import CollectSettings

HELP = "poll this host's RDMA NICs into Kafka (--broker) or a trace file (--out)"
DESCRIPTION = """Poll this host's RDMA NICs (sysfs counters and hw_counters, plus ethtool -S for the
PFC counters) at every wall-clock multiple of --interval and publish one snapshot per NIC per poll
to fabric.counters (--broker; run it on every node), or write them into a trace that replay reads
(--out), or both. A device that cannot be read costs only itself, reported once. SIGTERM or
Ctrl-C stops it after sending what was read."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("collect", help=HELP, description=DESCRIPTION)
    sources = p.add_subparsers(
        dest="source", metavar="SOURCE", title="other sources (default: this host's NICs)"
    )
    collect_sonic.add_parser(sources)
    collect_gnmi.add_parser(sources)
    collect_burst.add_parser(sources)
    options.add_out(p)
    options.add_broker(p, "Kafka bootstrap HOST:PORT to publish to")
    options.add_config(p, section="collect")
    options.add_interval(p, "polls, 0.1 to 10")
    options.add_count(p, "polls")
    p.add_argument(
        "--device", action="append", default=None, help="RDMA device, e.g. mlx5_0 (repeatable; default: all)"
    )
    p.add_argument(
        "--vendor",
        action="append",
        default=[],
        metavar="DEVICE=VENDOR",
        help=f"read DEVICE with VENDOR's counter map when its driver is not one the collector knows "
        f"(repeatable; default: from the driver). VENDOR is one of {vendor_help()}",
    )
    p.add_argument("--sysfs-root", type=Path, default=None, help="where sysfs is mounted (default: /sys)")
    options.add_host(p, "in device ids (or FABRICWATCH_HOST; default: this host's)")
    p.add_argument(
        "--ethtool",
        choices=("ioctl", "command", "none"),
        default=None,
        help="how to read ethtool -S statistics (the PFC and port counters): the SIOCETHTOOL ioctl, "
        "by running the ethtool binary, or not at all (default: ioctl)",
    )
    p.add_argument("--no-ethtool", action="store_true", help="the same as --ethtool none")
    p.add_argument(
        "--rdma-statistic",
        action="store_true",
        default=None,
        help="also read every RDMA link's hw counters with `rdma -j statistic show` (one fork per "
        "poll): the optional counters, and devices whose sysfs hw_counters a container cannot see "
        "(default: sysfs only)",
    )
    options.add_lldp_interval(p, "this host's cabling from LLDP (lldpd's lldpcli)")
    p.add_argument(
        "--lldp-socket",
        default=None,
        help="lldpd's control socket, for a collector in a container (default: lldpcli's, /run/lldpd.socket)",
    )
    options.add_web(p, "collect")
    options.add_logging(p)


def settings_of(args: argparse.Namespace, environ: dict[str, str] | None = None) -> CollectSettings:
    """The ``collect:`` section of ``--config`` (FABRICWATCH_HOST over its ``host``), with every
    option given on the command line over both."""
    from fabricwatch.ingest.nic.poll import CollectSettings
    from fabricwatch.schemas.config import ConfigFile

    environ = dict(os.environ) if environ is None else environ
    env = {"host": environ["FABRICWATCH_HOST"]} if environ.get("FABRICWATCH_HOST") else {}
    base = ConfigFile(args.config).section("collect", CollectSettings, env)
    flags = {
        "interval_s": args.interval,
        "devices": args.device,
        "vendors": {**base.vendors, **_vendors(args.vendor)} if args.vendor else None,
        "ethtool": "none" if args.no_ethtool else args.ethtool,
        "rdma_statistic": args.rdma_statistic,
        "sysfs_root": str(args.sysfs_root) if args.sysfs_root is not None else None,
        "host": args.host,
        "lldp_interval_s": args.lldp_interval,
        "lldp_socket": args.lldp_socket,
        "web_bind": args.web_bind,
        "web_port": args.web_port,
    }
    return options.with_options(base, flags)


def run(args: argparse.Namespace) -> int:
    if args.source == "sonic":
        return collect_sonic.run(args)
    if args.source == "gnmi":
        return collect_gnmi.run(args)
    if args.source == "burst":
        return collect_burst.run(args)
    return _run_host(args)


def _run_host(args: argparse.Namespace) -> int:
    from fabricwatch.collectors import nic
    from fabricwatch.collectors.frame import Frame, Web

    cfg = settings_of(args)
    destination = options.destination(args)
    targets = nic.check(cfg)
    options.start_logging(args, "collect", cfg)
    stopping = options.Stopping()
    meta = {"poll_interval_s": cfg.interval_s, "devices": [t.ib_dev for t in targets]}
    web = Web(cfg.web_bind, cfg.web_port)
    with Frame("collect", destination, nic.TOPICS, stopping.event, web, meta) as frame:
        stats = nic.run(cfg, frame, targets, args.count)
    print(nic.summary(stats, targets))
    return stopping.exit_code


def _vendors(pairs: list[str]) -> dict[str, str]:
    from fabricwatch.ingest.nic.vendors import nic_vendors, vendor_names

    out = {}
    for pair in pairs:
        device, sep, vendor = pair.partition("=")
        if not sep or not device or vendor not in nic_vendors():
            raise ValueError(f"--vendor {pair}: expected DEVICE=VENDOR, VENDOR one of {vendor_names()}")
        out[device] = vendor
    return out
