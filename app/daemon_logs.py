"""One logging setup for every daemon: each line with its time, level and component, as text or
as JSON lines, at ``--log-level``; and a first line with the version and the effective settings,
secrets redacted, so that a log says what produced it.

The libraries under us talk a lot at info (kafka-python's every connection, Faust's tables): they
stay at warning unless ``--log-level debug`` asks for everything."""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Mapping
from typing import Any

from fabricwatch import __version__

LEVELS = ("debug", "info", "warning", "error")
FORMATS = ("text", "json")
CHATTY = ("kafka", "aiokafka", "faust", "mode", "urllib3", "clickhouse_driver", "grpc")
"""Libraries kept at warning unless debugging."""
_SECRET_KEY = re.compile(r"password|secret|token|sasl_plain", re.I)
_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]+@")


class _Stderr(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time (a test's capture, a redirected stream)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        return


class JsonLines(logging.Formatter):
    """One JSON object a line: ``time`` (RFC 3339, UTC), ``level``, ``component``, ``message``
    (and ``error`` with the traceback when there is one)."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "component": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line)


def setup_logging(level: str = "info", fmt: str = "text") -> None:
    """Route every logger to stderr in ``fmt`` at ``level`` (replacing an earlier setup)."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, _Stderr)]:
        root.removeHandler(handler)
    handler = _Stderr()
    handler.setFormatter(
        JsonLines()
        if fmt == "json"
        else logging.Formatter(
            "%(asctime)s.%(msecs)03d %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S"
        )
    )
    root.addHandler(handler)
    root.setLevel(level.upper())
    chatty = logging.DEBUG if level == "debug" else max(logging.WARNING, logging.getLevelName(level.upper()))
    for name in CHATTY:
        logging.getLogger(name).setLevel(chatty)


def log_start(daemon: str, settings: Mapping[str, Any]) -> None:
    """The first line: what runs, which version, with which settings (secrets redacted)."""
    shown = json.dumps(redacted(settings), default=str, sort_keys=True)
    logging.getLogger(f"fabricwatch.{daemon.replace(' ', '.')}").info(
        "fabricwatch %s %s starting with %s", daemon, __version__, shown
    )


def redacted(value: Any, key: str = "") -> Any:
    """``value`` with every password-like key's value and every password in a URL replaced."""
    if isinstance(value, Mapping):
        return {k: redacted(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redacted(v, key) for v in value]
    if value and _SECRET_KEY.search(key) and not key.endswith("_file"):
        return "<redacted>"
    if isinstance(value, str):
        return _URL_PASSWORD.sub(r"\1<redacted>@", value)
    return value
