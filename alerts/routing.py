"""The route tree, as Alertmanager's: an alert walks down from the root; at each level the first
child whose matchers match takes it (and, with ``continue``, later siblings may take it too); a route
with no matching child takes the alert itself. Children inherit receiver, grouping and timers."""

from __future__ import annotations

from dataclasses import dataclass, field

from fabricwatch.alerts.matchers import Matcher, matchers_string, matches_all

GROUP_BY_ALL = "..."


@dataclass(frozen=True)
class RouteOpts:
    """Where and how often: Alertmanager's ``receiver``, ``group_by`` and the three timers (seconds)."""

    receiver: str
    group_by: tuple[str, ...] = ("alertname",)
    group_wait: float = 30.0
    group_interval: float = 300.0
    repeat_interval: float = 4 * 3600.0

    def group_labels(self, labels: dict[str, str]) -> dict[str, str]:
        """The labels that name this alert's group (``group_by: ['...']`` groups by all labels)."""
        if GROUP_BY_ALL in self.group_by:
            return dict(labels)
        return {k: labels[k] for k in self.group_by if k in labels}


@dataclass
class Route:
    opts: RouteOpts
    matchers: tuple[Matcher, ...] = ()
    continue_: bool = False
    routes: list[Route] = field(default_factory=list)
    key: str = "{}"

    def match(self, labels: dict[str, str]) -> list[Route]:
        """The routes that take an alert with these labels (empty when this route does not match)."""
        if not matches_all(self.matchers, labels):
            return []
        taken: list[Route] = []
        for child in self.routes:
            found = child.match(labels)
            taken += found
            if found and not child.continue_:
                break
        return taken or [self]

    def walk(self) -> list[Route]:
        return [self, *(r for child in self.routes for r in child.walk())]


def child_key(parent_key: str, matchers: tuple[Matcher, ...]) -> str:
    """Alertmanager's route key: the parent's key, ``/`` and this route's matchers."""
    return f"{parent_key}/{matchers_string(matchers)}"
