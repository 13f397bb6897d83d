"""Delivery to real HTTP receivers on 127.0.0.1 that fail (500), hang past the timeout, or drop the
connection: every notification arrives exactly once per idempotency key, in order within its group;
what cannot be delivered is given up and recorded, never dropped silently."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
from collections import Counter

import pytest
from helpers.paths import SCENARIOS
from helpers.waiting import wait_for

from fabricwatch.alerts.alerter import Alerter
from fabricwatch.alerts.config import parse_alerts
from fabricwatch.alerts.delivery import GiveUpLog
from fabricwatch.alerts.receiver import WebhookReceiver
from fabricwatch.alerts.service import AlertService
from fabricwatch.schemas.messages import Anomaly, RootCause

T0 = 1_800_000_000.0
FAST = {"timeout": "300ms", "connect_timeout": "300ms", "backoff_initial": "50ms", "backoff_max": "200ms"}


def cfg(url: str, environ: dict | None = None, **receiver: object):
    rx = {"name": "rx", "url": url, **FAST, **receiver}
    route = {"receiver": "rx", "group_by": ["device"], "group_wait": 0, "group_interval": "1s"}
    return parse_alerts({"receivers": [rx], "route": route}, environ=environ or {})


def lifecycle(devices: int = 6) -> list[tuple[float, Anomaly]]:
    """Per device two alerts: a fires, b fires, a turns critical, a resolves, b resolves, 2 s apart
    (trace time), so with group_interval 1s every state change is its own notification."""
    events = []
    for d in range(devices):
        root = RootCause(f"leaf-{d}", "Ethernet8", 3)

        def ev(
            fp: str, status: str, t: float, severity: str = "warning", root: RootCause = root
        ) -> tuple[float, Anomaly]:
            end = int(t * 1e9) if status == "resolved" else None
            a = Anomaly(
                fp, "incast", severity, status, int(T0 * 1e9), int(t * 1e9), root, f"incast {fp}", end_ns=end
            )
            return t, a

        a, b = f"a{d}", f"b{d}"
        events += [
            ev(a, "firing", T0 + d * 0.1),
            ev(b, "firing", T0 + 2 + d * 0.1),
            ev(a, "updated", T0 + 4 + d * 0.1, "critical"),
            ev(a, "resolved", T0 + 6 + d * 0.1, "critical"),
            ev(b, "resolved", T0 + 8 + d * 0.1),
        ]
    return sorted(events, key=lambda e: e[0])


def expected_notifications(config) -> list:
    """The pure core's answer for the same events: what the receiver must end up with."""
    al, out = Alerter(config), []
    for t, a in lifecycle():
        out += al.advance(t).notifications
        al.ingest(a, t)
        out += al.advance(t).notifications
    return out + al.flush_all(T0 + 20).notifications


def feed(service: AlertService) -> None:
    for t, a in lifecycle():
        service.ingest(a, now=t)
    service.flush_all(T0 + 20)


def flaky(key: str, attempt: int) -> str:
    """Deterministic per key: the first attempt fails in one of three ways or succeeds, some second
    attempts fail again, the third always succeeds."""
    h = int(hashlib.sha256(key.encode()).hexdigest(), 16)
    if attempt == 1:
        return ("ok", "500", "hang", "drop")[h % 4]
    if attempt == 2:
        return "500" if h % 3 == 0 else "ok"
    return "ok"


def test_every_state_change_arrives_exactly_once_in_order_despite_500_hang_and_drop():
    with WebhookReceiver(behaviour=flaky, hang_s=0.6) as rx:
        config = cfg(rx.url, concurrency=4)
        expected = expected_notifications(config)
        service = AlertService(config, wall=False)
        feed(service)
        assert service.drain(20)
        stats = service.queues["rx"].stats
        service.close()

    assert len(expected) == 6 * 5 and stats.delivered == len(expected) and stats.given_up == 0
    got = Counter(r.key for r in rx.accepted)
    assert set(got) == {n.key for n in expected} and set(got.values()) == {1}
    assert stats.retries > 0 and rx.requests > len(expected)
    assert rx.duplicates, "a hung request processed after its retry must show up as a duplicate"
    assert set(rx.duplicates) <= set(got)

    # In order within each group: the receiver's order equals the core's order.
    for group in {n.group_key for n in expected}:
        want = [n.key for n in expected if n.group_key == group]
        seen = [r.key for r in rx.accepted if r.body["groupKey"] == group]
        assert seen == want
        assert [
            int(r.headers["X-Fabricwatch-Sequence"]) for r in rx.accepted if r.body["groupKey"] == group
        ] == [
            1,
            2,
            3,
            4,
            5,
        ]

    # Every state change of every alert, as the receiver saw it.
    changes: dict[str, list[tuple[str, str]]] = {}
    for r in rx.accepted:
        for a in r.body["alerts"]:
            state = (a["status"], a["labels"]["severity"])
            if changes.setdefault(a["fingerprint"], [])[-1:] != [state]:
                changes[a["fingerprint"]].append(state)
    for d in range(6):
        assert changes[f"a{d}"] == [("firing", "warning"), ("firing", "critical"), ("resolved", "critical")]
        assert changes[f"b{d}"] == [("firing", "warning"), ("resolved", "warning")]


