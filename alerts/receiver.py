"""A reference webhook receiver: verifies the signature, drops duplicates by idempotency key and
records what it accepted. The tests and the benchmark run it on 127.0.0.1; its ``handle`` is the
recipe a real receiver follows (see docs/alerts.md). ``behaviour`` lets a test make it fail:
return ``"ok"``, a status such as ``"500"``, ``"hang"`` (process, but answer after ``hang_s``: the
sender's timeout fires and it retries, so the request arrives twice) or ``"drop"`` (close the
connection unanswered, without processing). ``tls`` (certificate and key files) serves HTTPS."""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fabricwatch.alerts.delivery import ATTEMPT_HEADER, IDEMPOTENCY_HEADER
from fabricwatch.alerts.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, verify


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # the default 5 drops SYNs when a sender opens many connections at once
    daemon_threads = True


@dataclass
class Received:
    key: str
    body: dict[str, Any]
    headers: dict[str, str]
    at: float


@dataclass
class WebhookReceiver:
    secret: str | None = None
    behaviour: Callable[[str, int], str] = lambda key, attempt: "ok"
    hang_s: float = 1.0
    tls: tuple[str, str] | None = None
    accepted: list[Received] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    rejected: int = 0
    requests: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        if self.tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*self.tls)
            self._server.socket = ctx.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self._server.server_address[1]}/hook"

    def start(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> WebhookReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def handle(self, body: bytes, headers: dict[str, str]) -> int:
        """Verify, then accept once per idempotency key (a repeat is acknowledged, not re-processed)."""
        if self.secret is not None and not verify(
            self.secret,
            body,
            headers.get(SIGNATURE_HEADER, ""),
            headers.get(TIMESTAMP_HEADER, ""),
            time.time(),
        ):
            with self._lock:
                self.rejected += 1
            return 401
        key = headers.get(IDEMPOTENCY_HEADER, "")
        try:
            data = json.loads(body)
        except ValueError:
            return 400
        with self._lock:
            if key in self._seen:
                self.duplicates.append(key)
                return 200
            self._seen.add(key)
            self.accepted.append(Received(key, data, headers, time.time()))
        return 200

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {k: v for k, v in self.headers.items()}
                with receiver._lock:
                    receiver.requests += 1
                action = receiver.behaviour(
                    headers.get(IDEMPOTENCY_HEADER, ""), int(headers.get(ATTEMPT_HEADER, 1))
                )
                if action == "drop":
                    self.close_connection = True
                    return
                if action.isdigit():
                    self._answer(int(action))
                    return
                if action == "hang":
                    time.sleep(receiver.hang_s)
                self._answer(receiver.handle(body, headers))

            def _answer(self, status: int) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
