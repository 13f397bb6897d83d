"""`fabricwatch grafana push` against a fake Grafana (a real HTTP server on 127.0.0.1 that records
requests): objects are created once and left alone on a second push, annotations are never posted
twice, refused credentials fail clearly without printing the secret, and transient failures are
retried with backoff before a clear failure."""

from __future__ import annotations

import time

import pytest
from helpers.fake_grafana import FakeGrafana

from fabricwatch.cli.main import main
from fabricwatch.dashboards.grafana import (
    DATASOURCE_UID,
    PLUGIN_TYPE,
    GrafanaAuthError,
    GrafanaClient,
    GrafanaError,
    dashboard_names,
    load_dashboards,
    parse_clickhouse_url,
    resolve_auth,
)
from fabricwatch.schemas.messages import Anomaly, RootCause, encode

TARGET = parse_clickhouse_url("clickhouse://grafana@ch.example:9000/fabricwatch")


@pytest.fixture
def grafana():
    fake = FakeGrafana()
    yield fake
    fake.close()


def client(fake: FakeGrafana, **kw) -> GrafanaClient:
    return GrafanaClient(fake.url, token=kw.pop("token", fake.token), backoff_s=0.01, **kw)


def anomaly(
    status: str = "firing", ts_s: float = 10.0, fp: str = "abc123", end_s: float | None = None
) -> Anomaly:
    return Anomaly(
        fingerprint=fp,
        kind="pfc_storm",
        severity="critical",
        status=status,
        start_ns=int(5e9) + 1_700_000_000 * 10**9,
        ts_ns=int(ts_s * 1e9) + 1_700_000_000 * 10**9,
        end_ns=None if end_s is None else int(end_s * 1e9) + 1_700_000_000 * 10**9,
        root=RootCause(device="h002/mlx5_0", port="1", priority=3),
        summary="PFC storm rooted at h002/mlx5_0:1 prio 3",
        hint="check the NIC",
        jobs=["llm-a"],
        collectives=["AllReduce comm 0x1"],
    )


def test_clickhouse_url_forms():
    assert TARGET.host == "ch.example" and TARGET.port == 9000 and TARGET.protocol == "native"
    assert TARGET.username == "grafana" and TARGET.database == "fabricwatch" and not TARGET.secure
    https = parse_clickhouse_url("https://ch:8443")
    assert (https.protocol, https.secure, https.port, https.username) == ("http", True, 8443, "default")
    assert parse_clickhouse_url("clickhouses://ch").port == 9440
    with pytest.raises(ValueError, match="expected clickhouse://"):
        parse_clickhouse_url("ch.example:9000")


def test_first_push_creates_everything_and_second_push_writes_nothing(grafana):
    c = client(grafana)
    first = c.push(TARGET)
    names = dashboard_names()
    assert first.count("created") == 2 + len(names) and first.count("updated") == 0
    assert grafana.folders["fabricwatch"]["title"] == "fabricwatch"
    ds = grafana.datasources[DATASOURCE_UID]
    assert ds["type"] == PLUGIN_TYPE and ds["jsonData"]["host"] == "ch.example"
    assert ds["jsonData"]["protocol"] == "native" and ds["jsonData"]["defaultDatabase"] == "fabricwatch"
    assert {d["meta"]["folderUid"] for d in grafana.dashboards.values()} == {"fabricwatch"}
    assert len(grafana.dashboards) == len(names)
    for dash in grafana.dashboards.values():
        assert dash["dashboard"]["version"] == 1
    posted = [r for r in grafana.requests if r.path == "/api/dashboards/db"]
    assert all(r.body["overwrite"] is True and r.body["dashboard"]["id"] is None for r in posted)
    assert all(r.headers["Authorization"] == f"Bearer {grafana.token}" for r in grafana.requests)

    before = len(grafana.requests)
    second = client(grafana).push(TARGET)
    assert second.count("unchanged") == len(second.actions)
    assert [r.method for r in grafana.requests[before:]] == ["GET"] * len(second.actions)
    assert all(d["dashboard"]["version"] == 1 for d in grafana.dashboards.values())


