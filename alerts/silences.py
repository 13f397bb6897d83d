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
from typing import Any

import msgspec

from fabricwatch.alerts.matchers import Matcher, matches_all, parse_matchers
from fabricwatch.schemas.config import ConfigError, convert, read_yaml

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
        try:
            mtime = os.stat(self.path).st_mtime_ns
        except FileNotFoundError:
            self._mtime, self._silences = None, []
            return []
        if mtime != self._mtime:
            self._mtime = mtime
            try:
                self._silences = parse_silences(read_silence_items(self.path), str(self.path))
            except ConfigError as exc:
                # A half-edited file must not stop alerting: keep the silences read before.
                log.warning("%s: keeping the previous %d silences: %s", self.path, len(self._silences), exc)
        return self._silences


class SilenceSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    matchers: list[str]
    ends_at: datetime | float
    starts_at: datetime | float = 0.0
    comment: str = ""
    created_by: str = ""


def read_silence_items(path: Path) -> list[Any]:
    """The plain items of a silences file (a list, or a mapping with a ``silences:`` list); a
    missing file has none."""
    if not path.exists():
        return []
    doc = read_yaml(path)
    items = (doc.get("silences") if isinstance(doc, dict) else doc) or []
    if not isinstance(items, list):
        raise ConfigError("expected a list of silences", path)
    return items


def parse_silences(items: list[Any], where: str, key: str = "silences") -> list[Silence]:
    """Silences from plain mappings (the config's list or a silences file)."""
    out = []
    for i, item in enumerate(items):
        spec = convert(item, SilenceSpec, where, f"{key}[{i}]", strict=False)
        matchers = parse_matchers(spec.matchers, f"{key}[{i}].matchers", where)
        if not matchers:
            raise ConfigError(f"{where}: {key}[{i}].matchers: a silence needs at least one matcher")
        out.append(
            Silence(matchers, to_epoch(spec.ends_at), to_epoch(spec.starts_at), spec.comment, spec.created_by)
        )
    return out


def to_epoch(value: datetime | str | float | int) -> float:
    """Seconds since the epoch from an ISO 8601 time (UTC when no zone is given) or a number."""
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.timestamp()
