"""Push fabricwatch's Grafana objects (folder, ClickHouse datasource, dashboards) and its anomalies
(as annotations) through Grafana's HTTP API.

Every push is idempotent, so it can run from cron or CI after each deploy: objects have fixed uids,
each is read first and written only when it differs (a second push writes nothing and adds no
dashboard version), and an anomaly's annotation is found again by its ``fp:<fingerprint>`` tag and
updated in place, never posted twice. Transient failures (5xx, 429, connection reset, timeout) are
retried with exponential backoff; a refused credential fails at once with a message that names the
URL but never the secret.
"""

from __future__ import annotations

import ipaddress
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

import requests

from fabricwatch.schemas.messages import Anomaly, DecodeError, decode

PLUGIN_TYPE = "grafana-clickhouse-datasource"
DATASOURCE_UID = "fabricwatch-clickhouse"
DATASOURCE_NAME = "fabricwatch ClickHouse"
FOLDER_UID = "fabricwatch"
FOLDER_TITLE = "fabricwatch"
ANNOTATION_TAG = "fabricwatch"
_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
_T = TypeVar("_T")


class GrafanaError(RuntimeError):
    """Grafana could not be reached or refused a request; the text says which URL and why."""


class GrafanaAuthError(GrafanaError):
    """Grafana refused the credentials (401) or their permissions (403): retrying cannot help."""


class _Transient(Exception):
    """One attempt failed in a way a later attempt may not (5xx, 429, reset, timeout)."""


@dataclass(frozen=True)
class ClickHouseTarget:
    """Where Grafana's ClickHouse plugin connects: the server as Grafana (not this host) sees it."""

    host: str
    port: int
    protocol: str = "native"
    secure: bool = False
    username: str = "default"
    database: str = "fabricwatch"
    password: str = field(default="", repr=False)