def test_changed_objects_are_updated_in_place(grafana):
    client(grafana).push(TARGET)
    uid = load_dashboards()[0]["uid"]
    grafana.dashboards[uid]["dashboard"]["title"] = "edited by hand"
    grafana.folders["fabricwatch"]["title"] = "renamed"
    moved = parse_clickhouse_url("clickhouse://grafana@ch2.example:9000/fabricwatch")
    result = client(grafana).push(moved)
    assert result.count("updated") == 3
    assert grafana.datasources[DATASOURCE_UID]["jsonData"]["host"] == "ch2.example"
    assert grafana.dashboards[uid]["dashboard"]["title"] != "edited by hand"
    assert grafana.dashboards[uid]["dashboard"]["version"] == 2
    assert grafana.folders["fabricwatch"]["title"] == "fabricwatch"
    assert len(grafana.datasources) == 1


def test_password_is_sent_once_and_never_logged(grafana):
    secret = parse_clickhouse_url("clickhouse://grafana@ch.example/fabricwatch", password="s3cret-pw")
    logged: list[str] = []
    client(grafana, log=logged.append).push(secret)
    assert grafana.datasources[DATASOURCE_UID]["_secure"] == {"password": "s3cret-pw"}
    before = len(grafana.requests)
    assert client(grafana, log=logged.append).push(secret).count("unchanged") == 2 + len(dashboard_names())
    assert all(r.method == "GET" for r in grafana.requests[before:])
    assert "s3cret-pw" not in "\n".join(logged) and "s3cret-pw" not in repr(secret)


def test_datasource_refs_point_at_the_chosen_uid(grafana):
    client(grafana).push(TARGET, datasource_uid="ch-prod")
    for dash in grafana.dashboards.values():
        refs = list(_datasource_refs(dash["dashboard"]))
        assert refs and {r["uid"] for r in refs} == {"ch-prod"}


def _datasource_refs(node):
    if isinstance(node, dict):
        if node.get("type") == PLUGIN_TYPE:
            yield node
        for v in node.values():
            yield from _datasource_refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _datasource_refs(v)


def test_anomalies_become_one_annotation_each_updated_not_duplicated(grafana):
    c = client(grafana)
    c.push(TARGET, [anomaly("firing", 10), anomaly("updated", 12)], annotate_dashboard="fw-overview")
    assert len(grafana.annotations) == 1
    (ann,) = grafana.annotations.values()
    assert ann["time"] == 1_700_000_005_000 and ann["timeEnd"] == 1_700_000_012_000
    assert {"fabricwatch", "kind:pfc_storm", "severity:critical", "fp:abc123"} <= set(ann["tags"])
    assert ann["dashboardUID"] == "fw-overview" and "llm-a" in ann["text"] and "check the NIC" in ann["text"]

    before = len(grafana.requests)
    again = c.push(TARGET, [anomaly("firing", 10), anomaly("updated", 12)], annotate_dashboard="fw-overview")
    assert again.count("unchanged") == len(again.actions)
    assert all(r.method == "GET" for r in grafana.requests[before:])

    c.push(TARGET, [anomaly("resolved", 20, end_s=18)])
    assert len(grafana.annotations) == 1
    (ann,) = grafana.annotations.values()
    assert ann["timeEnd"] == 1_700_000_018_000 and "status:resolved" in ann["tags"]
    assert [r.method for r in grafana.requests if r.path.startswith("/api/annotations/")] == ["PATCH"]


def test_duplicate_annotations_from_elsewhere_are_folded_into_one(grafana):
    c = client(grafana)
    c.upsert_annotation(anomaly())
    (only,) = grafana.annotations.values()
    grafana.annotations[999] = {**only, "id": 999}
    assert c.upsert_annotation(anomaly()) == "updated"
    assert list(grafana.annotations) == [only["id"]]


def test_refused_token_names_the_url_and_hides_the_token(grafana):
    bad = "glsa_WRONG_token_value_1234"
    with pytest.raises(GrafanaAuthError) as err:
        client(grafana, token=bad).push(TARGET)
    text = str(err.value)
    assert grafana.url in text and "refused the service-account token" in text and "401" in text
    assert bad not in text and bad not in repr(client(grafana, token=bad))
    assert len(grafana.requests) == 1, "a refused credential is not retried"


def test_basic_auth(grafana):
    grafana.basic = ("admin", "pw")
    c = GrafanaClient(grafana.url, basic_auth=("admin", "pw"))
    assert c.ensure_folder() == "created"
    with pytest.raises(GrafanaAuthError, match="refused the user and password"):
        GrafanaClient(grafana.url, basic_auth=("admin", "nope")).ensure_folder()


