"""Alertmanager label matchers: ``name="v"``, ``name!="v"``, ``name=~"re"``, ``name!~"re"``.

Regexes are anchored at both ends, as in Alertmanager, so ``kind=~"incast"`` does not match
``incast_x``; a missing label has the value ``""``, so ``port!=""`` means "has a port".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabricwatch.schemas.config import ConfigError

_MATCHER = re.compile(r'^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*(?:"((?:[^"\\]|\\.)*)"|([^"]*?))\s*$')
_OPS = ("=", "!=", "=~", "!~")


@dataclass(frozen=True)
class Matcher:
    """One label test; ``regex`` is compiled once (anchored) for ``=~`` and ``!~``."""

    name: str
    op: str
    value: str
    regex: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    def matches(self, labels: dict[str, str]) -> bool:
        got = labels.get(self.name, "")
        if self.op == "=":
            return got == self.value
        if self.op == "!=":
            return got != self.value
        assert self.regex is not None
        found = self.regex.fullmatch(got) is not None
        return found if self.op == "=~" else not found

    def __str__(self) -> str:
        return f"{self.name}{self.op}{_quote(self.value)}"


def parse_matcher(text: str) -> Matcher:
    """Parse ``name<op>"value"`` (quotes optional); ValueError says what is wrong."""
    m = _MATCHER.match(text)
    if m is None:
        raise ValueError(f'{text!r} is not a matcher: expected name="value" with one of {", ".join(_OPS)}')
    name, op = m.group(1), m.group(2)
    value = m.group(3) if m.group(3) is not None else m.group(4)
    value = re.sub(r"\\(.)", r"\1", value)
    regex = None
    if op in ("=~", "!~"):
        try:
            regex = re.compile(value)
        except re.error as exc:
            raise ValueError(f"{text!r}: bad regular expression: {exc}") from None
    return Matcher(name, op, value, regex)


def matches_all(matchers: tuple[Matcher, ...], labels: dict[str, str]) -> bool:
    return all(m.matches(labels) for m in matchers)


def matchers_string(matchers: tuple[Matcher, ...]) -> str:
    """Alertmanager's rendering of a matcher list, used in route keys: ``{a="b",c=~"d"}``."""
    return "{" + ",".join(str(m) for m in matchers) + "}"


def labels_string(labels: dict[str, str]) -> str:
    """Prometheus' rendering of a label set (sorted, ``", "`` separated), used in group keys."""
    return "{" + ", ".join(f"{k}={_quote(v)}" for k, v in sorted(labels.items())) + "}"


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_matchers(texts: list[str], key: str, where: str) -> tuple[Matcher, ...]:
    """Matchers of a config list; an error names the file (``where``) and the item's key."""
    out = []
    for i, text in enumerate(texts):
        try:
            out.append(parse_matcher(text))
        except ValueError as exc:
            raise ConfigError(f"{where}: {key}[{i}]: {exc}") from None
    return tuple(out)
