"""``/metrics`` and ``/healthz`` of a daemon that has no web framework of its own (the collectors).

prometheus-client renders the registry; ``/healthz`` answers what the daemon's own check says (200
or 503, with a one-line JSON reason), so a kubelet or a systemd watchdog script can restart a
collector that stopped polling. A thread of its own, bound to loopback unless told otherwise.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

WEB_PORTS = {
    "worker": 6066,
    "collect": 6068,
    "collect sonic": 6069,
    "collect gnmi": 6070,
    "phases collect": 6071,
    "ingest": 6072,
    "sink": 6073,
    "alert": 6074,
}
"""Each daemon's default port of /metrics and /healthz: one table, so that no two collide."""


class MetricsServer:
    """Serves ``registry`` on ``/metrics`` and ``health()`` on ``/healthz`` until ``stop``."""

    def __init__(self, registry: Any, health: Callable[[], tuple[bool, str]], bind: str, port: int) -> None:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] == "/metrics":
                    self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
                elif self.path.split("?")[0] == "/healthz":
                    ok, detail = health()
                    body = json.dumps({"healthy": ok, "detail": detail}).encode()
                    self._send(200 if ok else 503, body, "application/json")
                else:
                    self._send(404, b"not found: /metrics, /healthz\n", "text/plain")

            def _send(self, status: int, body: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return  # a scrape every few seconds is not news

        self._registry, self._health = registry, _HealthCollector(health)
        registry.register(self._health)
        try:
            self._server = ThreadingHTTPServer((bind, port), Handler)
        except BaseException:
            registry.unregister(self._health)
            raise
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics", daemon=True)

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._registry.unregister(self._health)

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _HealthCollector:
    """``/healthz``'s answer on ``/metrics`` too (``fabricwatch_healthy``), read at scrape time."""

    def __init__(self, health: Callable[[], tuple[bool, str]]) -> None:
        self._health = health

    def collect(self) -> Any:
        from fabricwatch.streams.health import healthy_gauge

        yield healthy_gauge(self._health()[0])
