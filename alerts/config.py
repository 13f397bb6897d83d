"""The ``alerts:`` section of the YAML config: receivers, the route tree, inhibition and silences.

Parsed in two steps: msgspec checks the shape (unknown keys, wrong types, naming the path), then
``compile`` turns durations, matchers and secrets into the runtime objects, raising ConfigError
with the key path (``alerts.route.routes[1].matchers[0]: ...``). Secrets come from the environment
or files only, are held in ``Secret`` (whose repr and str hide the value) and are never logged.
"""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import msgspec

from fabricwatch.alerts.matchers import parse_matchers
from fabricwatch.alerts.payload import check_url_template
from fabricwatch.alerts.routing import Route, RouteOpts, child_key
from fabricwatch.alerts.silences import InhibitRule, Silence, SilenceSpec, parse_silences
from fabricwatch.schemas.config import ConfigError, ConfigFile, convert

Duration = str | float | int
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")


class RouteSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True, rename={"continue_": "continue"}):
    receiver: str | None = None
    matchers: list[str] = msgspec.field(default_factory=list)
    group_by: list[str] | None = None
    group_wait: Duration | None = None
    group_interval: Duration | None = None
    repeat_interval: Duration | None = None
    continue_: bool = False
    routes: list[RouteSpec] = msgspec.field(default_factory=list)


class ReceiverSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    name: str
    url: str | None = None
    url_env: str | None = None
    url_file: str | None = None
    format: Literal["alertmanager", "slack"] = "alertmanager"
    secret_env: str | None = None
    secret_file: str | None = None
    ca_file: str | None = None
    verify_tls: bool = True
    timeout: Duration = "5s"
    connect_timeout: Duration = "2s"
    backoff_initial: Duration = "0.5s"
    backoff_max: Duration = "30s"
    max_attempts: int = 0
    give_up_after: Duration = "10m"
    concurrency: int = 4
    queue_size: int = 10_000
    send_resolved: bool = True
    max_alerts: int = 0

    def __repr__(self) -> str:
        return f"ReceiverSpec(name={self.name!r}, format={self.format!r})"


class InhibitSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    source_matchers: list[str]
    target_matchers: list[str]
    equal: list[str] = msgspec.field(default_factory=list)