def parse_clickhouse_url(url: str, password: str = "") -> ClickHouseTarget:
    """``clickhouse://user@host:9000/db`` (native protocol; ``clickhouses://`` or ``?secure=true``
    for TLS) or ``http(s)://user@host:8123/db`` (HTTP protocol). Default ports follow the plugin's."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in {"clickhouse", "clickhouses", "tcp", "http", "https"} or not parts.hostname:
        raise ValueError(
            f"--clickhouse-url {url!r}: expected clickhouse://[user@]host[:port][/database] or "
            "http(s)://[user@]host[:port][/database]"
        )
    query = parse_qs(parts.query)
    secure = scheme in {"clickhouses", "https"} or query.get("secure", ["false"])[0].lower() in {"1", "true"}
    protocol = "http" if scheme in {"http", "https"} else "native"
    default_port = {
        ("native", False): 9000,
        ("native", True): 9440,
        ("http", False): 8123,
        ("http", True): 8443,
    }
    return ClickHouseTarget(
        host=parts.hostname,
        port=parts.port or default_port[protocol, secure],
        protocol=protocol,
        secure=secure,
        username=parts.username or "default",
        database=parts.path.strip("/") or "fabricwatch",
        password=password or parts.password or "",
    )


def datasource_model(
    target: ClickHouseTarget, uid: str = DATASOURCE_UID, name: str = DATASOURCE_NAME
) -> dict:
    """The datasource as POST /api/datasources takes it (plugin v4 ``jsonData`` keys)."""
    model: dict[str, Any] = {
        "uid": uid,
        "name": name,
        "type": PLUGIN_TYPE,
        "access": "proxy",
        "jsonData": {
            "host": target.host,
            "port": target.port,
            "protocol": target.protocol,
            "secure": target.secure,
            "username": target.username,
            "defaultDatabase": target.database,
        },
    }
    if target.password:
        model["secureJsonData"] = {"password": target.password}
    return model


def dashboard_names() -> list[str]:
    """The shipped dashboards (package data, so an installed fabricwatch finds them)."""
    folder = resources.files("fabricwatch.dashboards").joinpath("grafana", "dashboards")
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".json"))


def load_dashboards(datasource_uid: str = DATASOURCE_UID) -> list[dict]:
    """The shipped dashboards with every ClickHouse datasource reference pointed at ``datasource_uid``."""
    folder = resources.files("fabricwatch.dashboards").joinpath("grafana", "dashboards")
    return [
        _bind_datasource(json.loads(folder.joinpath(name).read_text()), datasource_uid)
        for name in dashboard_names()
    ]


def _bind_datasource(node: Any, uid: str) -> Any:
    if isinstance(node, dict):
        if node.get("type") == PLUGIN_TYPE and "uid" in node:
            return {**node, "uid": uid}
        return {k: _bind_datasource(v, uid) for k, v in node.items()}
    if isinstance(node, list):
        return [_bind_datasource(v, uid) for v in node]
    return node


def annotation_model(a: Anomaly, dashboard_uid: str | None = None) -> dict:
    """An anomaly's latest state as an annotation: its span, a readable text, and tags to filter
    and to find it again (``fp:<fingerprint>`` is the identity)."""
    end_ns = a.end_ns if a.end_ns is not None else a.ts_ns
    where = a.root.group or ":".join(x for x in (a.root.device, a.root.port) if x)
    lines = [f"{a.kind} {a.severity} ({a.status}) at {where}", a.summary]
    if a.jobs or a.collectives:
        lines.append(
            "jobs: " + ", ".join(a.jobs) + (" | " + ", ".join(a.collectives) if a.collectives else "")
        )
    if a.hint:
        lines.append("hint: " + a.hint)
    model: dict[str, Any] = {
        "time": a.start_ns // 1_000_000,
        "timeEnd": max(end_ns, a.start_ns) // 1_000_000,
        "tags": [
            ANNOTATION_TAG,
            f"kind:{a.kind}",
            f"severity:{a.severity}",
            f"status:{a.status}",
            f"fp:{a.fingerprint}",
        ],
        "text": "\n".join(lines),
    }
    if dashboard_uid:
        model["dashboardUID"] = dashboard_uid
    return model


def latest_per_incident(anomalies: Iterable[Anomaly]) -> list[Anomaly]:
    """One event per fingerprint (the newest): an annotation shows an incident, not its updates."""
    latest: dict[str, Anomaly] = {}
    for a in anomalies:
        kept = latest.get(a.fingerprint)
        if kept is None or a.ts_ns >= kept.ts_ns:
            latest[a.fingerprint] = a
    return sorted(latest.values(), key=lambda a: a.start_ns)


@dataclass
class PushResult:
    """What a push did, per object: ``created``, ``updated`` or ``unchanged``."""

    actions: list[tuple[str, str]] = field(default_factory=list)

    def add(self, what: str, action: str) -> None:
        self.actions.append((what, action))

    def count(self, action: str) -> int:
        return sum(1 for _, a in self.actions if a == action)


@dataclass
class GrafanaClient:
    """A small Grafana HTTP API client: bearer token (service account) or basic auth, retries with
    exponential backoff on transient failures, and errors that name the URL, never the secret."""

    url: str
    token: str | None = field(default=None, repr=False)
    basic_auth: tuple[str, str] | None = field(default=None, repr=False)
    retries: int = 4
    backoff_s: float = 0.5
    timeout_s: float = 10.0
    log: Callable[[str], None] = lambda _text: None
    insecure: bool = False
    """Allow plain http to a host other than this one (the token and the ClickHouse password would
    cross the network in clear text)."""

    def __post_init__(self) -> None:
        require_secure(self.url, self.insecure)
        parts = urlsplit(self.url.rstrip("/"))
        if parts.username is not None:  # user:password@ in the URL: use it, never show it
            self.basic_auth = self.basic_auth or (unquote(parts.username), unquote(parts.password or ""))
            parts = parts._replace(netloc=parts.hostname + (f":{parts.port}" if parts.port else ""))
        self.url = urlunsplit(parts)
        self.session = requests.Session()
        self.session.headers.update({"Accept": "application/json", "User-Agent": "fabricwatch"})
        if self.token:
            self.session.headers["Authorization"] = f"Bearer {self.token}"
        elif self.basic_auth:
            self.session.auth = self.basic_auth

    # -- transport ---------------------------------------------------------------------------

    def request(
        self, method: str, path: str, *, body: Any = None, params: Any = None, missing_ok: bool = False
    ) -> Any:
        """One API call with retries; the decoded JSON, or None for a 404 when ``missing_ok``."""
        return self._retrying(
            f"{method} {self.url}{path}", lambda: self._send(method, path, body, params, missing_ok)
        )

    def _send(self, method: str, path: str, body: Any, params: Any, missing_ok: bool) -> Any:
        where = f"{method} {self.url}{path}"
        try:
            resp = self.session.request(
                method, self.url + path, json=body, params=params, timeout=self.timeout_s
            )
        except (requests.ConnectionError, requests.Timeout) as exc:
            raise _Transient(f"{type(exc).__name__}: {_short(exc)}") from None
        if resp.status_code in _RETRY_STATUSES:
            raise _Transient(f"HTTP {resp.status_code} {_message(resp)}")
        if resp.status_code == 401:
            raise GrafanaAuthError(
                f"{where}: Grafana refused the {self._credential()} (HTTP 401 {_message(resp)}); "
                "check --token-file or FABRICWATCH_GRAFANA_TOKEN (or --user / FABRICWATCH_GRAFANA_PASSWORD)"
            )
        if resp.status_code == 403:
            raise GrafanaAuthError(
                f"{where}: the credentials are valid but lack permission (HTTP 403 {_message(resp)}); "
                "dashboards and annotations need the Editor role, datasources Admin"
            )
        if resp.status_code == 404 and missing_ok:
            return None
        if resp.status_code >= 400:
            raise GrafanaError(f"{where}: HTTP {resp.status_code} {_message(resp)}")
        if not resp.content:
            return {}
        try:
            return resp.json()
        except ValueError:
            raise GrafanaError(f"{where}: HTTP {resp.status_code} but the body is not JSON") from None

    def _credential(self) -> str:
        if self.token:
            return "service-account token"
        return "user and password" if self.basic_auth else "anonymous request"

    def _retrying(self, what: str, attempt: Callable[[], _T]) -> _T:
        last = ""
        for n in range(self.retries):
            if n:
                delay = self.backoff_s * 2 ** (n - 1)
                self.log(f"retrying {what} in {delay:.1f} s after {last}")
                time.sleep(delay)
            try:
                return attempt()
            except _Transient as exc:
                last = str(exc)
        raise GrafanaError(f"{what}: gave up after {self.retries} attempts; last error: {last}")

    # -- objects -------------------------------------------------------------------------------

    def ensure_folder(self, uid: str = FOLDER_UID, title: str = FOLDER_TITLE) -> str:
        existing = self.request("GET", f"/api/folders/{uid}", missing_ok=True)
        if existing is None:
            self.request("POST", "/api/folders", body={"uid": uid, "title": title})
            return "created"
        if existing.get("title") == title:
            return "unchanged"
        self.request("PUT", f"/api/folders/{uid}", body={"title": title, "overwrite": True})
        return "updated"

    def ensure_datasource(self, model: dict) -> str:
        """Create or update by uid. Grafana never returns secrets, so a password is sent when the
        datasource is created or has none stored; an existing one is kept (change it in Grafana)."""
        uid = model["uid"]
        existing = self.request("GET", f"/api/datasources/uid/{uid}", missing_ok=True)
        if existing is None:
            self.request("POST", "/api/datasources", body=model)
            return "created"
        body = dict(model)
        if existing.get("secureJsonFields", {}).get("password"):
            body.pop("secureJsonData", None)
        if not _datasource_differs(existing, body):
            return "unchanged"
        self.request("PUT", f"/api/datasources/uid/{uid}", body={**body, "id": existing.get("id")})
        return "updated"

    def ensure_dashboard(self, dashboard: dict, folder_uid: str) -> str:
        uid = dashboard["uid"]
        existing = self.request("GET", f"/api/dashboards/uid/{uid}", missing_ok=True)
        if existing is not None:
            same_folder = existing.get("meta", {}).get("folderUid", "") == folder_uid
            stored = existing.get("dashboard", {})
            # only what we send: a Grafana version that adds keys on save must not look like a change
            if same_folder and all(stored.get(k) == v for k, v in _comparable(dashboard).items()):
                return "unchanged"
        self.request(
            "POST",
            "/api/dashboards/db",
            body={
                "dashboard": {**_comparable(dashboard), "id": None},
                "folderUid": folder_uid,
                "overwrite": True,
                "message": "fabricwatch grafana push",
            },
        )
        return "created" if existing is None else "updated"

    def upsert_annotation(self, a: Anomaly, dashboard_uid: str | None = None) -> str:
        """Post the anomaly once; later states of the same incident update that annotation. The
        lookup and the write retry together, so a POST whose answer was lost is found, not repeated."""
        return self._retrying(
            f"annotation fp:{a.fingerprint} at {self.url}",
            lambda: self._upsert_annotation_once(a, dashboard_uid),
        )

    def _upsert_annotation_once(self, a: Anomaly, dashboard_uid: str | None) -> str:
        model = annotation_model(a, dashboard_uid)
        found = self._send(
            "GET",
            "/api/annotations",
            None,
            {"tags": f"fp:{a.fingerprint}", "type": "annotation", "limit": 100},
            False,
        )
        if not found:
            self._send("POST", "/api/annotations", model, None, False)
            return "created"
        keep, *duplicates = sorted(found, key=lambda x: x["id"])
        for dup in duplicates:
            self._send("DELETE", f"/api/annotations/{dup['id']}", None, None, True)
        current = {
            "time": keep.get("time"),
            "timeEnd": keep.get("timeEnd"),
            "tags": sorted(keep.get("tags") or []),
            "text": keep.get("text"),
        }
        wanted = {k: sorted(v) if k == "tags" else v for k, v in model.items() if k != "dashboardUID"}
        if current == wanted and not duplicates:
            return "unchanged"
        patch = {k: v for k, v in model.items() if k != "dashboardUID"}
        self._send("PATCH", f"/api/annotations/{keep['id']}", patch, None, False)
        return "updated"

    def push(
        self,
        target: ClickHouseTarget,
        anomalies: Iterable[Anomaly] = (),
        *,
        datasource_uid: str = DATASOURCE_UID,
        folder_uid: str = FOLDER_UID,
        annotate_dashboard: str | None = None,
    ) -> PushResult:
        """Folder, datasource, every shipped dashboard, then one annotation per incident."""
        result = PushResult()
        result.add(f"folder {folder_uid}", self.ensure_folder(folder_uid))
        result.add(
            f"datasource {datasource_uid}", self.ensure_datasource(datasource_model(target, datasource_uid))
        )
        for dash in load_dashboards(datasource_uid):
            result.add(f"dashboard {dash['uid']}", self.ensure_dashboard(dash, folder_uid))
        for a in latest_per_incident(anomalies):
            result.add(f"annotation fp:{a.fingerprint}", self.upsert_annotation(a, annotate_dashboard))
        for what, action in result.actions:
            self.log(f"{action:9} {what}")
        return result


def resolve_auth(
    token_file: Path | None, user: str | None, env: Mapping[str, str] = os.environ
) -> tuple[str | None, tuple[str, str] | None]:
    """(token, basic auth) from a token file, FABRICWATCH_GRAFANA_TOKEN, or a user whose password is
    in FABRICWATCH_GRAFANA_PASSWORD: secrets come from files or the environment, never from argv."""
    if token_file is not None:
        token = token_file.read_text().strip()
        if not token:
            raise ValueError(f"--token-file {token_file}: the file is empty")
        return token, None
    if user:
        password = env.get("FABRICWATCH_GRAFANA_PASSWORD", "")
        if not password:
            raise ValueError(f"--user {user}: set FABRICWATCH_GRAFANA_PASSWORD to the user's password")
        return None, (user, password)
    token = env.get("FABRICWATCH_GRAFANA_TOKEN", "").strip()
    if not token:
        raise ValueError(
            "no Grafana credentials: give --token-file, set FABRICWATCH_GRAFANA_TOKEN, or use --user"
        )
    return token, None


def read_anomalies(path: Path) -> list[Anomaly]:
    """Anomaly events as ``fabricwatch replay --json`` writes them (one JSON object a line; the
    score line it ends with for a labelled trace is not an event and is passed over)."""
    events = []
    with path.open() as f:
        for n, line in enumerate(f, 1):
            if not line.strip() or _is_score(line):
                continue
            try:
                events.append(decode(line, Anomaly))
            except DecodeError as exc:
                raise ValueError(f"{path}:{n}: not an anomaly event: {exc}") from None
    return events


def _is_score(line: str) -> bool:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        return False
    return isinstance(obj, dict) and obj.get("type") == "score"


def _comparable(dashboard: dict) -> dict:
    """A dashboard without the fields Grafana assigns (id, version), for comparison and upload."""
    return {k: v for k, v in dashboard.items() if k not in {"id", "version"}}


def _datasource_differs(existing: dict, wanted: dict) -> bool:
    if wanted.get("secureJsonData"):
        return True
    for key in ("name", "type", "access"):
        if existing.get(key) != wanted.get(key):
            return True
    have = existing.get("jsonData") or {}
    return any(have.get(k) != v for k, v in wanted["jsonData"].items())


def _message(resp: requests.Response) -> str:
    """Grafana's own error message, short; bodies never contain the request's credentials."""
    try:
        body = resp.json()
    except ValueError:
        return resp.reason or ""
    return str(body.get("message", "")) if isinstance(body, dict) else ""


def _short(exc: Exception) -> str:
    text = str(exc)
    return text if len(text) <= 200 else text[:200] + "..."


def require_secure(url: str, insecure: bool = False) -> None:
    """ValueError for plain http to a host other than this one, unless ``insecure``: the token and
    the datasource's ClickHouse password would cross the network in clear text."""
    parts = urlsplit(url)
    if parts.scheme == "http" and not insecure and not _is_loopback(parts.hostname or ""):
        raise ValueError(
            f"http://{parts.hostname}: plain http to another host would send the Grafana token and "
            "the ClickHouse password in clear text; use https, or --insecure to accept that"
        )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
