"""From anomaly to alert, and from a group's alerts to the bytes a receiver gets.

The webhook body is Alertmanager's (``notify/webhook/webhook.go`` Message: ``template.Data`` plus
``version: "4"``, ``groupKey``, ``truncatedAlerts``), so any Alertmanager webhook consumer takes it.
Times are Go's RFC 3339 with trimmed nanoseconds in UTC; a firing alert's ``endsAt`` is Go's zero
time ``0001-01-01T00:00:00Z``, as Alertmanager sends it.
"""

from __future__ import annotations

import hashlib
import json
import string
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from fabricwatch.schemas.messages import Anomaly

ZERO_TIME = "0001-01-01T00:00:00Z"
_COLORS = {"firing": "#d63232", "resolved": "#2eb67d"}


@dataclass
class Alert:
    """The alert an anomaly's fingerprint stands for, in its latest state."""

    fingerprint: str
    labels: dict[str, str]
    annotations: dict[str, str]
    starts_ns: int
    ends_ns: int | None
    generator_url: str = ""

    @property
    def resolved(self) -> bool:
        return self.ends_ns is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "status": "resolved" if self.resolved else "firing",
            "labels": self.labels,
            "annotations": self.annotations,
            "startsAt": rfc3339(self.starts_ns),
            "endsAt": rfc3339(self.ends_ns) if self.ends_ns is not None else ZERO_TIME,
            "generatorURL": self.generator_url,
            "fingerprint": self.fingerprint,
        }


@dataclass(frozen=True)
class Notification:
    """One message for one receiver about one group: what the pure core decided to send.

    ``key`` is the idempotency key: a hash of the receiver, the group and the body, plus how often
    that body was sent in the group before (a repeat gets a key of its own), so a receiver can drop
    a retried duplicate, and a restarted consumer that rebuilds the same notification sends the
    same key.
    """

    receiver: str
    group_key: str
    group_labels: dict[str, str]
    alerts: tuple[Alert, ...]
    truncated: int
    seq: int
    at: float
    reason: str
    key: str = ""
    tokens: tuple[Any, ...] = field(default=(), compare=False)

    @property
    def status(self) -> str:
        return "firing" if any(not a.resolved for a in self.alerts) else "resolved"


def anomaly_alert(anomaly: Anomaly, static: dict[str, str], generator_url: str = "") -> Alert:
    """Labels identify and route (alertname/kind, severity, root device/port, job); annotations
    explain (summary, evidence, remediation hint)."""
    root = anomaly.root
    labels = dict(static)
    labels.update(alertname=anomaly.kind, kind=anomaly.kind, severity=anomaly.severity, device=root.device)
    labels["class"] = "finding" if anomaly.finding else "incident"
    if root.port:
        labels["port"] = root.port
    if root.priority is not None:
        labels["priority"] = str(root.priority)
    if root.group:
        labels["ecmp_group" if anomaly.kind == "ecmp_collapse" else "root_group"] = root.group
    if anomaly.jobs:
        labels["job"] = ",".join(anomaly.jobs)
    if anomaly.caused_by:
        labels["caused_by"] = anomaly.caused_by
    annotations = {"summary": anomaly.summary}
    if anomaly.hint:
        annotations["remediation"] = anomaly.hint
    if anomaly.evidence:
        annotations["evidence"] = "; ".join(f"{k}={v}" for k, v in sorted(anomaly.evidence.items()))
    for name in ("devices", "hosts", "collectives"):
        values = getattr(anomaly, name)
        if values:
            annotations[name] = ", ".join(values)
    ends = (anomaly.end_ns or anomaly.ts_ns) if anomaly.status == "resolved" else None
    alert = Alert(anomaly.fingerprint, labels, annotations, anomaly.start_ns, ends)
    if generator_url:
        alert.generator_url = render_url(generator_url, alert)
    return alert


def render_url(template: str, alert: Alert) -> str:
    """``str.format`` over the alert's labels (URL-quoted; a missing label is empty), ``fingerprint``,
    ``starts_ms`` and ``ends_ms`` (``now`` while firing), e.g. a Grafana dashboard link."""
    values = _Blank({k: quote(v, safe="") for k, v in alert.labels.items()})
    values.update(
        fingerprint=alert.fingerprint,
        starts_ms=str(alert.starts_ns // 1_000_000),
        ends_ms=str(alert.ends_ns // 1_000_000) if alert.ends_ns is not None else "now",
    )
    return string.Formatter().vformat(template, (), values)


def check_url_template(template: str) -> None:
    """Raise ValueError when ``template`` is not a valid format string (at config load, not at 3 am)."""
    try:
        list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"generator_url: {exc}") from None


class _Blank(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return ""


def alertmanager_body(n: Notification, external_url: str) -> dict[str, Any]:
    """Alertmanager's webhook Message for a notification."""
    alerts = [a.to_json() for a in n.alerts]
    return {
        "receiver": n.receiver,
        "status": n.status,
        "alerts": alerts,
        "groupLabels": n.group_labels,
        "commonLabels": _common([a.labels for a in n.alerts]),
        "commonAnnotations": _common([a.annotations for a in n.alerts]),
        "externalURL": external_url,
        "version": "4",
        "groupKey": n.group_key,
        "truncatedAlerts": n.truncated,
    }


def slack_body(n: Notification, external_url: str) -> dict[str, Any]:
    """A Slack incoming-webhook message: one attachment per alert, coloured by status."""
    firing = sum(not a.resolved for a in n.alerts)
    title = f"[{n.status.upper()}{f':{firing}' if firing else ''}] " + " ".join(
        f"{k}={v}" for k, v in sorted(n.group_labels.items())
    )
    attachments = []
    for a in n.alerts:
        status = "resolved" if a.resolved else "firing"
        text = a.annotations.get("summary", "")
        if "remediation" in a.annotations and not a.resolved:
            text += f"\n*What to do:* {a.annotations['remediation']}"
        attachment = {
            "color": _COLORS[status],
            "title": f"{status}: {a.labels.get('alertname', '')}",
            "text": text,
        }
        if a.generator_url:
            attachment["title_link"] = a.generator_url
        attachments.append(attachment)
    body: dict[str, Any] = {"text": title, "attachments": attachments}
    if external_url:
        body["text"] += f" <{external_url}|fabricwatch>"
    return body


def encode_body(n: Notification, fmt: str, external_url: str) -> bytes:
    data = slack_body(n, external_url) if fmt == "slack" else alertmanager_body(n, external_url)
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


def idempotency_key(receiver: str, group_key: str, alerts: tuple[Alert, ...], ordinal: int) -> str:
    """Stable for the same receiver, group, alert states and repeat ordinal; 32 hex digits."""
    h = hashlib.sha256()
    h.update(f"{receiver}\0{group_key}\0{ordinal}\0".encode())
    h.update(json.dumps([a.to_json() for a in alerts], sort_keys=True, separators=(",", ":")).encode())
    return h.hexdigest()[:32]


def rfc3339(ns: int) -> str:
    """Go's RFC3339Nano in UTC: ``2026-11-21T18:35:13.5Z`` (fraction trimmed, none when whole)."""
    seconds, frac = divmod(ns, 1_000_000_000)
    text = datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    if frac:
        text += "." + f"{frac:09d}".rstrip("0")
    return text + "Z"


def _common(maps: list[dict[str, str]]) -> dict[str, str]:
    if not maps:
        return {}
    first, rest = maps[0], maps[1:]
    return {k: v for k, v in first.items() if all(m.get(k) == v for m in rest)}