class AlertsSpec(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    receivers: list[ReceiverSpec]
    route: RouteSpec
    external_url: str = ""
    generator_url: str = ""
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    inhibit_rules: list[InhibitSpec] = msgspec.field(default_factory=list)
    storm_inhibits: list[str] = msgspec.field(default_factory=lambda: ["incast", "outlier"])
    silences: list[SilenceSpec] = msgspec.field(default_factory=list)
    silences_file: str | None = None
    give_up_log: str | None = None
    give_up_topic: str | None = None
    replay_clock: Literal["trace", "wall"] = "trace"
    findings_receiver: str | None = None


class Secret:
    """A secret value that never shows in repr, str, logs or tracebacks of the objects holding it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__


@dataclass(frozen=True)
class ReceiverConfig:
    """One webhook endpoint and how to deliver to it (seconds for every duration)."""

    name: str
    url: Secret
    format: str = "alertmanager"
    secret: Secret | None = None
    verify: bool | str = True
    timeout: float = 5.0
    connect_timeout: float = 2.0
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    max_attempts: int = 0
    give_up_after: float = 600.0
    concurrency: int = 4
    queue_size: int = 10_000
    send_resolved: bool = True
    max_alerts: int = 0

    def __repr__(self) -> str:
        signed = "signed" if self.secret else "unsigned"
        return f"ReceiverConfig(name={self.name!r}, format={self.format!r}, {signed}, verify={self.verify!r})"

    __str__ = __repr__


@dataclass(frozen=True)
class AlertsConfig:
    receivers: dict[str, ReceiverConfig]
    route: Route
    external_url: str = ""
    generator_url: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    inhibit_rules: tuple[InhibitRule, ...] = ()
    storm_inhibits: frozenset[str] = frozenset({"incast", "outlier"})
    silences: tuple[Silence, ...] = ()
    silences_file: Path | None = None
    give_up_log: Path | None = None
    give_up_topic: str | None = None
    replay_clock: str = "trace"


def load_alerts_config(path: str | Path, environ: dict[str, str] | None = None) -> AlertsConfig:
    """Read the ``alerts:`` section of a config file (the same file as ``detectors:``)."""
    section = ConfigFile(path).raw("alerts")
    if not isinstance(section, dict):
        raise ConfigError("no alerts: section (a mapping with receivers: and route:)", path)
    return parse_alerts(section, str(path), environ)


def parse_alerts(
    section: dict[str, Any], where: str = "config", environ: dict[str, str] | None = None
) -> AlertsConfig:
    """Check and compile an ``alerts:`` mapping; errors name the key path and the problem."""
    environ = dict(os.environ) if environ is None else environ
    spec = convert(section, AlertsSpec, where, "alerts")
    receivers: dict[str, ReceiverConfig] = {}
    for i, r in enumerate(spec.receivers):
        key = f"alerts.receivers[{i}]"
        if r.name in receivers:
            raise ConfigError(f"{where}: {key}.name: receiver {r.name!r} is defined twice")
        receivers[r.name] = _receiver(r, key, where, environ)
    if spec.route.receiver is None:
        raise ConfigError(f"{where}: alerts.route.receiver: the root route needs a default receiver")
    try:
        check_url_template(spec.generator_url)
    except ValueError as exc:
        raise ConfigError(f"{where}: alerts.{exc}") from None
    root_opts = RouteOpts(receiver=spec.route.receiver)
    route = _route(spec.route, root_opts, "alerts.route", "{}", where, set(receivers), root=True)
    route.routes.append(_findings_route(spec.findings_receiver or route.opts.receiver, where, set(receivers)))
    return AlertsConfig(
        receivers=receivers,
        route=route,
        external_url=spec.external_url,
        generator_url=spec.generator_url,
        labels=dict(spec.labels),
        inhibit_rules=tuple(
            _inhibit(r, f"alerts.inhibit_rules[{i}]", where) for i, r in enumerate(spec.inhibit_rules)
        ),
        storm_inhibits=frozenset(_kinds(spec.storm_inhibits, where, "alerts.storm_inhibits")),
        silences=tuple(
            parse_silences([msgspec.to_builtins(s) for s in spec.silences], where, "alerts.silences")
        ),
        silences_file=Path(spec.silences_file) if spec.silences_file else None,
        give_up_log=Path(spec.give_up_log) if spec.give_up_log else None,
        give_up_topic=spec.give_up_topic,
        replay_clock=spec.replay_clock,
    )


def _kinds(kinds: list[str], where: str, key: str) -> list[str]:
    """Incident kinds as written: one this build does not declare is kept (a newer release's
    detectors may emit it), unless it is a near miss of one it does, which is a typo that would
    silently turn the rule off."""
    from fabricwatch.detectors.registry import REGISTRY

    known = sorted(REGISTRY.kinds())
    for kind in kinds:
        near = difflib.get_close_matches(kind, known, n=1, cutoff=0.75)
        if kind not in known and near:
            raise ConfigError(f"{where}: {key}: unknown kind {kind!r} (did you mean `{near[0]}`?)")
    return kinds


def parse_duration(value: Duration, key: str = "duration") -> float:
    """Seconds from a number or a Go/Prometheus duration such as ``500ms``, ``30s``, ``1h30m``."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < 0:
            raise ValueError(f"{key}: {value} is negative")
        return float(value)
    text = str(value).strip()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"{key}: {value!r} is not a duration (e.g. 500ms, 30s, 5m, 4h, 1h30m)")
    return sum(float(n) * _UNITS[u] for n, u in parts)


def _receiver(r: ReceiverSpec, key: str, where: str, environ: dict[str, str]) -> ReceiverConfig:
    url = _secret_source(r.url, r.url_env, r.url_file, f"{key}.url", where, environ)
    if url is None:
        raise ConfigError(f"{where}: {key}: give one of url, url_env or url_file")
    parts = urlsplit(url.reveal())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        # Said at start, not 30 s later at the first delivery; the URL itself may be a secret.
        raise ConfigError(f"{where}: {key}.url: must be an http:// or https:// URL with a host")
    secret = _secret_source(None, r.secret_env, r.secret_file, f"{key}.secret", where, environ)
    if r.ca_file and not Path(r.ca_file).is_file():
        raise ConfigError(f"{where}: {key}.ca_file: {r.ca_file} is not a file")
    if r.concurrency < 1 or r.queue_size < 1 or r.max_attempts < 0 or r.max_alerts < 0:
        raise ConfigError(f"{where}: {key}: concurrency and queue_size must be >= 1, max_* >= 0")
    try:
        seconds = {
            name: parse_duration(getattr(r, name), f"{key}.{name}")
            for name in ("timeout", "connect_timeout", "backoff_initial", "backoff_max", "give_up_after")
        }
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return ReceiverConfig(
        name=r.name,
        url=url,
        format=r.format,
        secret=secret,
        verify=r.ca_file or r.verify_tls,
        max_attempts=r.max_attempts,
        concurrency=r.concurrency,
        queue_size=r.queue_size,
        send_resolved=r.send_resolved,
        max_alerts=r.max_alerts,
        **seconds,
    )


