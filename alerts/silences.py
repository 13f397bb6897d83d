"""Silences and inhibition: which alerts are muted at a notification's flush (as in Alertmanager,
muting is decided when a group is flushed, so an alert whose silence expires, or whose inhibiting
PFC storm ends, is notified at the next flush after that)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from alerts.matchers import Matcher, matches_all

log = logging.getLogger("fabricwatch.alerts")


@dataclass(frozen=True)
class Silence:
    """Mutes alerts whose labels match all ``matchers`` from ``starts_at`` until ``ends_at`` (epoch s)."""

    matchers: tuple[Matcher, ...]
    ends_at: float
    starts_at: float = 0.0
    comment: str = ""
    created_by: str = ""

    def mutes(self, labels: dict[str, str], now: float) -> bool:
        return self.starts_at <= now < self.ends_at and matches_all(self.matchers, labels)


@dataclass(frozen=True)
class InhibitRule:
    """Alertmanager's inhibit rule: a firing alert matching ``source`` mutes alerts matching ``target``
    whose ``equal`` labels have the same values as the source's. An alert never inhibits itself."""

    source: tuple[Matcher, ...]
    target: tuple[Matcher, ...]
    equal: tuple[str, ...] = ()

    def mutes(self, labels: dict[str, str], sources: Iterable[tuple[str, dict[str, str]]], fp: str) -> bool:
        if not matches_all(self.target, labels):
            return False
        return any(
            sfp != fp
            and matches_all(self.source, slabels)
            and all(slabels.get(k, "") == labels.get(k, "") for k in self.equal)
            for sfp, slabels in sources
        )


class SilenceFile:
    """Silences kept in a YAML file (a list, or a mapping with a ``silences:`` list), re-read when
    its modification time changes so ``fabricwatch silence`` takes effect without a restart."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._mtime: int | None = None
        self._silences: list[Silence] = []

    def current(self) -> list[Silence]:
        from alerts.config import parse_silences

        try:
            mtime = os.stat(self.path).st_mtime_ns
        except FileNotFoundError:
            self._mtime, self._silences = None, []
            return []
        if mtime != self._mtime:
            import yaml

            from detectors.config import ConfigError

            self._mtime = mtime
            try:
                doc = yaml.safe_load(self.path.read_text(encoding="utf-8")) or []
                items = doc.get("silences", []) if isinstance(doc, dict) else doc
                self._silences = parse_silences(items, str(self.path))
            except (OSError, yaml.YAMLError, ConfigError, AttributeError) as exc:
                # A half-edited file must not stop alerting: keep the silences read before.
                log.warning("%s: keeping the previous %d silences: %s", self.path, len(self._silences), exc)
        return self._silences


def to_epoch(value: datetime | str | float | int) -> float:
    """Seconds since the epoch from an ISO 8601 time (UTC when no zone is given) or a number."""
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()
