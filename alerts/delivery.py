"""The delivery shell: per receiver, a bounded queue and a few worker threads that POST
notifications with timeouts and retries, and never lose one silently.

Order: a group's notifications go out one at a time, in the order the core made them (the next
waits while one is being retried); different groups go out concurrently, up to ``concurrency``.
Retries: connection errors, timeouts, 5xx, 408 and 429 are retried with exponential backoff and
jitter (a ``Retry-After`` is honoured up to ``backoff_max``); other 4xx will not get better and
are given up at once. After ``max_attempts`` or ``give_up_after`` a notification is given up:
counted, logged and written to the give-up log (and topic), and then counts as done.
Duplicates: a request that timed out may still have been processed, so its retry can arrive
twice; every attempt carries the same ``Idempotency-Key`` for the receiver to drop repeats.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from fabricwatch.alerts.config import ReceiverConfig
from fabricwatch.alerts.payload import Notification, encode_body
from fabricwatch.alerts.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from fabricwatch.schemas.config import ConfigError
from fabricwatch.streams.trouble import Trouble

log = logging.getLogger("fabricwatch.alerts")

IDEMPOTENCY_HEADER = "Idempotency-Key"
SEQUENCE_HEADER = "X-Fabricwatch-Sequence"
ATTEMPT_HEADER = "X-Fabricwatch-Attempt"
_RETRYABLE = frozenset({408, 429})


@dataclass(frozen=True)
class Outcome:
    notification: Notification
    delivered: bool
    attempts: int
    status: int | None
    error: str
    elapsed_s: float


@dataclass
class DeliveryStats:
    submitted: int = 0
    delivered: int = 0
    given_up: int = 0
    attempts: int = 0
    retries: int = 0
    last_error: str = ""


class GiveUpLog:
    """Where given-up notifications go: a JSON-lines file and/or a callback (a Kafka topic), plus a
    warning in the log. Each record has the receiver, group, idempotency key, why, and the body.

    A file that cannot be appended to is refused when the log is made (the alerter does not start
    and says why); one that stops taking writes later (a full disk, a removed directory) costs only
    its records: the failure is logged once and counted (``failures``), the notification is still
    given up and counted, and delivery goes on."""

    def __init__(self, path: Path | None = None, publish: Callable[[str, bytes], None] | None = None) -> None:
        self.path = path
        self.publish = publish
        self.failures = 0
        self._lock = threading.Lock()
        self._said: set[str] = set()
        if path is not None:
            try:
                with open(path, "ab"):
                    pass
            except OSError as exc:
                raise ConfigError(
                    f"alerts.give_up_log: {path}: cannot be appended to ({exc.strerror or exc}); give a "
                    "path in a directory this user can write (the systemd unit's LogsDirectory= makes "
                    "/var/log/fabricwatch)"
                ) from None

    def record(self, outcome: Outcome, body: bytes) -> None:
        n = outcome.notification
        log.warning(
            "gave up on notification %s for receiver %s group %s after %d attempts: %s",
            n.key,
            n.receiver,
            n.group_key,
            outcome.attempts,
            outcome.error,
        )
        record = {
            "receiver": n.receiver,
            "group_key": n.group_key,
            "idempotency_key": n.key,
            "seq": n.seq,
            "status": n.status,
            "attempts": outcome.attempts,
            "error": outcome.error,
            "gave_up_at": time.time(),
            "body": json.loads(body),
        }
        line = json.dumps(record, separators=(",", ":")).encode()
        with self._lock:
            if self.path is not None:
                try:
                    with open(self.path, "ab") as f:
                        f.write(line + b"\n")
                except OSError as exc:
                    self._failed("append", f"cannot append to {self.path}: {exc.strerror or exc}")
            if self.publish is not None:
                try:
                    self.publish(n.key, line)
                except Exception as exc:  # a broker away: the record is lost, the delivery goes on
                    self._failed("publish", f"cannot publish: {exc}")

    def _failed(self, where: str, why: str) -> None:
        self.failures += 1
        if where not in self._said:  # once per way out: a full disk must not flood the log
            self._said.add(where)
            log.error("give-up log: %s; given-up notifications are counted and logged here only", why)


class ReceiverQueue:
    """One receiver's queue and workers. ``submit`` blocks while ``queue_size`` notifications are
    pending (backpressure to the consumer); ``on_done`` is called once per notification, after it
    was delivered or given up, in order within its group."""

    def __init__(
        self,
        receiver: ReceiverConfig,
        external_url: str = "",
        on_done: Callable[[Outcome], None] | None = None,
        give_up: GiveUpLog | None = None,
    ) -> None:
        self.receiver = receiver
        self.external_url = external_url
        self.on_done = on_done
        self.give_up = give_up or GiveUpLog()
        self.stats = DeliveryStats()
        self.trouble = Trouble(f"receiver {receiver.name}", log)
        self._lock = threading.Lock()
        self._has_work = threading.Condition(self._lock)  # workers wait here for a ready group
        self._room = threading.Condition(self._lock)  # submit and drain wait here
        self._groups: dict[str, deque[Notification]] = {}
        self._ready: deque[str] = deque()
        self._size = 0
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._work, name=f"alerts-{receiver.name}-{i}", daemon=True)
            for i in range(receiver.concurrency)
        ]
        for t in self._threads:
            t.start()

    @property
    def pending(self) -> int:
        return self._size

    def submit(self, n: Notification, timeout_s: float | None = None) -> bool:
        """Queue a notification; False when the queue stayed full for ``timeout_s``."""
        with self._lock:
            if not self._room.wait_for(lambda: self._size < self.receiver.queue_size, timeout_s):
                return False
            queue = self._groups.setdefault(n.group_key, deque())
            queue.append(n)
            self._size += 1
            self.stats.submitted += 1
            if len(queue) == 1:
                self._ready.append(n.group_key)
                self._has_work.notify()
        return True

    def drain(self, timeout_s: float | None = None) -> bool:
        """Wait until every queued notification was delivered or given up."""
        with self._lock:
            return self._room.wait_for(lambda: self._size == 0, timeout_s)

    def close(self, timeout_s: float = 0.0) -> None:
        """Drain for up to ``timeout_s``, then stop the workers. What is still pending is neither
        delivered nor given up (no ``on_done``): a consumer re-reads it after a restart."""
        self.drain(timeout_s)
        self._stop.set()
        with self._lock:
            self._has_work.notify_all()
        for t in self._threads:
            t.join(timeout=self.receiver.timeout + 1)

    def _work(self) -> None:
        session = _session(self.receiver.url.reveal())
        try:
            while True:
                with self._lock:
                    self._has_work.wait_for(lambda: self._ready or self._stop.is_set())
                    if self._stop.is_set():
                        return
                    gk = self._ready.popleft()
                    n = self._groups[gk][0]
                try:
                    outcome = self._deliver(session, n)
                except Exception as exc:  # a bug costs this notification, not the receiver's worker
                    log.exception("delivering notification %s failed", n.key)
                    outcome = self._finish(
                        n, b"{}", False, 0, None, f"internal error: {exc!r}", time.monotonic()
                    )
                if outcome is None:
                    return
                if self.on_done is not None:
                    try:
                        self.on_done(outcome)
                    except Exception:  # a broken callback must not stop this receiver's deliveries
                        log.exception("on_done failed for notification %s", outcome.notification.key)
                with self._lock:
                    queue = self._groups[gk]
                    queue.popleft()
                    self._size -= 1
                    if queue:
                        self._ready.append(gk)
                    else:
                        del self._groups[gk]
                    self._room.notify_all()
        finally:
            session.close()

    def _deliver(self, session: requests.Session, n: Notification) -> Outcome | None:
        r = self.receiver
        body = encode_body(n, r.format, self.external_url)
        url = r.url.reveal()
        started = time.monotonic()
        attempt, status, error = 0, None, ""
        while not self._stop.is_set():
            attempt += 1
            retryable, retry_after = True, None
            try:
                # Prepared by hand and sent: Session.post would merge session settings into every
                # request, a fifth of a request's CPU at a thousand notifications a second.
                request = requests.Request("POST", url, data=body, headers=self._headers(n, body, attempt))
                resp = session.send(
                    request.prepare(),
                    timeout=(r.connect_timeout, r.timeout),
                    verify=r.verify,
                    proxies=session.proxies,
                )
                status = resp.status_code
                resp.close()
                if 200 <= status < 300:
                    self.trouble.ok(f"{self._size} notifications pending")
                    return self._finish(n, body, True, attempt, status, "", started)
                retryable = status >= 500 or status in _RETRYABLE
                retry_after = _retry_after(resp.headers.get("Retry-After"))
                error = f"HTTP {status}"
            except requests.RequestException as exc:
                # The exception's text can hold the URL, and a Slack URL is a secret: keep the type.
                status, error = None, type(exc).__name__
            except Exception as exc:  # a bug must not stall the group: give it up, on the record
                log.exception("notification %s for receiver %s failed", n.key, r.name)
                status, error, retryable = None, type(exc).__name__, False
            self._count(attempt=True, error=error)
            self.trouble.failed(error, f"{self._size} notifications")
            delay = min(r.backoff_max, r.backoff_initial * 2 ** (attempt - 1))
            delay = retry_after if retry_after is not None else random.uniform(delay / 2, delay)
            delay = min(delay, r.backoff_max)
            spent = time.monotonic() - started
            if (
                not retryable
                or (r.max_attempts and attempt >= r.max_attempts)
                or spent + delay > r.give_up_after
            ):
                return self._finish(n, body, False, attempt, status, error, started)
            self._count(retry=True)
            self._stop.wait(delay)
        return None

    def _headers(self, n: Notification, body: bytes, attempt: int) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "fabricwatch-alerts/0.1",
            IDEMPOTENCY_HEADER: n.key,
            SEQUENCE_HEADER: str(n.seq),
            ATTEMPT_HEADER: str(attempt),
        }
        if self.receiver.secret is not None:
            ts = int(time.time())
            headers[TIMESTAMP_HEADER] = str(ts)
            headers[SIGNATURE_HEADER] = sign(self.receiver.secret.reveal(), ts, body)
        return headers

    def _finish(
        self,
        n: Notification,
        body: bytes,
        ok: bool,
        attempts: int,
        status: int | None,
        error: str,
        started: float,
    ) -> Outcome:
        outcome = Outcome(n, ok, attempts, status, error, time.monotonic() - started)
        with self._lock:
            if ok:
                self.stats.delivered += 1
                self.stats.attempts += 1
            else:
                self.stats.given_up += 1
        if not ok:
            self.give_up.record(outcome, body)
        return outcome

    def _count(self, attempt: bool = False, retry: bool = False, error: str = "") -> None:
        with self._lock:
            self.stats.attempts += attempt
            self.stats.retries += retry
            if error:
                self.stats.last_error = error


def _session(url: str) -> requests.Session:
    """A keep-alive session for one URL, without urllib3's own retries (ours are above). Proxy
    variables (HTTPS_PROXY, NO_PROXY) are resolved once here instead of on every request, where
    scanning the environment cost a third of a request's CPU."""
    session = requests.Session()
    session.proxies = requests.utils.get_environ_proxies(url)
    session.trust_env = False
    adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=1, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def stats_json(queues: dict[str, ReceiverQueue]) -> dict[str, Any]:
    """Per-receiver delivery counters, for the CLI's summary line and the benchmark."""
    return {name: vars(q.stats) | {"pending": q.pending} for name, q in queues.items()}