def test_what_cannot_be_delivered_is_given_up_recorded_and_the_group_moves_on(tmp_path, caplog):
    def broken_leaf0(key: str, attempt: int) -> str:
        return "500" if key in doomed else "ok"

    with WebhookReceiver(behaviour=broken_leaf0) as rx:
        config = cfg(rx.url, max_attempts=3, backoff_initial="10ms", backoff_max="20ms")
        expected = expected_notifications(config)
        doomed = {n.key for n in expected if n.group_labels == {"device": "leaf-0"} and n.seq <= 2}
        outcomes = []
        service = AlertService(config, wall=False)
        service.give_up.path = tmp_path / "giveup.jsonl"
        queue = service.queues["rx"]
        inner = queue.on_done
        queue.on_done = lambda o: (outcomes.append(o), inner(o))
        with caplog.at_level(logging.WARNING, logger="fabricwatch.alerts"):
            feed(service)
            assert service.drain(10)
        service.close()

    assert queue.stats.given_up == 2 and queue.stats.delivered == len(expected) - 2
    assert sorted(o.notification.key for o in outcomes if not o.delivered) == sorted(doomed)
    assert all(o.attempts == 3 and o.error == "HTTP 500" for o in outcomes if not o.delivered)
    lines = [json.loads(x) for x in (tmp_path / "giveup.jsonl").read_text().splitlines()]
    assert sorted(x["idempotency_key"] for x in lines) == sorted(doomed)
    assert all(x["body"]["version"] == "4" and x["receiver"] == "rx" and x["attempts"] == 3 for x in lines)
    assert sum("gave up on notification" in r.message for r in caplog.records) == 2
    trouble = [r.message for r in caplog.records if r.message.startswith("receiver rx: ")]
    assert trouble[0].startswith("receiver rx: failing (HTTP 500); retrying with backoff")
    assert any("recovered after" in m for m in trouble)  # the end of the trouble is said too
    leaf0 = [
        r.headers["X-Fabricwatch-Sequence"]
        for r in rx.accepted
        if r.body["groupLabels"] == {"device": "leaf-0"}
    ]
    assert leaf0 == ["3", "4", "5"]  # later notifications of the group still went out, in order


def test_a_4xx_is_given_up_at_once_and_a_bad_signature_is_refused(monkeypatch):
    with WebhookReceiver(secret="right") as rx:
        config = cfg(rx.url, environ={"FW_SECRET": "wrong"}, secret_env="FW_SECRET", give_up_after="5s")
        service = AlertService(config, wall=False)
        service.ingest(lifecycle()[0][1], now=T0)
        assert service.drain(5)
        service.close()
    stats = service.queues["rx"].stats
    assert rx.rejected == 1 and rx.accepted == [] and stats.given_up == 1 and stats.attempts == 1

    with WebhookReceiver(secret="right") as rx:
        service = AlertService(
            cfg(rx.url, environ={"FW_SECRET": "right"}, secret_env="FW_SECRET"), wall=False
        )
        service.ingest(lifecycle()[0][1], now=T0)
        assert service.drain(5)
        service.close()
    assert rx.rejected == 0 and len(rx.accepted) == 1
    assert rx.accepted[0].headers["X-Fabricwatch-Signature"].startswith("sha256=")


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("no openssl")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(d / "key.pem"),
            "-out",
            str(d / "cert.pem"),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    return str(d / "cert.pem"), str(d / "key.pem")


def test_tls_is_verified_by_default_and_a_ca_file_makes_it_pass(cert):
    with WebhookReceiver(tls=cert) as rx:
        service = AlertService(cfg(rx.url, give_up_after="300ms"), wall=False)
        service.ingest(lifecycle()[0][1], now=T0)
        assert service.drain(5)
        service.close()
        untrusted = service.queues["rx"].stats
        assert untrusted.given_up == 1 and untrusted.last_error == "SSLError" and rx.accepted == []

        service = AlertService(cfg(rx.url, ca_file=cert[0]), wall=False)
        service.ingest(lifecycle()[0][1], now=T0)
        assert service.drain(5)
        service.close()
        assert service.queues["rx"].stats.delivered == 1 and len(rx.accepted) == 1


def test_wall_clock_service_flushes_on_its_timer_thread():
    with WebhookReceiver() as rx:
        config = parse_alerts(
            {
                "receivers": [{"name": "rx", "url": rx.url, **FAST}],
                "route": {"receiver": "rx", "group_wait": "200ms", "group_interval": "200ms"},
            },
            environ={},
        )
        service = AlertService(config)
        service.ingest(lifecycle()[0][1])
        assert rx.accepted == []
        wait_for(lambda: rx.accepted, 3)
        service.close(drain_s=2)
    assert len(rx.accepted) == 1 and rx.accepted[0].body["alerts"][0]["fingerprint"] == "a0"


