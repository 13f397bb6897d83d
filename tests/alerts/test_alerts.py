"""The alerting core on an injected clock: grouping and the three timers, routing, silences,
inhibition, the Alertmanager v4 payload, signatures, and the config (errors, hidden secrets)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import msgspec
import pytest
from helpers.paths import DOCS
from hypothesis import given, settings
from hypothesis import strategies as st

from fabricwatch.alerts.alerter import Alerter
from fabricwatch.alerts.config import load_alerts_config, parse_alerts, parse_duration
from fabricwatch.alerts.matchers import parse_matcher
from fabricwatch.alerts.payload import ZERO_TIME, alertmanager_body, encode_body, rfc3339, slack_body
from fabricwatch.alerts.signing import sign, verify
from fabricwatch.alerts.silences import SilenceFile
from fabricwatch.schemas.config import ConfigError
from fabricwatch.schemas.messages import Anomaly, RootCause

DOCS = DOCS / "alerts.md"
T0 = 1_800_000_000.0


def anomaly(fp: str, kind: str = "incast", status: str = "firing", at: float = T0, **kw: object) -> Anomaly:
    root = kw.pop("root", RootCause(f"leaf-{fp}", "Ethernet8", 3))
    fields = {
        "fingerprint": fp,
        "kind": kind,
        "severity": "warning",
        "status": status,
        "start_ns": int(T0 * 1e9),
        "ts_ns": int(at * 1e9),
        "root": root,
        "summary": f"{kind} {fp}",
        "hint": "do something",
        "evidence": {"peak_kb": 900, "fan_in_ports": 7},
        "end_ns": int(at * 1e9) if status == "resolved" else None,
    }
    fields.update(kw)
    return Anomaly(**fields)


RECEIVERS = [
    {"name": "ops", "url": "http://127.0.0.1:9/a"},
    {"name": "pager", "url": "http://127.0.0.1:9/b"},
    {"name": "chat", "url": "http://127.0.0.1:9/c"},
]


def config(route: dict | None = None, **extra: object):
    section = {
        "receivers": [
            {"name": "ops", "url": "http://127.0.0.1:9/a"},
            {"name": "pager", "url": "http://127.0.0.1:9/b"},
        ],
        "route": route
        or {
            "receiver": "ops",
            "group_by": ["alertname"],
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "4h",
        },
    }
    section.update(extra)
    return parse_alerts(section, "test.yaml", environ={})


def fire(alerter: Alerter, a: Anomaly, now: float):
    """What the service does: flush what fell due before ``now``, take the anomaly, flush what is due."""
    before = alerter.advance(now).notifications
    alerter.ingest(a, now)
    return before + alerter.advance(now).notifications


def states(n) -> list[tuple[str, str]]:
    return [(a.fingerprint, "resolved" if a.resolved else "firing") for a in n.alerts]


def test_group_wait_batches_then_group_interval_then_repeat_then_resolved():
    al = Alerter(config())
    assert fire(al, anomaly("a"), T0) == []
    assert fire(al, anomaly("b"), T0 + 10) == []  # same group (alertname), inside group_wait
    [first] = al.advance(T0 + 30).notifications
    assert first.reason == "first notification" and states(first) == [("a", "firing"), ("b", "firing")]
    assert first.group_key == '{}:{alertname="incast"}' and first.group_labels == {"alertname": "incast"}

    assert fire(al, anomaly("c"), T0 + 40) == []  # waits for group_interval, not group_wait
    assert al.advance(T0 + 329).notifications == []
    [second] = al.advance(T0 + 330).notifications
    assert second.reason == "new alerts in group" and [fp for fp, _ in states(second)] == ["a", "b", "c"]

    # nothing new: quiet at every group_interval until repeat_interval has passed
    assert al.advance(T0 + 330 + 4 * 3600 - 1).notifications == []
    [repeat] = al.advance(T0 + 330 + 4 * 3600 + 300).notifications
    assert repeat.reason == "repeat interval elapsed" and repeat.key != second.key  # same body, new key

    at = T0 + 5 * 3600
    fire(al, anomaly("b", status="resolved", at=at), at)
    [resolved] = al.advance(al.next_due()).notifications
    assert resolved.reason == "new resolved alerts" and resolved.status == "firing"
    assert ("b", "resolved") in states(resolved)

    for fp in ("a", "c"):
        fire(al, anomaly(fp, status="resolved", at=at + 400), at + 400)
    [last] = al.advance(al.next_due()).notifications
    assert last.status == "resolved" and last.reason == "all alerts resolved"
    assert states(last) == [("a", "resolved"), ("c", "resolved")]  # b left the group once told
    assert al.group_count == 0


def test_an_alert_that_started_long_ago_skips_group_wait():
    al = Alerter(config())
    old = anomaly("a", start_ns=int((T0 - 3600) * 1e9))
    [n] = fire(al, old, T0)
    assert n.at == T0


def test_fired_and_resolved_within_group_wait_is_never_notified():
    al = Alerter(config())
    fire(al, anomaly("a"), T0)
    fire(al, anomaly("a", status="resolved", at=T0 + 5), T0 + 5)
    assert al.advance(T0 + 3600).notifications == [] and al.group_count == 0


def test_a_label_change_notifies_and_an_annotation_change_does_not():
    al = Alerter(config({"receiver": "ops", "group_wait": 0, "group_interval": "10s"}))
    assert len(fire(al, anomaly("a"), T0)) == 1
    fire(al, anomaly("a", status="updated", summary="new words", at=T0 + 5), T0 + 5)
    assert al.advance(T0 + 10).notifications == []
    fire(al, anomaly("a", status="updated", severity="critical", summary="new words", at=T0 + 15), T0 + 15)
    [n] = al.advance(T0 + 20).notifications
    assert n.alerts[0].labels["severity"] == "critical" and n.alerts[0].annotations["summary"] == "new words"


def test_no_two_notifications_of_a_group_share_an_idempotency_key_even_when_a_state_comes_back():
    route = {"receiver": "ops", "group_wait": 0, "group_interval": "10s", "repeat_interval": "1m"}
    al = Alerter(config(route))
    keys = [n.key for n in fire(al, anomaly("a"), T0)]
    fire(al, anomaly("a", status="updated", severity="critical", at=T0 + 5), T0 + 5)
    keys += [n.key for n in al.advance(T0 + 10).notifications]
    fire(al, anomaly("a", status="updated", at=T0 + 15), T0 + 15)  # back to warning: the first body
    keys += [n.key for n in al.advance(T0 + 20).notifications]
    keys += [n.key for n in al.advance(T0 + 90).notifications]  # and its repeat
    assert len(keys) == 4 and len(set(keys)) == 4


ROUTES = {
    "receiver": "ops",
    "group_by": ["alertname"],
    "group_wait": 0,
    "group_interval": "1m",
    "routes": [
        {"matchers": ['severity="critical"'], "receiver": "pager", "group_by": ["..."], "continue": True},
        {"matchers": ['kind=~"pfc_storm|ecmp_collapse"'], "group_wait": "10s"},
        {"matchers": ['device!~"leaf-.*"'], "receiver": "pager"},
    ],
}


def test_findings_go_apart_from_incident_pages_unless_a_route_takes_them():
    """A link running hot or a queue that bursts is not a fault: where no route of the config takes
    it, it goes to ``findings_receiver`` (by default the root's) as an hourly digest per kind, not
    to the incident pages; a route that names it still takes it."""
    hot = anomaly("h", kind="capacity", finding=True, severity="info", root=RootCause("leaf-h", "Ethernet0"))
    al = Alerter(config(ROUTES, findings_receiver="pager"))
    assert al.ingest(hot, T0) == 1 and al.ingest(anomaly("i"), T0) == 1
    assert {(n.receiver, n.group_key) for n in al.advance(T0).notifications} == {
        ("ops", '{}:{alertname="incast"}')
    }
    (digest,) = al.advance(T0 + 300).notifications  # group_wait 5 min
    assert (
        digest.receiver == "pager"
        and digest.group_key == '{}/{class="finding"}:{alertname="capacity", class="finding"}'
    )
    assert [a.labels["class"] for a in digest.alerts] == ["finding"]
    default = Alerter(config(ROUTES))
    default.ingest(hot, T0)
    assert [n.receiver for n in default.advance(T0 + 300).notifications] == ["ops"]
    named = {**ROUTES, "routes": [{"matchers": ['kind="capacity"'], "receiver": "pager"}, *ROUTES["routes"]]}
    taken = Alerter(config(named))
    taken.ingest(hot, T0)
    assert [(n.receiver, n.group_key) for n in taken.advance(T0).notifications] == [
        ("pager", '{}/{kind="capacity"}:{alertname="capacity"}')
    ]
    with pytest.raises(ConfigError, match=r"alerts\.findings_receiver: no receiver named 'nobody'"):
        config(ROUTES, findings_receiver="nobody")


def test_routes_match_first_child_unless_continue_and_fall_back_to_the_parent():
    al = Alerter(config(ROUTES))
    storm = anomaly("s", kind="pfc_storm", severity="critical")
    incast = anomaly("i")
    nic = anomaly("n", root=RootCause("h003/mlx5_0", "1"))
    assert al.ingest(storm, T0) == 2  # pager (continue) and the pfc_storm|ecmp route
    assert al.ingest(incast, T0) == 1
    assert al.ingest(nic, T0) == 1
    out = al.advance(T0).notifications
    got = {(n.receiver, n.group_key) for n in out}
    storm_labels = (
        'alertname="pfc_storm", class="incident", device="leaf-s", kind="pfc_storm", port="Ethernet8", '
        'priority="3", severity="critical"'
    )
    assert ("pager", '{}/{severity="critical"}:{' + storm_labels + "}") in got
    assert ("ops", '{}:{alertname="incast"}') in got
    assert ("pager", '{}/{device!~"leaf-.*"}:{alertname="incast"}') in got
    assert not any(
        n.group_key.startswith('{}/{kind=~"pfc_storm|ecmp_collapse"}') for n in out
    )  # group_wait 10s
    [late] = al.advance(T0 + 10).notifications
    assert (
        late.receiver == "ops"
        and late.group_key == '{}/{kind=~"pfc_storm|ecmp_collapse"}:{alertname="pfc_storm"}'
    )


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        ('device="leaf-1"', {"device": "leaf-1"}, True),
        ('device!="leaf-1"', {"device": "leaf-1"}, False),
        ('kind=~"incast|outlier"', {"kind": "outlier"}, True),
        ('kind=~"incast"', {"kind": "incast_x"}, False),  # anchored, as in Alertmanager
        ('kind!~"pfc.*"', {"kind": "incast"}, True),
        ('port=""', {}, True),  # a missing label is the empty string
        ("job = llm-a", {"job": "llm-a"}, True),
    ],
)
def test_matchers(text, labels, expected):
    assert parse_matcher(text).matches(labels) is expected


def test_silences_mute_until_they_expire_and_the_alert_then_notifies():
    silences = [
        {"matchers": ['device=~"leaf-a|leaf-b"', 'severity!="critical"'], "ends_at": T0 + 100},
    ]
    al = Alerter(
        config(
            {"receiver": "ops", "group_by": ["..."], "group_wait": 0, "group_interval": "30s"},
            silences=silences,
        )
    )
    assert fire(al, anomaly("a"), T0) == []
    assert [states(n) for n in fire(al, anomaly("c"), T0)] == [[("c", "firing")]]
    assert al.advance(T0 + 90).notifications == []
    [n] = al.advance(T0 + 120).notifications  # first flush after the silence ended
    assert states(n) == [("a", "firing")]


def test_silence_file_is_reread_when_it_changes(tmp_path):
    path = tmp_path / "silences.yaml"
    source = SilenceFile(path)
    assert source.current() == []
    path.write_text(f"silences:\n  - matchers: ['device=\"leaf-a\"']\n    ends_at: {T0 + 60}\n")
    [s] = source.current()
    assert s.mutes({"device": "leaf-a"}, T0) and not s.mutes({"device": "leaf-a"}, T0 + 60)
    path.write_text("- matchers: ['kind=\"incast\"']\n  ends_at: 2100-01-01T00:00:00Z\n")
    import os

    os.utime(path, ns=(1, 1))
    assert source.current()[0].matchers[0].value == "incast"


def test_a_pfc_storm_mutes_incasts_and_outliers_on_the_devices_it_paused():
    al = Alerter(config({"receiver": "ops", "group_by": ["..."], "group_wait": 0, "group_interval": "10s"}))
    storm = anomaly(
        "s", kind="pfc_storm", root=RootCause("h003/mlx5_0", "1", 3), devices=["leaf-x", "spine-1"]
    )
    assert len(fire(al, storm, T0)) == 1
    assert fire(al, anomaly("x", root=RootCause("leaf-x", "Ethernet4", 3)), T0 + 1) == []
    assert fire(al, anomaly("o", kind="outlier", root=RootCause("spine-1", "Ethernet0")), T0 + 1) == []
    assert len(fire(al, anomaly("y", root=RootCause("leaf-y", "Ethernet4", 3)), T0 + 1)) == 1  # not paused
    assert al.advance(T0 + 11).notifications == []
    fire(al, anomaly("s", kind="pfc_storm", status="resolved", at=T0 + 20), T0 + 20)
    out = al.advance(T0 + 31).notifications
    assert sorted(state for n in out for state in states(n)) == [
        ("o", "firing"),
        ("s", "resolved"),
        ("x", "firing"),
    ]


def test_an_incident_caused_by_another_is_muted_while_its_cause_fires_and_carries_the_link():
    """Drops at a dead link's port page as the dead link, once; left alone after it ends."""
    al = Alerter(config({"receiver": "ops", "group_by": ["..."], "group_wait": 0, "group_interval": "10s"}))
    down = anomaly("d", kind="link_down", severity="critical", root=RootCause("leaf-d", "Ethernet4"))
    assert len(fire(al, down, T0)) == 1
    loss = anomaly("l", kind="packet_loss", root=RootCause("leaf-d", "Ethernet4"), caused_by="d")
    assert fire(al, loss, T0 + 1) == []
    unlinked = anomaly("u", kind="packet_loss", root=RootCause("leaf-u", "Ethernet4"))
    (told,) = fire(al, unlinked, T0 + 1)
    assert [s for s in states(told)] == [("u", "firing")]
    fire(al, anomaly("d", kind="link_down", status="resolved", at=T0 + 20), T0 + 20)
    out = al.advance(T0 + 31).notifications
    assert ("l", "firing") in [s for n in out for s in states(n)]
    (alert,) = [a for n in out for a in n.alerts if a.fingerprint == "l"]
    assert alert.labels["caused_by"] == "d"


def test_a_cause_s_page_says_what_it_costs_the_jobs_and_says_it_again_when_a_job_is_newly_hurt():
    """Issue 35: a storm stops llm-a's AllReduce (a hang caused by it) and slows moe-b: one page,
    the storm's, whose ``effects`` say both, the second sent as an update of the storm's group
    once moe-b's slowdown is known; the hang and the slowdown never page alone while it fires."""
    al = Alerter(
        config({"receiver": "ops", "group_by": ["..."], "group_wait": "5s", "group_interval": "10s"})
    )
    storm = anomaly("s", kind="pfc_storm", severity="critical", jobs=["llm-a", "moe-b"])
    hang = anomaly(
        "h", kind="job_hang", caused_by="s", summary="llm-a comm 0x8b has completed no AllReduce for 4.0 s"
    )
    slow = anomaly(
        "m", kind="job_slowdown", caused_by="s", summary="moe-b AllGather 64 MiB: bus bandwidth -28%"
    )
    assert fire(al, storm, T0) == [] and fire(al, hang, T0 + 2) == []
    (first,) = al.advance(T0 + 5).notifications
    (alert,) = first.alerts
    assert alert.fingerprint == "s" and alert.annotations["effects"] == (
        "job_hang: llm-a comm 0x8b has completed no AllReduce for 4.0 s"
    )
    assert fire(al, slow, T0 + 8) == []
    (update,) = al.advance(T0 + 15).notifications
    assert [a.fingerprint for a in update.alerts] == ["s"]
    assert (
        "job_slowdown: moe-b AllGather 64 MiB: bus bandwidth -28%" in update.alerts[0].annotations["effects"]
    )
    assert al.advance(T0 + 25).notifications == [], "nothing new: no page"


def test_an_inhibited_alert_still_gets_its_resolved_when_it_was_notified_before():
    al = Alerter(config({"receiver": "ops", "group_by": ["..."], "group_wait": 0, "group_interval": "10s"}))
    assert len(fire(al, anomaly("x", root=RootCause("leaf-x", "Ethernet4")), T0)) == 1
    fire(al, anomaly("s", kind="pfc_storm", devices=["leaf-x"]), T0 + 1)
    fire(al, anomaly("x", status="resolved", at=T0 + 2, root=RootCause("leaf-x", "Ethernet4")), T0 + 2)
    out = al.advance(T0 + 12).notifications
    assert ("x", "resolved") in [s for n in out for s in states(n)]


def test_generic_inhibit_rule_with_equal_labels():
    rules = [
        {"source_matchers": ['kind="ecmp_collapse"'], "target_matchers": ['kind="incast"'], "equal": ["job"]}
    ]
    al = Alerter(
        config(
            {"receiver": "ops", "group_by": ["..."], "group_wait": 0, "group_interval": "10s"},
            inhibit_rules=rules,
            storm_inhibits=[],
        )
    )
    fire(al, anomaly("e", kind="ecmp_collapse", jobs=["llm-a"]), T0)
    assert fire(al, anomaly("i1", jobs=["llm-a"]), T0) == []
    assert len(fire(al, anomaly("i2", jobs=["moe-b"]), T0)) == 1


def test_payload_is_alertmanager_v4_field_by_field():
    cfg = config(
        {"receiver": "ops", "group_by": ["alertname", "job"], "group_wait": 0},
        external_url="http://grafana:3000",
        generator_url="http://grafana:3000/d/fw?var-device={device}&var-port={port}&from={starts_ms}&to={ends_ms}",
        labels={"cluster": "dc1"},
    )
    al = Alerter(cfg)
    fire(al, anomaly("a", jobs=["llm-a"], devices=["leaf-a", "spine-1"], hosts=["h001"]), T0)
    fire(al, anomaly("b", jobs=["llm-a"], start_ns=int(T0 * 1e9) + 250_000_000), T0)
    [n] = al.advance(T0 + 301).notifications
    body = json.loads(encode_body(n, "alertmanager", cfg.external_url))
    assert body == alertmanager_body(n, cfg.external_url)
    assert set(body) == {
        "version",
        "groupKey",
        "truncatedAlerts",
        "status",
        "receiver",
        "groupLabels",
        "commonLabels",
        "commonAnnotations",
        "externalURL",
        "alerts",
    }
    assert body["version"] == "4" and body["truncatedAlerts"] == 0 and body["status"] == "firing"
    assert body["receiver"] == "ops" and body["externalURL"] == "http://grafana:3000"
    assert body["groupKey"] == '{}:{alertname="incast", job="llm-a"}'
    assert body["groupLabels"] == {"alertname": "incast", "job": "llm-a"}
    assert body["commonLabels"] == {
        "alertname": "incast",
        "class": "incident",
        "kind": "incast",
        "severity": "warning",
        "port": "Ethernet8",
        "priority": "3",
        "job": "llm-a",
        "cluster": "dc1",
    }
    assert body["commonAnnotations"]["remediation"] == "do something"
    assert "summary" not in body["commonAnnotations"]  # differs between the two
    a, b = body["alerts"]
    assert set(a) == {"status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"}
    assert a["status"] == "firing" and a["endsAt"] == ZERO_TIME == "0001-01-01T00:00:00Z"
    assert a["startsAt"] == "2027-01-15T08:00:00Z" and b["startsAt"] == "2027-01-15T08:00:00.25Z"
    assert a["fingerprint"] == "a" and a["labels"]["device"] == "leaf-a"
    assert a["annotations"] == {
        "summary": "incast a",
        "remediation": "do something",
        "evidence": "fan_in_ports=7; peak_kb=900",
        "devices": "leaf-a, spine-1",
        "hosts": "h001",
    }
    assert (
        a["generatorURL"]
        == "http://grafana:3000/d/fw?var-device=leaf-a&var-port=Ethernet8&from=1800000000000&to=now"
    )

    fire(al, anomaly("a", status="resolved", at=T0 + 400.5, jobs=["llm-a"]), T0 + 401)
    fire(al, anomaly("b", status="resolved", at=T0 + 400.5, jobs=["llm-a"]), T0 + 401)
    [done] = al.advance(T0 + 601).notifications
    body = alertmanager_body(done, "")
    assert body["status"] == "resolved"
    assert [x["endsAt"] for x in body["alerts"]] == ["2027-01-15T08:06:40.5Z"] * 2
    assert body["alerts"][0]["generatorURL"].endswith("to=1800000400500")


def test_max_alerts_truncates_and_slack_format():
    section = {
        "receivers": [
            {"name": "slack", "url": "https://hooks.slack.example/T/B/x", "format": "slack", "max_alerts": 2}
        ],
        "route": {"receiver": "slack", "group_wait": 0},
    }
    al = Alerter(parse_alerts(section, environ={}))
    for fp in "abc":
        al.ingest(anomaly(fp), T0)
    [n] = al.advance(T0).notifications
    assert len(n.alerts) == 2 and n.truncated == 1
    assert alertmanager_body(n, "")["truncatedAlerts"] == 1
    msg = slack_body(n, "")
    assert msg["text"].startswith("[FIRING:2] alertname=incast")
    assert [x["color"] for x in msg["attachments"]] == ["#d63232"] * 2
    assert "do something" in msg["attachments"][0]["text"]


def test_rfc3339_is_gos_format():
    assert rfc3339(0) == "1970-01-01T00:00:00Z"
    assert rfc3339(1_500_000_000_123_000_000) == "2017-07-14T02:40:00.123Z"
    assert rfc3339(1) == "1970-01-01T00:00:00.000000001Z"


def _doc_block(tag: str) -> str:
    text = DOCS.read_text(encoding="utf-8")
    match = re.search(rf"<!-- {tag} -->\s*```\w*\n(.*?)```", text, re.S)
    assert match, f"docs/alerts.md has no block tagged {tag}"
    return match.group(1)


def test_signature_verifies_with_the_documented_python_recipe_and_fails_when_tampered():
    body, secret, ts = b'{"version":"4","status":"firing"}', "s3cr3t", 1_800_000_000
    headers = {"X-Fabricwatch-Signature": sign(secret, ts, body), "X-Fabricwatch-Timestamp": str(ts)}
    scope: dict = {}
    exec(_doc_block("verify-python"), scope)
    check = scope["verify_fabricwatch"]
    assert check(secret, body, headers, now=ts + 10)
    assert not check(secret, body.replace(b"firing", b"resolve"), headers, now=ts + 10)
    assert not check("wrong", body, headers, now=ts + 10)
    assert not check(secret, body, headers, now=ts + 3600)  # a replay an hour later
    assert verify(secret, body, headers["X-Fabricwatch-Signature"], str(ts), ts) is True
    assert verify(secret, body, headers["X-Fabricwatch-Signature"], str(ts + 1), ts) is False


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl")
def test_signature_verifies_with_the_documented_openssl_one_liner(tmp_path):
    body, secret, ts = b'{"version":"4","alerts":[]}\n', "s3cr3t", 1_800_000_000
    (tmp_path / "body.json").write_bytes(body)
    env = {"SECRET": secret, "TS": str(ts), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        ["bash", "-c", _doc_block("verify-shell")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip().split()[-1] == sign(secret, ts, body).removeprefix("sha256=")


def test_config_errors_name_the_key_and_the_problem(tmp_path):
    def error(section: dict) -> str:
        with pytest.raises(ConfigError) as exc:
            parse_alerts(section, "c.yaml", environ={})
        return str(exc.value)

    rx = [{"name": "ops", "url": "http://x/"}]
    assert "alerts.route.receiver: no receiver named 'nope'" in error(
        {"receivers": rx, "route": {"receiver": "nope"}}
    )
    assert "alerts.route.routes[0].group_wait: '5 minutes' is not a duration" in error(
        {"receivers": rx, "route": {"receiver": "ops", "routes": [{"group_wait": "5 minutes"}]}}
    )
    assert "alerts.route.routes[0].matchers[0]: 'severity' is not a matcher" in error(
        {"receivers": rx, "route": {"receiver": "ops", "routes": [{"matchers": ["severity"]}]}}
    )
    assert "alerts.route.grup_by: unknown key (did you mean `group_by`?)" in error(
        {"receivers": rx, "route": {"receiver": "ops", "grup_by": []}}
    )
    assert "alerts.receivers[0].secret_env: environment variable FW_SECRET is not set" in error(
        {
            "receivers": [{"name": "ops", "url": "http://x/", "secret_env": "FW_SECRET"}],
            "route": {"receiver": "ops"},
        }
    )
    for url in ("x", "http://", "https:///path", "ftp://host/"):
        assert "alerts.receivers[0].url: must be an http:// or https:// URL with a host" in error(
            {"receivers": [{"name": "ops", "url": url}], "route": {"receiver": "ops"}}
        )
    (tmp_path / "c.yaml").write_text("detectors: {}\n")
    with pytest.raises(ConfigError, match="no alerts: section"):
        load_alerts_config(tmp_path / "c.yaml")
    assert parse_duration("1h30m") == 5400 and parse_duration("250ms") == 0.25 and parse_duration(2) == 2.0


def test_secrets_come_from_env_or_files_and_never_show(tmp_path):
    (tmp_path / "secret").write_text("file-secret-123\n")
    (tmp_path / "url").write_text("https://hooks.slack.example/services/T0/B0/url-token-456\n")
    (tmp_path / "c.yaml").write_text(
        "detectors: {}\n"
        "alerts:\n"
        "  receivers:\n"
        "    - {name: a, url: 'http://127.0.0.1/x', secret_env: FW_HOOK_SECRET}\n"
        f"    - {{name: b, url_file: '{tmp_path / 'url'}', secret_file: '{tmp_path / 'secret'}',\n"
        "       format: slack}\n"
        "  route: {receiver: a}\n"
    )
    cfg = load_alerts_config(tmp_path / "c.yaml", environ={"FW_HOOK_SECRET": "env-secret-789"})
    assert cfg.receivers["a"].secret.reveal() == "env-secret-789"
    assert cfg.receivers["b"].secret.reveal() == "file-secret-123"
    assert cfg.receivers["b"].url.reveal().endswith("url-token-456")
    shown = (
        repr(cfg) + str(cfg) + repr(cfg.receivers) + str(cfg.receivers["b"]) + str(cfg.receivers["b"].secret)
    )
    for secret in ("env-secret-789", "file-secret-123", "url-token-456"):
        assert secret not in shown
    spec = msgspec.convert(
        {"name": "b", "url": "https://h/T/B/url-token-456"},
        __import__("fabricwatch.alerts.config").alerts.config.ReceiverSpec,
    )
    assert "url-token-456" not in repr(spec)


def test_silence_command_writes_a_file_the_alerter_rereads(tmp_path, capsys):
    import time

    from fabricwatch.cli.main import main

    path = tmp_path / "silences.yaml"
    section = {
        "receivers": [{"name": "ops", "url": "http://127.0.0.1:9/"}],
        "route": {"receiver": "ops", "group_by": ["..."], "group_wait": 0},
        "silences_file": str(path),
    }
    from fabricwatch.alerts.service import AlertService

    service = AlertService(parse_alerts(section, environ={}), wall=False)
    al = service.alerter
    assert (
        main(["silence", "--file", str(path), "--for", "1h", "--comment", "optics", 'device="leaf-a"']) == 0
    )
    assert 'silenced device="leaf-a"' in capsys.readouterr().out
    assert (
        main(["silence", "--file", str(path), "--for", "30m", 'kind=~"outlier|incast"', 'device="leaf-b"'])
        == 0
    )
    now = time.time()
    assert fire(al, anomaly("a"), now) == []
    assert fire(al, anomaly("b"), now) == []
    assert len(fire(al, anomaly("c"), now)) == 1
    later = fire(al, anomaly("a2", root=RootCause("leaf-a", "Ethernet1")), now + 3601)  # both expired
    assert sorted(fp for n in later for fp, _ in states(n)) == ["a", "a2", "b"]
    assert main(["silence", "--file", str(path), "--for", "soon", 'device="x"']) == 2
    assert "--for: 'soon' is not a duration" in capsys.readouterr().err
    service.close()


@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.sampled_from(["firing", "updated", "resolved"]), st.integers(1, 40)),
        max_size=40,
    ),
    st.sampled_from([["alertname"], ["..."], ["device"]]),
    st.integers(0, 20),
    st.tuples(st.integers(0, 300), st.integers(1, 300)),
)
@settings(max_examples=150, deadline=None)
def test_a_receiver_told_an_alert_fires_is_told_when_it_ends_and_in_order(events, group_by, wait, hush):
    """Random lifecycles on random timers, with a PFC storm and a silence muting others: whatever
    the receiver hears fire, it hears resolve, and no notification of a group goes back in time."""
    route = {"receiver": "ops", "group_by": group_by, "group_wait": wait, "group_interval": 7}
    silence = {"matchers": ['device="d2"'], "starts_at": T0 + hush[0], "ends_at": T0 + hush[0] + hush[1]}
    al = Alerter(config(route, silences=[silence]))
    now, firing, out = T0, set(), []
    for i, status, gap in events:
        now += gap
        fp = f"f{i}"
        if status != "firing" and fp not in firing:
            continue  # the detector only updates or resolves what fires
        severity = "critical" if status == "updated" else "warning"
        kind, paused = ("pfc_storm", ["d0", "d1"]) if i == 5 else ("incast", [])  # storms mute d0, d1
        a = anomaly(fp, kind, status, now, severity=severity, root=RootCause(f"d{i % 3}"), devices=paused)
        out += fire(al, a, now)
        (firing.discard if status == "resolved" else firing.add)(fp)
    for fp in sorted(firing):
        now += 1
        i = int(fp[1:])
        kind = "pfc_storm" if i == 5 else "incast"
        out += fire(al, anomaly(fp, kind, "resolved", now, root=RootCause(f"d{i % 3}")), now)
    out += al.advance(now + 3600).notifications
    last_at: dict[str, float] = {}
    for n in out:
        assert n.at >= last_at.get(n.group_key, 0)
        last_at[n.group_key] = n.at
    told = {fp: state for n in out for fp, state in states(n)}
    assert all(state == "resolved" for state in told.values()), told
    assert al.group_count == 0