def _secret_source(
    inline: str | None, env: str | None, path: str | None, key: str, where: str, environ: dict[str, str]
) -> Secret | None:
    given = [x for x in (inline, env, path) if x]
    if len(given) > 1:
        raise ConfigError(f"{where}: {key}: give only one of the inline value, *_env and *_file")
    if env:
        if not environ.get(env):
            raise ConfigError(f"{where}: {key}_env: environment variable {env} is not set")
        return Secret(environ[env])
    if path:
        try:
            return Secret(Path(path).read_text(encoding="utf-8").strip())
        except OSError as exc:
            raise ConfigError(f"{where}: {key}_file: cannot read {path}: {exc.strerror}") from None
    return Secret(inline) if inline else None


def _route(
    spec: RouteSpec,
    parent: RouteOpts,
    key: str,
    parent_key: str,
    where: str,
    receivers: set[str],
    root: bool = False,
) -> Route:
    if root and spec.matchers:
        raise ConfigError(
            f"{where}: {key}.matchers: the root route matches every alert; put matchers on routes"
        )
    receiver = spec.receiver or parent.receiver
    if receiver not in receivers:
        raise ConfigError(f"{where}: {key}.receiver: no receiver named {receiver!r}")
    try:
        opts = RouteOpts(
            receiver=receiver,
            group_by=tuple(spec.group_by) if spec.group_by is not None else parent.group_by,
            group_wait=_timer(spec.group_wait, parent.group_wait, f"{key}.group_wait"),
            group_interval=_timer(spec.group_interval, parent.group_interval, f"{key}.group_interval"),
            repeat_interval=_timer(spec.repeat_interval, parent.repeat_interval, f"{key}.repeat_interval"),
        )
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if opts.group_interval <= 0 or opts.repeat_interval <= 0:
        raise ConfigError(f"{where}: {key}: group_interval and repeat_interval must be positive")
    matchers = parse_matchers(spec.matchers, f"{key}.matchers", where)
    own_key = parent_key if root else child_key(parent_key, matchers)
    children = [
        _route(child, opts, f"{key}.routes[{i}]", own_key, where, receivers)
        for i, child in enumerate(spec.routes)
    ]
    return Route(opts, matchers, spec.continue_, children, own_key)


FINDINGS = RouteOpts(
    receiver="",
    group_by=("alertname", "class"),
    group_wait=300.0,
    group_interval=3600.0,
    repeat_interval=86400.0,
)
"""How findings that no route of the config takes are sent: an hourly digest per kind, said again
daily while open, not a page per finding."""


def _findings_route(receiver: str, where: str, receivers: set[str]) -> Route:
    """The root's last child: findings (``class="finding"``: a link running hot, a queue that
    bursts) that none of the config's own routes took go to ``findings_receiver`` (by default the
    root's receiver) as a digest, apart from incident pages."""
    if receiver not in receivers:
        raise ConfigError(f"{where}: alerts.findings_receiver: no receiver named {receiver!r}")
    matchers = parse_matchers(['class="finding"'], "findings", where)
    return Route(replace(FINDINGS, receiver=receiver), matchers, key=child_key("{}", matchers))


def _timer(value: Duration | None, inherited: float, key: str) -> float:
    return inherited if value is None else parse_duration(value, key)


def _inhibit(spec: InhibitSpec, key: str, where: str) -> InhibitRule:
    source = parse_matchers(spec.source_matchers, f"{key}.source_matchers", where)
    target = parse_matchers(spec.target_matchers, f"{key}.target_matchers", where)
    if not source or not target:
        raise ConfigError(f"{where}: {key}: source_matchers and target_matchers must not be empty")
    return InhibitRule(source, target, tuple(spec.equal))