@pytest.mark.slow  # a scenario replayed
def test_replay_delivers_a_pfc_storm_from_firing_to_resolved_on_trace_time(tmp_path, capsys):

    from fabricwatch.cli.main import main
    from fabricwatch.ingest.simulator import load_scenario, simulate

    scenarios = SCENARIOS
    trace = tmp_path / "storm.trace"
    simulate(load_scenario(scenarios / "pfc_storm.yaml", {"duration": 40}), trace)
    with WebhookReceiver() as rx, WebhookReceiver(behaviour=lambda key, attempt: "400") as broken:
        conf = tmp_path / "fabricwatch.yaml"
        conf.write_text(
            "detectors: {}\n"
            "alerts:\n"
            f"  receivers: [{{name: oncall, url: '{rx.url}'}}]\n"
            "  route: {receiver: oncall, group_by: [alertname], group_wait: 0s, group_interval: 2s}\n"
        )
        assert main(["replay", str(trace), "--quiet", "--config", str(conf), "--alerts", str(conf)]) == 0
        assert "alerts: 2 notifications, 2 delivered, 0 given up" in capsys.readouterr().out
        conf.write_text(conf.read_text().replace(rx.url, broken.url))
        assert main(["replay", str(trace), "--quiet", "--alerts", str(conf)]) == 1  # given up: exit 1
        assert "alerts: 2 notifications, 0 delivered, 2 given up" in capsys.readouterr().out
    first, last = (r.body for r in rx.accepted)
    assert first["status"] == "firing" and last["status"] == "resolved"
    assert first["groupKey"] == last["groupKey"] == '{}:{alertname="pfc_storm"}'
    storm = first["alerts"][0]
    assert storm["labels"]["device"] == "h003/mlx5_0" and storm["labels"]["severity"] == "critical"
    assert storm["endsAt"] == "0001-01-01T00:00:00Z" and last["alerts"][0]["endsAt"] != storm["endsAt"]
    assert storm["startsAt"] < last["alerts"][0]["endsAt"]


def test_a_replay_waiting_on_an_unreachable_webhook_says_what_it_waits_for_and_how_long():
    """Found: `replay --alerts` with a webhook nobody answers hung silently until give_up_after."""
    import io

    from fabricwatch.alerts.commands import ReplayAlerts
    from fabricwatch.local.broker import free_port

    alerting = ReplayAlerts(cfg(f"http://127.0.0.1:{free_port()}/hook", give_up_after="2s"), io.StringIO())
    alerting.PROGRESS_EVERY_S = 0.5
    alerting.feed([a for _, a in lifecycle(devices=1)[:1]])
    summary = io.StringIO()
    assert alerting.finish(summary) is False
    lines = alerting.progress.getvalue().splitlines()
    assert len(lines) >= 3  # one at the start, then every half second
    waiting = "alerts: waiting for 1 notifications to be delivered"
    assert lines[0] == f"{waiting}; giving up in 3 s (give_up_after); Ctrl-C stops"
    assert "to be delivered (last error: ConnectionError" in lines[-1]  # and why it is not
    assert summary.getvalue().strip() == "alerts: 1 notifications, 0 delivered, 1 given up, 0 undelivered"


def test_a_give_up_log_that_cannot_be_written_is_refused_at_start_in_one_line(tmp_path, capsys):
    """The path docs/alerts.md shows, on a host where its directory does not exist: the alerter
    says so and does not start (it used to start, then lose what it gave up)."""
    from fabricwatch.cli.main import main

    missing = tmp_path / "no-such-dir" / "alerts-giveup.jsonl"
    config = tmp_path / "alerts.yaml"
    config.write_text(
        "alerts:\n  receivers: [{name: rx, url: 'http://127.0.0.1:9/hook'}]\n  route: {receiver: rx}\n"
        f"  give_up_log: {missing}\n"
    )
    assert main(["alert", "--broker", "127.0.0.1:9", "--config", str(config)]) == 2
    said = [line for line in capsys.readouterr().err.strip().splitlines() if " INFO " not in line]
    assert len(said) == 1 and "alerts.give_up_log" in said[0] and str(missing) in said[0], said
    assert "No such file or directory" in said[0]


def test_a_give_up_log_that_stops_taking_writes_loses_no_notification(tmp_path, caplog):
    """Its directory removed while the alerter runs, the receiver down: every notification is still
    given up and counted, the failure is said once, and the queue's workers live on."""
    logs = tmp_path / "logs"
    logs.mkdir()
    with WebhookReceiver(behaviour=lambda key, attempt: "500") as rx:
        config = cfg(rx.url, max_attempts=2, backoff_initial="10ms", backoff_max="20ms")
        service = AlertService(config, wall=False)
        service.give_up = GiveUpLog(logs / "giveup.jsonl")
        service.queues["rx"].give_up = service.give_up
        shutil.rmtree(logs)
        with caplog.at_level(logging.WARNING, logger="fabricwatch.alerts"):
            feed(service)
            assert service.drain(20)
        stats = service.queues["rx"].stats
        service.close()
    expected = len(expected_notifications(config))
    assert stats.submitted == expected and stats.given_up == expected and stats.delivered == 0
    assert service.give_up.failures == expected
    assert sum("give-up log: cannot append" in r.message for r in caplog.records) == 1
