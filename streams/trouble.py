"""Say when trouble begins, how it goes and when it ends, once each, in the log.

A consumer that retries a store or a webhook for a minute must not be silent (nobody knows), nor
log every attempt (nobody reads it): the first failure is a warning, then one progress line every
``every_s`` while it lasts, and the first success after it says how long it lasted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable


class Trouble:
    def __init__(
        self,
        what: str,
        log: logging.Logger,
        every_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.what = what
        self.log = log
        self.every_s = every_s
        self._clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None
        self._said = 0.0
        self._failures = 0

    @property
    def ongoing(self) -> bool:
        return self._since is not None

    def failed(self, error: str, backlog: str = "") -> None:
        """One failed attempt; ``backlog`` says what waits (e.g. "1,200 rows")."""
        now = self._clock()
        waiting = f"; {backlog} waiting" if backlog else ""
        with self._lock:
            self._failures += 1
            if self._since is None:
                self._since, self._said = now, now
                self.log.warning("%s: failing (%s); retrying with backoff%s", self.what, error, waiting)
            elif now - self._said >= self.every_s:
                self._said = now
                self.log.warning(
                    "%s: still failing after %.0f s and %d attempts (%s)%s",
                    self.what,
                    now - self._since,
                    self._failures,
                    error,
                    waiting,
                )

    def ok(self, done: str = "") -> None:
        """A success: ends the trouble, if there was any, with one line."""
        if self._since is None:
            return
        with self._lock:
            if self._since is None:
                return
            lasted, failures = self._clock() - self._since, self._failures
            self._since, self._failures = None, 0
        self.log.warning(
            "%s: recovered after %.0f s and %d failed attempts%s",
            self.what,
            lasted,
            failures,
            f"; {done}" if done else "",
        )
