"""``fabricwatch collect gnmi``: subscribe to switches' gNMI servers, snapshots into Kafka or a trace."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from fabricwatch.cli import options

if TYPE_CHECKING:
    from fabricwatch.ingest.gnmi.subscribe import GnmiSettings

HELP = "subscribe to switches' gNMI servers into Kafka (--broker) or a trace file (--out)"
DESCRIPTION = """Subscribe to switches' gNMI servers (OpenConfig interface, Ethernet and QoS queue
counters, SAMPLE at --interval), for sites without gnmic or Telegraf, and publish one snapshot per
switch per sample to fabric.counters (--broker) or write a trace (--out), or both. One target with
--target and --name; many, with TLS and credentials, from the config file's gnmi: section. A target
that is down or drops the stream is subscribed again (1 s, doubling to 30 s), said once. SIGTERM or
Ctrl-C sends what is open and stops."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gnmi", help=HELP, description=DESCRIPTION)
    p.add_argument("--target", default=None, help="one switch's gNMI server, HOST:PORT")
    options.add_name(p)
    p.add_argument(
        "--path",
        action="append",
        default=None,
        help="a path to subscribe (repeatable; default: the counters)",
    )
    p.add_argument(
        "--mode",
        choices=("sample", "on_change", "target_defined"),
        default=None,
        help="how the target streams the paths (default: sample, every --interval)",
    )
    p.add_argument("--tls", action="store_true", help="TLS to the target (default: plain text)")
    p.add_argument("--ca-file", default=None, help="CA certificate the target's is checked against")
    p.add_argument("--username", default=None, help="user name sent with the subscription")
    p.add_argument("--password-file", default=None, help="file holding the password")
    options.add_out(p)
    options.add_broker(p, "Kafka bootstrap HOST:PORT to publish to")
    options.add_config(p, section="gnmi")
    options.add_interval(p, "samples (gNMI SAMPLE interval)")
    options.add_count(p, "snapshots")
    options.add_web(p, "collect gnmi")
    options.add_logging(p, under=True)


def settings_of(args: argparse.Namespace) -> GnmiSettings:
    """The config file's ``gnmi:`` section, the options over it, ``--target``/``--name`` added."""
    from fabricwatch.ingest.gnmi.subscribe import GnmiSettings, GnmiTarget
    from fabricwatch.schemas.config import ConfigError, ConfigFile

    base = ConfigFile(args.config).section("gnmi", GnmiSettings)
    if bool(args.target) != bool(args.name):
        raise ConfigError(
            "--target and --name go together: the switch's gNMI server and its name in the fabric"
        )
    targets = list(base.targets)
    if args.target:
        given = {
            "paths": args.path,
            "mode": args.mode,
            "tls": args.tls or None,
            "ca_file": args.ca_file,
            "username": args.username,
            "password_file": args.password_file,
        }
        targets.append(
            GnmiTarget(args.name, args.target, **{k: v for k, v in given.items() if v is not None})
        )
    flags = {
        "interval_s": args.interval,
        "targets": targets,
        "web_bind": args.web_bind,
        "web_port": args.web_port,
    }
    cfg = options.with_options(base, flags)
    if not cfg.targets:
        raise ConfigError(
            "no targets: give --target HOST:PORT --name NAME, or list them in the gnmi: section"
        )
    return cfg


def run(args: argparse.Namespace) -> int:
    from fabricwatch.collectors import gnmi
    from fabricwatch.collectors.frame import Frame, Web

    cfg = settings_of(args)
    destination = options.destination(args)
    options.start_logging(args, "collect gnmi", cfg)
    stopping = options.Stopping()
    meta = {"poll_interval_s": cfg.interval_s, "devices": [t.name for t in cfg.targets]}
    web = Web(cfg.web_bind, cfg.web_port)
    with Frame("collect gnmi", destination, gnmi.TOPICS, stopping.event, web, meta) as frame:
        done = gnmi.run(cfg, frame, args.count)
    print(done.summary(len(cfg.targets)))
    return stopping.exit_code
