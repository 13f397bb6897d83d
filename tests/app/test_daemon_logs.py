"""One logging setup for every daemon (issue 32, 7): time, level and component on each line, JSON
lines when asked, a first line with the version and the effective settings, secrets redacted."""

from __future__ import annotations

import json
import logging

from fabricwatch import __version__
from fabricwatch.cli.main import parser
from fabricwatch.daemon_logs import log_start, redacted, setup_logging


def test_json_lines_carry_time_level_component_and_message(capsys):
    setup_logging("info", "json")
    logging.getLogger("fabricwatch.sink").warning("store %s: failing", "x")
    line = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert line["level"] == "warning" and line["component"] == "fabricwatch.sink"
    assert line["message"] == "store x: failing" and line["time"].endswith("Z")


def test_the_first_line_names_the_version_and_redacts_every_secret(capsys):
    setup_logging("info", "text")
    log_start(
        "collect sonic",
        {
            "switches": [{"name": "leaf01", "redis": "redis://:s3cret@10.0.0.11:6379/2"}],
            "clickhouse": "clickhouse://fabricwatch:hunter2@ch:9000/fw",
            "sasl_password": "p4ss",
            "password_file": "/etc/fabricwatch/gnmi-password",
        },
    )
    err = capsys.readouterr().err
    assert f"INFO fabricwatch.collect.sonic: fabricwatch collect sonic {__version__} starting with" in err
    assert not any(secret in err for secret in ("s3cret", "hunter2", "p4ss"))
    assert "/etc/fabricwatch/gnmi-password" in err  # a path to a secret is not one
    assert redacted({"token": ""}) == {"token": ""}  # nothing to hide is not hidden


def test_libraries_stay_quiet_below_the_level_asked(capsys):
    setup_logging("error", "text")
    logging.getLogger("kafka.conn").warning("reconnecting")
    logging.getLogger("fabricwatch.alert").warning("retrying")
    assert capsys.readouterr().err == ""
    setup_logging("info", "text")
    logging.getLogger("kafka.conn").info("connected")
    assert capsys.readouterr().err == ""  # kafka-python's info is not ours


def test_a_log_level_given_before_a_collector_s_source_holds():
    """Found in review: ``collect --log-level debug sonic`` parsed as info (the sub-command's
    default overwrote the option given before it)."""
    args = parser().parse_args(["collect", "--log-level", "debug", "sonic", "--redis", "r", "--name", "n"])
    assert args.log_level == "debug"
    args = parser().parse_args(["collect", "sonic", "--log-level", "error", "--redis", "r", "--name", "n"])
    assert args.log_level == "error"
    assert parser().parse_args(["collect", "gnmi"]).log_format == "text"
