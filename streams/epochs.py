"""Noticing that the broker behind a consumer is a new log, so that no record of it is skipped.

A Kafka cluster keeps its cluster id for its whole life; one whose data is wiped (the embedded
broker restarted, a cluster rebuilt) starts over with a new id and with offsets from zero. A
consumer that reconnects to it still holds its positions in the old log: reading on from there
skips every new record below them (measured: a sink that had read 5 records stored 7 of the 12
published after a restart). Kafka's own check, out-of-range positions, catches only positions past
the new log's end, not the ones the new log has already grown past.

So the consumer compares the cluster id in each metadata refresh with the one it started with
(``METADATA_MAX_AGE_MS`` makes those refreshes frequent: after a reconnect kafka-python does not
always ask for metadata at once, and a rebalance can let it fetch from the old positions first).
When it changes, the records of the old log that were not yet read are gone (said once, with the
ids), and every assigned partition is read again from its beginning: everything in the new log is
new to this consumer. The callers store or notify idempotently, so a record read twice in the
moment before the change is noticed costs nothing.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

METADATA_MAX_AGE_MS = 5000
"""For consumers that watch the cluster id: a new log is noticed within this long (one small
metadata request per interval; kafka-python's default is 5 minutes)."""


class LogEpochs:
    """Follows the cluster id a kafka-python consumer's metadata reports; ``changed`` rewinds."""

    def __init__(self, consumer: Any, who: str) -> None:
        self._consumer = consumer
        self._who = who
        self.cluster_id: str | None = None

    def changed(self) -> bool:
        """True (once per change) when the broker is a new log; then every assigned partition has
        been sought to its beginning and records already returned by this poll should be dropped."""
        current = self._consumer._client.cluster.cluster_id  # kafka-python keeps it from metadata
        if current is None or current == self.cluster_id:
            return False
        if self.cluster_id is None:
            self.cluster_id = current
            return False
        log.warning(
            "%s: the broker is a new log (cluster id %s, was %s): records it held before and not yet "
            "read are lost; reading every partition again from its beginning",
            self._who,
            current,
            self.cluster_id,
        )
        self.cluster_id = current
        assigned = self._consumer.assignment()
        if assigned:
            self._consumer.seek_to_beginning(*assigned)
        return True
