"""A real ``clickhouse-server`` as an ordinary process, for tests and benchmarks.

Everything it writes (data, logs, temporary files) goes under one directory, it listens on free
loopback ports, and ``stop`` ends it. Debian's package (``apt-get install clickhouse-server``,
18.16) is enough: it is what the native-protocol path and the old-server dialect are tested with.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path
from types import TracebackType
from typing import Self

from fabricwatch.local.broker import free_port
from fabricwatch.local.processes import ChildError, spawn, stop_process, wait_listening

_CONFIG = """<?xml version="1.0"?>
<yandex>
  <logger>
    <level>warning</level>
    <log>{root}/log/server.log</log>
    <errorlog>{root}/log/error.log</errorlog>
    <console>0</console>
  </logger>
  <listen_host>127.0.0.1</listen_host>
  <tcp_port>{tcp_port}</tcp_port>
  <http_port>{http_port}</http_port>
  <interserver_http_port>{interserver_port}</interserver_http_port>
  <path>{root}/data/</path>
  <tmp_path>{root}/tmp/</tmp_path>
  <user_files_path>{root}/user_files/</user_files_path>
  <format_schema_path>{root}/format_schemas/</format_schema_path>
  <mark_cache_size>67108864</mark_cache_size>
  <max_concurrent_queries>50</max_concurrent_queries>
  <users_config>{root}/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <timezone>UTC</timezone>
</yandex>
"""

_USERS = """<?xml version="1.0"?>
<yandex>
  <profiles><default><max_memory_usage>4000000000</max_memory_usage></default></profiles>
  <users>
    <default>
      <password>{password}</password>
      <networks><ip>127.0.0.1</ip><ip>::1</ip></networks>
      <profile>default</profile>
      <quota>default</quota>
    </default>
  </users>
  <quotas><default><interval><duration>3600</duration><queries>0</queries><errors>0</errors>
    <result_rows>0</result_rows><read_rows>0</read_rows><execution_time>0</execution_time>
  </interval></default></quotas>
</yandex>
"""


class ServerError(ChildError):
    """The server could not be started; the text carries its error log."""


def server_binary() -> Path | None:
    """The clickhouse-server executable, or None when it is not installed."""
    for name in ("clickhouse-server", "/usr/sbin/clickhouse-server", "/usr/bin/clickhouse-server"):
        found = shutil.which(name)
        if found:
            return Path(found)
    return None


class LocalClickHouse:
    """``clickhouse-server`` under ``root`` on free loopback ports; ``url`` is what ``Store.open`` takes."""

    def __init__(self, root: Path, password: str = "", start_timeout_s: float = 30.0) -> None:
        binary = server_binary()
        if binary is None:
            raise ServerError("clickhouse-server is not installed (apt-get install clickhouse-server)")
        self.binary = binary
        self.root = Path(root)
        self.password = password
        self.start_timeout_s = start_timeout_s
        self.tcp_port = free_port()
        self.http_port = free_port()
        self._proc: subprocess.Popen[bytes] | None = None

    def url(self, database: str = "fabricwatch") -> str:
        auth = f"default:{self.password}@" if self.password else ""
        return f"clickhouse://{auth}127.0.0.1:{self.tcp_port}/{database}"

    def start(self) -> Self:
        for sub in ("log", "data", "tmp", "user_files", "format_schemas"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        config = self.root / "config.xml"
        config.write_text(
            _CONFIG.format(
                root=self.root,
                tcp_port=self.tcp_port,
                http_port=self.http_port,
                interserver_port=free_port(),
            )
        )
        (self.root / "users.xml").write_text(_USERS.format(password=self.password))
        self._proc = spawn(
            [str(self.binary), f"--config-file={config}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=self.root,
        )
        state = wait_listening(self._proc, self.tcp_port, self.start_timeout_s, every_s=0.1)
        if state == "listening":
            return self
        if state == "exited":
            raise ServerError(f"clickhouse-server exited at start: {self._error_log()}")
        self.stop()
        raise ServerError(
            f"clickhouse-server did not listen within {self.start_timeout_s} s: {self._error_log()}"
        )

    def _error_log(self) -> str:
        path = self.root / "log" / "error.log"
        text = path.read_text(errors="replace")[-2000:] if path.exists() else ""
        if (
            not text
            and self._proc is not None
            and self._proc.stderr is not None
            and self._proc.poll() is not None
        ):
            text = self._proc.stderr.read().decode(errors="replace")[-2000:]
        return text or "(no error log)"

    def stop(self, kill: bool = False) -> None:
        """Stop it the way an operator would (SIGTERM; it waits for open connections, up to ~10 s),
        then for good if it does not go; ``kill`` ends it at once, like a crash."""
        if self._proc is None:
            return
        stop_process(self._proc, signal.SIGKILL if kill else signal.SIGTERM, timeout_s=15)
        self._proc = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
