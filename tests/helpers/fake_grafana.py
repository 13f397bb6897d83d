"""A fake Grafana: a real HTTP server on 127.0.0.1 that keeps folders, datasources, dashboards and
annotations in memory, answers like Grafana's HTTP API does, records every request, and can be told
to fail (5xx, connection reset) so clients' retries are tested over real sockets.

No Grafana server can be installed here; this fake is the one stand-in the tests use.
"""

from __future__ import annotations

import base64
import json
import socket
import struct
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class FakeGrafana:
    token: str = "glsa_fake_service_account_token"
    basic: tuple[str, str] | None = None
    requests: list[Recorded] = field(default_factory=list)
    folders: dict[str, dict] = field(default_factory=dict)
    datasources: dict[str, dict] = field(default_factory=dict)
    dashboards: dict[str, dict] = field(default_factory=dict)
    annotations: dict[int, dict] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    """Scripted outcomes taken one per request, in order: ``"ok"``, an HTTP status (``"503"``), ``"reset"``
    (connection reset before handling) or ``"lost"`` (handled, then reset: the answer is lost)."""

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._next_id = 1
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake._handle(self)

            do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def writes(self) -> list[Recorded]:
        return [r for r in self.requests if r.method != "GET"]

    # -- request handling ---------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        with self._lock:
            self.requests.append(
                Recorded(h.command, parts.path, parse_qs(parts.query), dict(h.headers), body)
            )
            failure = self.failures.pop(0) if self.failures else None
        if failure == "reset":
            return self._reset(h)
        if failure not in (None, "ok", "lost"):
            return self._reply(h, int(failure), {"message": "fake failure"})
        if not self._authorised(h.headers.get("Authorization", "")):
            return self._reply(h, 401, {"message": "invalid API key"})
        with self._lock:
            status, payload = self._route(h.command, parts.path, parse_qs(parts.query), body)
        if failure == "lost":
            return self._reset(h)
        self._reply(h, status, payload)

    @staticmethod
    def _reset(h: BaseHTTPRequestHandler) -> None:
        """SO_LINGER 0 makes close() send a TCP RST: the client sees "connection reset by peer"."""
        h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        h.connection.close()
        h.close_connection = True

    def _authorised(self, header: str) -> bool:
        if header == f"Bearer {self.token}":
            return True
        if self.basic is not None and header.startswith("Basic "):
            return base64.b64decode(header[6:]).decode() == f"{self.basic[0]}:{self.basic[1]}"
        return False

    @staticmethod
    def _reply(h: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _route(self, method: str, path: str, query: dict, body: Any) -> tuple[int, Any]:
        seg = path.strip("/").split("/")
        if seg[:2] == ["api", "folders"]:
            return self._folders(method, seg[2:], body)
        if seg[:2] == ["api", "datasources"]:
            return self._datasources(method, seg[2:], body)
        if seg[:2] == ["api", "dashboards"]:
            return self._dashboards(method, seg[2:], body)
        if seg[:2] == ["api", "annotations"]:
            return self._annotations(method, seg[2:], query, body)
        return 404, {"message": "not found"}

    def _folders(self, method: str, rest: list[str], body: Any) -> tuple[int, Any]:
        if method == "GET" and rest:
            f = self.folders.get(rest[0])
            return (200, f) if f else (404, {"message": "folder not found"})
        if method == "POST" and not rest:
            if body["uid"] in self.folders:
                return 409, {"message": "a folder with the same uid already exists"}
            self.folders[body["uid"]] = {
                "id": self._id(),
                "uid": body["uid"],
                "title": body["title"],
                "version": 1,
            }
            return 200, self.folders[body["uid"]]
        if method == "PUT" and rest and rest[0] in self.folders:
            f = self.folders[rest[0]]
            f.update(title=body["title"], version=f["version"] + 1)
            return 200, f
        return 404, {"message": "folder not found"}

    def _datasources(self, method: str, rest: list[str], body: Any) -> tuple[int, Any]:
        if method == "POST" and not rest:
            if body["uid"] in self.datasources or any(
                d["name"] == body["name"] for d in self.datasources.values()
            ):
                return 409, {"message": "data source with the same name already exists"}
            self.datasources[body["uid"]] = self._stored_datasource(body, None)
            return 200, {
                "datasource": self._public(self.datasources[body["uid"]]),
                "message": "Datasource added",
            }
        if rest[:1] == ["uid"] and len(rest) == 2:
            ds = self.datasources.get(rest[1])
            if ds is None:
                return 404, {"message": "Data source not found"}
            if method == "GET":
                return 200, self._public(ds)
            if method == "PUT":
                self.datasources[rest[1]] = self._stored_datasource(body, ds)
                return 200, {
                    "datasource": self._public(self.datasources[rest[1]]),
                    "message": "Datasource updated",
                }
        return 404, {"message": "not found"}

    def _stored_datasource(self, body: dict, old: dict | None) -> dict:
        secure = dict(old["_secure"]) if old else {}
        secure.update(body.get("secureJsonData") or {})
        return {
            "id": old["id"] if old else self._id(),
            "uid": body["uid"],
            "name": body["name"],
            "type": body["type"],
            "access": body.get("access", "proxy"),
            "url": body.get("url", ""),
            "jsonData": body.get("jsonData", {}),
            "version": old["version"] + 1 if old else 1,
            "_secure": secure,
        }

    @staticmethod
    def _public(ds: dict) -> dict:
        """As Grafana answers: secrets are never returned, only which ones are set."""
        out = {k: v for k, v in ds.items() if k != "_secure"}
        out["secureJsonFields"] = {k: True for k in ds["_secure"]}
        return out

    def _dashboards(self, method: str, rest: list[str], body: Any) -> tuple[int, Any]:
        if method == "GET" and rest[:1] == ["uid"] and len(rest) == 2:
            d = self.dashboards.get(rest[1])
            return (200, d) if d else (404, {"message": "Dashboard not found"})
        if method == "POST" and rest == ["db"]:
            dash = dict(body["dashboard"])
            uid = dash.get("uid")
            old = self.dashboards.get(uid)
            if old is not None and not body.get("overwrite"):
                return 412, {
                    "status": "name-exists",
                    "message": "A dashboard with the same uid already exists",
                }
            if body.get("folderUid") and body["folderUid"] not in self.folders:
                return 400, {"message": "folder not found"}
            version = old["dashboard"]["version"] + 1 if old else 1
            # a key the server adds on save: the client must compare only what it sends
            dash.update(id=old["dashboard"]["id"] if old else self._id(), version=version, weekStart="")
            self.dashboards[uid] = {"dashboard": dash, "meta": {"folderUid": body.get("folderUid", "")}}
            return 200, {"id": dash["id"], "uid": uid, "status": "success", "version": version}
        return 404, {"message": "not found"}

    def _annotations(self, method: str, rest: list[str], query: dict, body: Any) -> tuple[int, Any]:
        if method == "GET" and not rest:
            tags = set(query.get("tags", []))
            found = [a for a in self.annotations.values() if tags <= set(a["tags"])]
            return 200, found[: int(query.get("limit", ["100"])[0])]
        if method == "POST" and not rest:
            aid = self._id()
            self.annotations[aid] = {
                "id": aid,
                "time": body["time"],
                "timeEnd": body.get("timeEnd", body["time"]),
                "tags": body.get("tags", []),
                "text": body["text"],
                "dashboardUID": body.get("dashboardUID", ""),
            }
            return 200, {"id": aid, "message": "Annotation added"}
        if rest and int(rest[0]) in self.annotations:
            if method == "PATCH":
                self.annotations[int(rest[0])].update(body)
                return 200, {"message": "Annotation patched"}
            if method == "DELETE":
                del self.annotations[int(rest[0])]
                return 200, {"message": "Annotation deleted"}
        return 404, {"message": "Annotation not found"}
