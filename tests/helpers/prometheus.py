"""A real Prometheus server for a test: scraping the jobs it is given every second on loopback,
with rule files if any, answering its HTTP API."""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fabricwatch.local.broker import free_port


class Prometheus:
    def __init__(self, port: int) -> None:
        self.port = port

    def api(self, path: str, **params: str) -> Any:
        """``data`` of an API answer; None while the server is not up yet."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/{path}{query}", timeout=2) as r:
                return json.load(r)["data"]
        except OSError:
            return None

    def series(self, query: str) -> list:
        return (self.api("query", query=query) or {}).get("result", [])

    def alerts(self) -> set[tuple[str, str]]:
        """(alert, job) of every alert pending or firing."""
        found = (self.api("alerts") or {}).get("alerts", [])
        return {(a["labels"]["alertname"], a["labels"]["job"]) for a in found}


@contextmanager
def prometheus(tmp_path: Path, jobs: dict[str, list[int]], rules: Path | None = None) -> Iterator[Prometheus]:
    """Prometheus scraping ``jobs`` (name -> loopback ports) until the ``with`` ends."""
    config = tmp_path / "prometheus.yml"
    lines = ["global: {scrape_interval: 1s, evaluation_interval: 1s}"]
    if rules is not None:
        lines.append(f"rule_files: ['{rules}']")
    lines.append("scrape_configs:")
    for name, ports in jobs.items():
        targets = ", ".join(f"'127.0.0.1:{p}'" for p in ports)
        lines.append(f"  - {{job_name: {name}, static_configs: [{{targets: [{targets}]}}]}}")
    config.write_text("\n".join(lines) + "\n")
    port = free_port()
    server = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield Prometheus(port)
    finally:
        server.terminate()
        server.wait(timeout=30)
