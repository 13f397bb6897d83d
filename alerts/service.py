"""The alerter with its delivery queues and, on wall time, a timer thread: what ``replay --alerts``
and ``fabricwatch alert`` run.

Two clocks. ``wall=True`` (streaming): ``now`` is the wall clock and a thread flushes groups when
their timers fall due. ``wall=False`` (replay on trace time): the caller passes each anomaly's trace
time and calls ``advance``; group_wait and group_interval then mean trace seconds, so a replay at
any speed makes the notifications the live system would have made. Delivery (timeouts, retries)
is always on wall time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from fabricwatch.alerts.alerter import Alerter, Step
from fabricwatch.alerts.config import AlertsConfig
from fabricwatch.alerts.delivery import GiveUpLog, Outcome, ReceiverQueue
from fabricwatch.alerts.silences import SilenceFile
from fabricwatch.schemas.messages import Anomaly


class AlertService:
    def __init__(
        self,
        config: AlertsConfig,
        wall: bool = True,
        on_token_done: Callable[[Any], None] | None = None,
        give_up: GiveUpLog | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.clock = clock
        self.on_token_done = on_token_done
        silences = SilenceFile(config.silences_file).current if config.silences_file else None
        self.alerter = Alerter(config, silences)
        self.give_up = give_up or GiveUpLog(config.give_up_log)
        self.queues = {
            name: ReceiverQueue(rc, config.external_url, self._done, self.give_up)
            for name, rc in config.receivers.items()
        }
        self.notifications = 0
        self._cond = threading.Condition()
        self._closed = False
        self._timer = threading.Thread(target=self._tick, name="alerts-timer", daemon=True) if wall else None
        if self._timer is not None:
            self._timer.start()

    def ingest(self, anomaly: Anomaly, token: Any = None, now: float | None = None) -> int:
        """Take an anomaly (at ``now``, the wall clock by default). Timers that fell due before
        ``now`` flush first, at their own times; then what is due at once goes out (with
        ``group_wait: 0``, this anomaly's notification)."""
        with self._cond:
            now = self.clock() if now is None else now
            self._dispatch(self.alerter.advance(now))
            joined = self.alerter.ingest(anomaly, now, token)
            self._dispatch(self.alerter.advance(now))
            self._cond.notify()
        return joined

    def advance(self, now: float) -> None:
        with self._cond:
            self._dispatch(self.alerter.advance(now))

    def flush_all(self, now: float | None = None) -> None:
        with self._cond:
            self._dispatch(self.alerter.flush_all(self.clock() if now is None else now))

    def drain(self, timeout_s: float | None = None) -> bool:
        """Wait for every queued notification to be delivered or given up."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for q in self.queues.values():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not q.drain(left):
                return False
        return True

    @property
    def pending(self) -> int:
        return sum(q.pending for q in self.queues.values())

    def close(self, drain_s: float = 0.0) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._timer is not None:
            self._timer.join()
        self.drain(drain_s)
        for q in self.queues.values():
            q.close()

    def _dispatch(self, step: Step) -> None:
        """Called with the lock held, so two flushes of one group reach its queue in order."""
        for n in step.notifications:
            self.notifications += 1
            self.queues[n.receiver].submit(n)
        if self.on_token_done is not None:
            for token in step.released:
                self.on_token_done(token)

    def _done(self, outcome: Outcome) -> None:
        if self.on_token_done is not None:
            for token in outcome.notification.tokens:
                self.on_token_done(token)

    def _tick(self) -> None:
        with self._cond:
            while not self._closed:
                due = self.alerter.next_due()
                wait = None if due is None else due - self.clock()
                if wait is None or wait > 0:
                    self._cond.wait(wait)
                    continue
                self._dispatch(self.alerter.advance(self.clock()))