def test_credentials_in_the_url_are_used_and_never_shown(grafana):
    grafana.basic = ("admin", "pw")
    host = grafana.url.removeprefix("http://")
    assert GrafanaClient(f"http://admin:pw@{host}").ensure_folder() == "created"
    with pytest.raises(GrafanaAuthError) as err:
        GrafanaClient(f"http://admin:s3cret@{host}/").ensure_folder()
    assert "s3cret" not in str(err.value) and f"http://{host}/api/folders" in str(err.value)


def test_transient_failures_are_retried_with_backoff(grafana):
    grafana.failures = ["503", "reset", "502"]
    logged: list[str] = []
    started = time.perf_counter()
    assert client(grafana, log=logged.append).ensure_folder() == "created"
    waited = time.perf_counter() - started
    assert [r.path for r in grafana.requests[:4]] == ["/api/folders/fabricwatch"] * 4
    assert len([m for m in logged if m.startswith("retrying")]) == 3
    assert "HTTP 503" in logged[0] and "ConnectionError" in logged[1]
    assert waited >= 0.01 + 0.02 + 0.04, "backoff doubles"


def test_persistent_failure_gives_up_with_a_clear_error(grafana):
    grafana.failures = ["500"] * 10
    with pytest.raises(
        GrafanaError, match=r"GET http://127\.0\.0\.1:\d+/api/folders/fabricwatch: gave up after 3"
    ):
        client(grafana, retries=3).ensure_folder()
    assert len(grafana.requests) == 3


def test_unreachable_grafana_fails_clearly():
    with pytest.raises(GrafanaError, match=r"gave up after 2 attempts.*ConnectionError"):
        GrafanaClient("http://127.0.0.1:9", token="t", retries=2, backoff_s=0.01).ensure_folder()


def test_lost_annotation_answer_is_not_posted_twice(grafana):
    grafana.failures = ["ok", "lost"]  # the lookup answers; the POST is stored but its answer is lost
    assert client(grafana).upsert_annotation(anomaly()) == "unchanged"
    assert [r.method for r in grafana.requests] == ["GET", "POST", "GET"]
    assert len(grafana.annotations) == 1


def test_auth_sources(tmp_path):
    f = tmp_path / "token"
    f.write_text("  tok-from-file\n")
    assert resolve_auth(f, None, {}) == ("tok-from-file", None)
    assert resolve_auth(None, None, {"FABRICWATCH_GRAFANA_TOKEN": "tok-env"}) == ("tok-env", None)
    assert resolve_auth(None, "admin", {"FABRICWATCH_GRAFANA_PASSWORD": "pw"}) == (None, ("admin", "pw"))
    with pytest.raises(ValueError, match="no Grafana credentials"):
        resolve_auth(None, None, {})


def test_cli_push_twice_and_refused_token(grafana, tmp_path, capsys, monkeypatch):
    token = tmp_path / "token"
    token.write_text(grafana.token)
    events = tmp_path / "anomalies.jsonl"
    score = '{"type": "score", "false_alerts": 0, "kinds": {}}'  # the last line of replay --json on labels
    events.write_text(
        encode(anomaly()).decode() + "\n" + encode(anomaly("resolved", 20, end_s=18)).decode() + "\n" + score
    )
    argv = ["grafana", "push", "--url", grafana.url, "--token-file", str(token)]
    argv += ["--clickhouse-url", "clickhouse://ch.example/fabricwatch", "--anomalies", str(events)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "created" in out and "annotation fp:abc123" in out
    assert main(argv) == 0
    assert "unchanged" in capsys.readouterr().out
    assert len(grafana.annotations) == 1 and len(grafana.datasources) == 1

    token.write_text("glsa_not_this_one")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        "refused the service-account token" in err and grafana.url in err and "glsa_not_this_one" not in err
    )

    monkeypatch.setenv("FABRICWATCH_GRAFANA_TOKEN", grafana.token)
    assert main(argv[:4] + argv[6:]) == 0


def test_plain_http_to_another_host_is_refused_without_insecure(capsys):
    """A token and the ClickHouse password must not cross the network in clear text by default."""
    argv = [
        "grafana",
        "push",
        "--url",
        "http://grafana.example:3000",
        "--clickhouse-url",
        "clickhouse://ch/db",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("fabricwatch grafana: http://grafana.example: plain http to another host")
    assert "--insecure" in err
    for url in (
        "http://localhost:3000",
        "http://127.0.0.1:3000",
        "http://[::1]:3000",
        "https://grafana.example",
    ):
        GrafanaClient(url, token="t")  # loopback and https are fine
    GrafanaClient("http://grafana.example:3000", token="t", insecure=True)