def test_the_documented_config_parses(tmp_path):
    import yaml

    text = DOCS.read_text(encoding="utf-8")
    block = re.search(r"## Configuration.*?```yaml\n(.*?)```", text, re.S).group(1)
    ca = tmp_path / "ca.pem"
    ca.write_text("not checked at load\n")
    doc = yaml.safe_load(block.replace("/etc/ssl/private-ca.pem", str(ca)))
    env = {"FW_WEBHOOK_SECRET": "s", "FW_SLACK_URL": "https://hooks.slack.example/services/T/B/x"}
    cfg = parse_alerts(doc["alerts"], "docs/alerts.md", environ=env)
    assert set(cfg.receivers) == {"oncall", "chat"} and cfg.receivers["oncall"].verify == str(ca)
    assert [r.key for r in cfg.route.walk()] == [
        "{}",
        '{}/{severity="critical"}',
        '{}/{kind=~"incast|ecmp_collapse",job!=""}',
        '{}/{class="finding"}',  # findings no route of the config takes: apart, as a digest
    ]


def test_a_near_miss_of_a_kind_in_storm_inhibits_is_refused_and_a_newer_kind_is_kept():
    route = {"receiver": "rx"}
    rx = [{"name": "rx", "url": "http://127.0.0.1:9/hook"}]
    with pytest.raises(
        ConfigError, match=r"alerts.storm_inhibits: unknown kind 'incats' \(did you mean `incast`\?\)"
    ):
        parse_alerts({"receivers": rx, "route": route, "storm_inhibits": ["incats"]}, environ={})
    newer = parse_alerts({"receivers": rx, "route": route, "storm_inhibits": ["link_flap"]}, environ={})
    assert newer.storm_inhibits == {"link_flap"}  # a newer release's kind, not a typo of ours


