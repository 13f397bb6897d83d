"""Trouble in the log: its beginning, its progress at most every ``every_s``, and its end."""

from __future__ import annotations

import logging

from fabricwatch.streams.trouble import Trouble


def test_trouble_is_said_when_it_begins_while_it_lasts_and_when_it_ends(caplog):
    now = [0.0]
    trouble = Trouble("store x", logging.getLogger("fabricwatch.test"), every_s=10, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="fabricwatch.test"):
        trouble.ok("nothing wrong yet")  # no trouble, nothing to say
        for t in range(0, 25):
            now[0] = float(t)
            trouble.failed("connection refused", "1,000 rows")
        now[0] = 30.0
        trouble.ok("1,000 rows stored")
        trouble.ok()
    assert [r.message for r in caplog.records] == [
        "store x: failing (connection refused); retrying with backoff; 1,000 rows waiting",
        "store x: still failing after 10 s and 11 attempts (connection refused); 1,000 rows waiting",
        "store x: still failing after 20 s and 21 attempts (connection refused); 1,000 rows waiting",
        "store x: recovered after 30 s and 25 failed attempts; 1,000 rows stored",
    ]
    assert not trouble.ongoing
