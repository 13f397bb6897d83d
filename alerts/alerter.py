"""The pure core: anomalies and a ``now`` in, the notifications that are due out. No threads, no
I/O, no clock of its own, so tests drive hours of group_interval in microseconds.

It follows Alertmanager's dispatcher (``dispatch/group.go``) and dedup stage (``notify/notify.go``):

* an alert goes to every route that takes it; per route its ``group_by`` labels name an
  aggregation group;
* a new group is flushed ``group_wait`` after it was created (at once when its first alert started
  longer ago than that), then every ``group_interval``;
* a flush sends the group's alerts when there is a firing alert the receiver has not been told of
  (a new fingerprint, or new labels: severity or job changed), when an alert resolved (receivers
  with ``send_resolved``), when all resolved, or when ``repeat_interval`` passed since the last
  notification; otherwise nothing. Resolved alerts then leave the group, and an empty group ends.

An incident another causes (``caused_by``: a job's hang caused by a storm, drops at a dead link's
port) is muted while its cause fires, and rides in the cause's notifications instead: the cause's
alert carries an ``effects`` annotation, each open effect's summary ("llm-a AllReduce 16 MiB: bus
bandwidth 5.6 GB/s, 67% below its 16.9 GB/s"), so one page says what the fault costs the jobs.

Two choices differ from Alertmanager, both so that a receiver never keeps an alert open forever:
an alert's groups are fixed once a receiver was told of it (a label change updates it in place
rather than moving it), and the end of an alert the receiver was told of is always sent, even when
a silence or an inhibition now mutes that alert. Until a receiver is told, a label change that
routes the alert elsewhere moves it: an incident said a finding within its group's wait (a link
down whose other end says it was taken down on purpose) is never paged.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from fabricwatch.alerts.config import AlertsConfig
from fabricwatch.alerts.matchers import labels_string
from fabricwatch.alerts.payload import Alert, Notification, anomaly_alert, idempotency_key
from fabricwatch.alerts.routing import Route, RouteOpts
from fabricwatch.alerts.silences import Silence
from fabricwatch.schemas.messages import Anomaly

FiringKey = tuple[str, tuple[tuple[str, str], ...], str]


@dataclass
class _Group:
    key: str
    receiver: str
    labels: dict[str, str]
    opts: RouteOpts
    next_at: float
    alerts: dict[str, Alert] = field(default_factory=dict)
    tokens: list[Any] = field(default_factory=list)
    flushed: bool = False
    seq: int = 0
    bodies: Counter[str] = field(default_factory=Counter)


@dataclass
class _Entry:
    """What the receiver of a group was last told (Alertmanager's notification log entry)."""

    firing: frozenset[FiringKey]
    resolved: frozenset[str]
    at: float

    def firing_fingerprints(self) -> set[str]:
        return {key[0] for key in self.firing}


@dataclass
class Step:
    """What one ``advance`` produced: notifications to deliver, and the tokens of anomalies whose
    flush needed no notification (done as far as delivery goes)."""

    notifications: list[Notification] = field(default_factory=list)
    released: list[Any] = field(default_factory=list)


class Alerter:
    def __init__(self, config: AlertsConfig, silences: Callable[[], Iterable[Silence]] | None = None) -> None:
        self.config = config
        self._extra_silences = silences or (lambda: ())
        self._groups: dict[str, _Group] = {}
        self._log: dict[str, _Entry] = {}
        self._heap: list[tuple[float, int, str]] = []
        self._pushes = 0
        self._routes: dict[str, list[tuple[str, Route]]] = {}
        self._storms: dict[str, frozenset[str]] = {}
        self._firing: set[str] = set()
        self._sources: dict[str, dict[str, str]] = {}
        self._effects: dict[str, dict[str, str]] = {}
        """Per cause's fingerprint, the summaries of the open incidents it causes."""
        self._source_matchers = [r.source for r in config.inhibit_rules]
        self._opened_by: dict[str, Any] = {}
        self._status: dict[str, str] = {}
        self.repeats = 0
        """Events that told an alert what it already knew (its status again: a worker's restart, a
        rebalance's re-read): they change nothing and are counted here."""

    def ingest(self, anomaly: Anomaly, now: float, token: Any = None) -> int:
        """Take one anomaly event; return how many times ``token`` will be released (in a
        notification's tokens or a Step's released list): once per group it joined, and once more
        for the anomaly that starts an alert, when that alert has ended and left every group. So a
        consumer that commits released offsets never commits past an alert that is still open,
        and after a restart re-reads from there and rebuilds what its receivers were told."""
        alert = anomaly_alert(anomaly, self.config.labels, self.config.generator_url)
        fp = alert.fingerprint
        if self._status.get(fp) == anomaly.status:
            self.repeats += 1
        self._status[fp] = anomaly.status
        routes = self._routes.get(fp)
        held = 0
        if routes is None:
            routes = self._routes[fp] = self._route(alert)
            if token is not None:
                self._opened_by[fp] = token
                held = 1
        elif not self._told(fp, routes) and _keys(moved := self._route(alert)) != _keys(routes):
            for gk, _ in routes:  # its events there release their tokens at the group's flush
                if gk in self._groups:
                    self._groups[gk].alerts.pop(fp, None)
            routes = self._routes[fp] = moved
        for gk, route in routes:
            group = self._groups.get(gk)
            if group is None:
                group = self._groups[gk] = _Group(
                    gk, route.opts.receiver, route.opts.group_labels(alert.labels), route.opts, now
                )
                self._schedule(group, now + route.opts.group_wait)
            group.alerts[fp] = alert
            if token is not None:
                group.tokens.append(token)
            if not group.flushed and alert.starts_ns / 1e9 + group.opts.group_wait < now < group.next_at:
                self._schedule(group, now)
        self._index_sources(anomaly, alert)
        return len(routes) + held

    def _route(self, alert: Alert) -> list[tuple[str, Route]]:
        return [(_group_key(r, alert), r) for r in self.config.route.match(alert.labels)]

    def _told(self, fp: str, routes: list[tuple[str, Route]]) -> bool:
        """Whether a receiver of the alert's groups was told of it (firing or ended)."""
        entries = (self._log.get(gk) for gk, _ in routes)
        return any(e is not None and (fp in e.firing_fingerprints() or fp in e.resolved) for e in entries)

    def advance(self, now: float) -> Step:
        """Flush every group whose timer fell due up to ``now``, each at its own due time."""
        step = Step()
        while self._heap and self._heap[0][0] <= now:
            due, _, gk = heapq.heappop(self._heap)
            group = self._groups.get(gk)
            if group is None or group.next_at != due:
                continue
            self._flush(group, due, step)
            if group.alerts:
                self._schedule(group, due + group.opts.group_interval)
        return step

    def flush_all(self, now: float) -> Step:
        """Flush every group now, timers or not: the end of a replay, where no later tick will come."""
        step = Step()
        for group in list(self._groups.values()):
            self._flush(group, now, step)
            if group.alerts:
                self._schedule(group, now + group.opts.group_interval)
        return step

    def next_due(self) -> float | None:
        """When ``advance`` next has work (possibly a stale timer, which costs nothing)."""
        return self._heap[0][0] if self._heap else None

    @property
    def group_count(self) -> int:
        return len(self._groups)

    def _schedule(self, group: _Group, at: float) -> None:
        group.next_at = at
        self._pushes += 1
        heapq.heappush(self._heap, (at, self._pushes, group.key))

    def _index_sources(self, anomaly: Anomaly, alert: Alert) -> None:
        fp = alert.fingerprint
        if anomaly.caused_by:
            effects = self._effects.setdefault(anomaly.caused_by, {})
            if alert.resolved:
                effects.pop(fp, None)
            else:
                effects[fp] = f"{anomaly.kind}: {anomaly.summary}"
            if not effects:
                del self._effects[anomaly.caused_by]
        if alert.resolved:
            self._effects.pop(fp, None)
            self._storms.pop(fp, None)
            self._sources.pop(fp, None)
            self._firing.discard(fp)
            return
        self._firing.add(fp)
        if anomaly.kind == "pfc_storm":
            self._storms[fp] = frozenset(anomaly.devices)
        if any(all(m.matches(alert.labels) for m in src) for src in self._source_matchers):
            self._sources[fp] = alert.labels
        else:
            self._sources.pop(fp, None)

    def _muted(self, alert: Alert, now: float) -> bool:
        labels = alert.labels
        silences = (*self.config.silences, *self._extra_silences())
        if any(s.mutes(labels, now) for s in silences):
            return True
        if labels.get("caused_by") in self._firing:
            return True  # its cause pages for it (drops at a dead link's port)
        if labels.get("kind") in self.config.storm_inhibits and any(
            sfp != alert.fingerprint and labels.get("device") in devices
            for sfp, devices in self._storms.items()
        ):
            return True
        return any(
            rule.mutes(labels, self._sources.items(), alert.fingerprint) for rule in self.config.inhibit_rules
        )

    def _flush(self, group: _Group, now: float, step: Step) -> None:
        group.flushed = True
        entry = self._log.get(group.key)
        told = entry.firing_fingerprints() if entry else set()
        alerts = sorted(group.alerts.values(), key=lambda a: (a.starts_ns, a.fingerprint))
        visible = [
            self._with_effects(a)
            for a in alerts
            if (a.resolved and a.fingerprint in told) or not self._muted(a, now)
        ]
        firing = frozenset(_firing_key(a) for a in visible if not a.resolved)
        resolved = frozenset(a.fingerprint for a in visible if a.resolved)
        receiver = self.config.receivers[group.receiver]
        reason = _needs_update(
            entry, firing, resolved, receiver.send_resolved, group.opts.repeat_interval, now
        )
        tokens, group.tokens = group.tokens, []
        # Muted alerts are left out, not ended: for the receiver, one it was told fires still does.
        hidden = {a.fingerprint for a in alerts if not a.resolved} - {a.fingerprint for a in visible}
        still = frozenset(k for k in entry.firing if k[0] in hidden) if entry else frozenset()
        sent = False
        if reason and visible:  # with nothing visible, Alertmanager's pipeline stops at the mute stage
            payload = [a for a in visible if receiver.send_resolved or not a.resolved]
            if payload:
                self._notify(group, payload, receiver.max_alerts, now, reason, tokens, step)
                sent = True
            self._log[group.key] = _Entry(firing | still, resolved, now)
        if not sent:
            step.released.extend(tokens)
        for a in alerts:
            if a.resolved:
                del group.alerts[a.fingerprint]
                self._forget_route(a.fingerprint, step)
        if not group.alerts:
            del self._groups[group.key]
            self._log.pop(group.key, None)

    def _with_effects(self, alert: Alert) -> Alert:
        """The alert as sent: a firing cause with what it causes that is open (``effects``)."""
        effects = self._effects.get(alert.fingerprint)
        if alert.resolved or not effects:
            return alert
        said = "; ".join(effects[fp] for fp in sorted(effects))
        return replace(alert, annotations={**alert.annotations, "effects": said})

    def _notify(
        self,
        group: _Group,
        payload: list[Alert],
        max_alerts: int,
        now: float,
        reason: str,
        tokens: list[Any],
        step: Step,
    ) -> None:
        shown = tuple(payload[:max_alerts] if max_alerts else payload)
        # The ordinal counts earlier sends of this very body in the group (repeats, or a flap back
        # to an earlier state), so that no two notifications of a group share a key.
        body = idempotency_key(group.receiver, group.key, shown, 0)
        ordinal = group.bodies[body]
        group.bodies[body] += 1
        key = body if ordinal == 0 else idempotency_key(group.receiver, group.key, shown, ordinal)
        group.seq += 1
        step.notifications.append(
            Notification(
                receiver=group.receiver,
                group_key=group.key,
                group_labels=dict(group.labels),
                alerts=shown,
                truncated=len(payload) - len(shown),
                seq=group.seq,
                at=now,
                reason=reason,
                key=key,
                tokens=tuple(tokens),
            )
        )

    def _forget_route(self, fp: str, step: Step) -> None:
        routes = self._routes.get(fp, [])
        if not any(fp in self._groups[gk].alerts for gk, _ in routes if gk in self._groups):
            self._routes.pop(fp, None)
            self._status.pop(fp, None)
            if fp in self._opened_by:
                step.released.append(self._opened_by.pop(fp))


def _keys(routes: list[tuple[str, Route]]) -> list[str]:
    return [gk for gk, _ in routes]


def _firing_key(alert: Alert) -> FiringKey:
    """A firing alert as the receiver knows it: its fingerprint, labels and effects (new labels, or
    a job newly hurt by it, are news)."""
    return alert.fingerprint, tuple(sorted(alert.labels.items())), alert.annotations.get("effects", "")


def _group_key(route: Route, alert: Alert) -> str:
    """Alertmanager's group key: the route's key and the group labels, ``{}/{kind="incast"}:{...}``."""
    return f"{route.key}:{labels_string(route.opts.group_labels(alert.labels))}"


def _needs_update(
    entry: _Entry | None,
    firing: frozenset[FiringKey],
    resolved: frozenset[str],
    send_resolved: bool,
    repeat: float,
    now: float,
) -> str:
    """Alertmanager's DedupStage.needsUpdate: the reason to notify, or "" for none."""
    if entry is None:
        return "first notification" if firing else ""
    if not firing <= entry.firing:
        return "new alerts in group" if entry.firing else "first notification"
    if not firing:
        return "all alerts resolved" if entry.firing else ""
    if send_resolved and not resolved <= entry.resolved:
        return "new resolved alerts"
    return "repeat interval elapsed" if entry.at + repeat <= now else ""