def test_an_event_repeating_an_alert_s_status_changes_nothing_and_is_counted():
    """A worker's restart or a rebalance re-sends what was said: the same incident, same status."""
    al = Alerter(config())
    fire(al, anomaly("a"), T0)
    [first] = al.advance(T0 + 30).notifications
    assert fire(al, anomaly("a", at=T0 + 40), T0 + 40) == [] and al.repeats == 1
    assert al.advance(T0 + 330).notifications == []  # nothing new in the group: no notification
    fire(al, anomaly("a", status="resolved", at=T0 + 400), T0 + 400)
    assert al.repeats == 1  # a change of status is news
    assert states(first) == [("a", "firing")]


def test_an_incident_said_a_finding_before_any_receiver_was_told_moves_and_is_never_paged():
    """A link down whose far end was read first fires as an incident; a poll later its other end
    says it was taken down on purpose, and it is said as a finding. Within the group's wait nobody
    was told of it: it moves to the findings' route, and the pager never hears of it. Once a
    receiver was told, a change updates the alert in place (it would otherwise stay open there)."""
    routes = {**ROUTES, "group_wait": "30s"}
    root = RootCause("leaf-d", "Ethernet8")
    down = anomaly("d", kind="link_down", severity="critical", root=root)
    planned = anomaly("d", kind="link_down", severity="info", finding=True, root=root)
    al = Alerter(config(routes, findings_receiver="chat", receivers=RECEIVERS))
    assert fire(al, down, T0) == [] and fire(al, planned, T0 + 1) == []
    sent = al.advance(T0 + 400).notifications  # the findings' digest waits 5 minutes
    assert [(n.receiver, [a.labels["class"] for a in n.alerts]) for n in sent] == [("chat", ["finding"])]
    told = Alerter(config(routes, findings_receiver="chat", receivers=RECEIVERS))
    paged = fire(told, down, T0) + told.advance(T0 + 31).notifications
    assert [n.receiver for n in paged] == ["pager"]
    fire(told, planned, T0 + 32)
    assert {n.group_key for n in told.advance(T0 + 400).notifications} == {n.group_key for n in paged}
