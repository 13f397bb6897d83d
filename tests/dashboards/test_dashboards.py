"""The shipped Grafana dashboards against the real schema: every template variable's query and every
panel's and annotation's SQL, with Grafana's and the ClickHouse plugin's macros expanded, runs on a
chdb store filled by replaying the demo scenario, and returns rows. No Grafana server is needed."""

from __future__ import annotations

import pytest
import yaml
from helpers.dashboard_queries import (
    DASHBOARDS,
    INTERVAL_S,
    queries,
    resolve_variables,
    run_panel,
    stored_span,
)
from helpers.fake_grafana import FakeGrafana
from helpers.paths import ROOT
from helpers.replayed_store import replay_into_store

from fabricwatch.cli.main import main
from fabricwatch.dashboards.grafana import DATASOURCE_UID, FOLDER_UID, PLUGIN_TYPE, dashboard_names
from fabricwatch.dashboards.macros import QueryContext, expand
from fabricwatch.storage.queries import anomalies_from_store

pytestmark = pytest.mark.slow  # a replayed store in embedded ClickHouse

ASSETS = ROOT / "dashboards" / "grafana"
ON_THE_DEMO = sorted(uid for uid in DASHBOARDS if uid not in ("fw-link-health", "fw-capacity"))
TIMED_CALLS = ("Bus bandwidth of the jobs'", "Time of the jobs'", "Step time of the jobs", "Share of a step")
"""Panels over each call's time, which the demo's jobs do not give (an NCCL log's view): they are
checked on the Inspector's records in ``test_dashboard_job_timeline.py``."""
NO_RHYTHM = ("Rhythm of the jobs",)
"""The jobs' periods, which the demo's three minutes (shorter than the rhythm detector's window)
do not give: checked in ``test_job_rhythm.py`` and ``test_dashboard_job_timeline.py``."""
"""Dashboards whose every panel the demo fills; link health has its own store
(``test_dashboard_link_health.py``): the simulator has no FEC, CRC or PFC watchdog counters; so
has capacity (``test_dashboard_capacity.py``): the demo's five minutes hold no hot hour."""


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    store, _ = replay_into_store("demo", tmp_path_factory.mktemp("dashboards"))
    yield store
    store.close()


@pytest.fixture(scope="module")
def span(replayed) -> tuple[int, int]:
    return stored_span(replayed)


def test_the_eight_dashboards_ship_as_package_data():
    assert dashboard_names() == [
        "anomalies.json",
        "capacity.json",
        "ecmp-balance.json",
        "fabric-overview.json",
        "incast.json",
        "job-timeline.json",
        "link-health.json",
        "pfc-storm.json",
    ]


@pytest.mark.parametrize("uid", sorted(DASHBOARDS))
def test_panels_use_the_clickhouse_plugin_query_model(uid):
    dash = DASHBOARDS[uid]
    assert dash["uid"] == uid and dash["title"].startswith("fabricwatch / ") and "fabricwatch" in dash["tags"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) and len(ids) >= 5
    for p in dash["panels"]:
        assert p["datasource"] == {"type": PLUGIN_TYPE, "uid": DATASOURCE_UID}, p["title"]
        assert p["gridPos"]["x"] >= 0 and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24, p["title"]
        for t in p["targets"]:
            assert t["datasource"]["type"] == PLUGIN_TYPE and t["editorType"] == "sql" and t["rawSql"]
            assert (t["queryType"], t["format"]) in {("timeseries", 0), ("table", 1)}, p["title"]
            if t["format"] == 0:
                assert " AS time" in t["rawSql"] and "ORDER BY time" in t["rawSql"], p["title"]
    for var in dash["templating"]["list"]:
        assert var["type"] in {"query", "custom"}
        if var["type"] == "query":
            assert var["datasource"]["type"] == PLUGIN_TYPE and var["query"].lstrip().startswith("SELECT")


def test_dashboards_differ_in_uid_and_title():
    assert len({d["title"] for d in DASHBOARDS.values()}) == len(DASHBOARDS) == 8


@pytest.mark.parametrize("uid", ON_THE_DEMO)
def test_template_variables_list_options_from_the_store(replayed, span, uid):
    _, options = resolve_variables(replayed, DASHBOARDS[uid], span, pick_all=True)
    for var in DASHBOARDS[uid]["templating"]["list"]:
        if var["type"] == "query":
            assert options[var["name"]], f"{uid}: variable ${var['name']} lists nothing"
            assert "" not in options[var["name"]]


@pytest.mark.parametrize("uid", ON_THE_DEMO)
def test_every_query_returns_rows_with_all_selected(replayed, span, uid):
    dash = DASHBOARDS[uid]
    chosen, options = resolve_variables(replayed, dash, span, pick_all=True)
    ctx = QueryContext(*span, INTERVAL_S, chosen, options)
    empty = [
        title
        for title, sql in queries(dash)
        if not title.startswith(TIMED_CALLS + NO_RHYTHM) and not replayed.query(expand(sql, ctx))
    ]
    assert not empty, f"{uid}: no rows from {empty}"


@pytest.mark.parametrize("uid", ON_THE_DEMO)
def test_every_query_runs_with_one_value_selected(replayed, span, uid):
    """A single selection is formatted differently ('x' rather than every option): it must parse."""
    dash = DASHBOARDS[uid]
    chosen, options = resolve_variables(replayed, dash, span, pick_all=False)
    ctx = QueryContext(*span, INTERVAL_S, chosen, options)
    for _, sql in queries(dash):
        replayed.query(expand(sql, ctx))


def test_incast_dashboard_for_the_incast_job_fills_every_panel(replayed, span):
    dash = DASHBOARDS["fw-incast"]
    chosen, options = resolve_variables(replayed, dash, span, pick_all=True)
    chosen.update(job=["moe-b"], op=["Reduce"])
    ctx = QueryContext(*span, INTERVAL_S, chosen, options)
    empty = [title for title, sql in queries(dash) if not replayed.query(expand(sql, ctx))]
    assert not empty


def test_storm_drilldown_names_the_root_and_walks_the_pause_tree(replayed, span):
    (storm,) = run_panel(replayed, span, "fw-pfc-storm", "PFC storms in range")
    assert storm[4:6] == ("h002/mlx5_0:1", 3), "root port and priority of the demo's stalled NIC"
    hops = run_panel(replayed, span, "fw-pfc-storm", "Propagation of the selected storm, hop by hop")
    assert hops[0] == (1, "leaf00:Ethernet16<-h002/mlx5_0:1"), "hop 1: the leaf port facing the NIC"
    assert max(h for h, _ in hops) == storm[8] >= 2, "the tree reaches as deep as the evidence says"
    root = run_panel(replayed, span, "fw-pfc-storm", "Root port: pauses sent, pauses received, traffic")
    assert max(r[1] for r in root) > 0.9 and max(r[2] for r in root) == 0, "the root pauses, unpaused"


def test_incast_table_names_job_and_collective(replayed, span):
    rows = run_panel(replayed, span, "fw-incast", "Incasts by job and collective")
    assert [(r[0], r[1].split(" comm ")[0], r[5]) for r in rows] == [("moe-b", "Reduce", "leaf01:Ethernet8")]
    ecn = run_panel(replayed, span, "fw-incast", "ECN marks at incast victim ports")
    assert {r[1] for r in ecn} == {"leaf01:Ethernet8"} and max(r[2] for r in ecn) > 1e6


def test_ecmp_balance_ranks_the_collapsed_group_first(replayed, span):
    rows = run_panel(replayed, span, "fw-ecmp", "Balance per group over the range")
    assert rows[0][0] == "leaf02/uplinks" and rows[0][1] == 4
    assert rows[0][3] > rows[-1][3], "its hottest member is further above the mean than the balanced group's"
    shares = run_panel(replayed, span, "fw-ecmp", "Member share of group traffic", group=["leaf02/uplinks"])
    assert {r[1].split()[0] for r in shares} == {"leaf02/uplinks"}
    assert 0.5 < max(r[2] for r in shares) <= 1.0, "the collapse puts more than half on one uplink"


def test_anomalies_table_carries_job_and_running_phases(replayed, span):
    rows = run_panel(replayed, span, "fw-anomalies", "Incidents with job and phase context")
    incast = next(r for r in rows if r[2] == "incast")
    assert incast[6] == "moe-b" and "Reduce comm" in incast[8] and "AllToAll" not in incast[8]
    assert {r[2] for r in rows} == {"incast", "pfc_storm", "ecmp_collapse"}


def test_overview_heatmaps_show_the_incast_and_the_storm(replayed, span):
    util = run_panel(replayed, span, "fw-overview", "Port utilisation (tx, top ports by peak)")
    assert max(r[2] for r in util if r[1] == "leaf01:Ethernet8") > 0.95, "the incast victim runs at line rate"
    pause = run_panel(replayed, span, "fw-overview", "Pause time (rx paused fraction, top ports)")
    assert {"leaf00:Ethernet16", "spine00:Ethernet0"} <= {r[1] for r in pause if r[2] > 0.9}
    talkers = run_panel(replayed, span, "fw-overview", "Top talkers")
    assert len(talkers) == 20 and (talkers[0][0], talkers[0][1]) == ("leaf02", "Ethernet96")


def test_provisioning_files_match_what_push_creates():
    ds = yaml.safe_load((ASSETS / "provisioning" / "datasources" / "fabricwatch-clickhouse.yaml").read_text())
    (source,) = ds["datasources"]
    assert (source["uid"], source["type"]) == (DATASOURCE_UID, PLUGIN_TYPE)
    assert {"host", "port", "protocol", "username", "defaultDatabase"} <= source["jsonData"].keys()
    assert source["secureJsonData"]["password"].startswith("${")
    dp = yaml.safe_load((ASSETS / "provisioning" / "dashboards" / "fabricwatch.yaml").read_text())
    (provider,) = dp["providers"]
    assert provider["type"] == "file" and provider["folderUid"] == FOLDER_UID


def test_push_annotates_the_stored_incidents_once(replayed, tmp_path, capsys):
    stored = anomalies_from_store(replayed)
    assert sorted(a.kind for a in stored) == ["ecmp_collapse", "incast", "pfc_storm"]
    assert all(a.status == "resolved" and a.end_ns and a.evidence for a in stored)
    fake = FakeGrafana()
    try:
        token = tmp_path / "token"
        token.write_text(fake.token)
        argv = ["grafana", "push", "--url", fake.url, "--token-file", str(token)]
        argv += [
            "--clickhouse-url",
            "clickhouse://ch/fabricwatch",
            "--from-store",
            str(replayed.backend.data_dir),
        ]
        assert main(argv) == 0 and main(argv) == 0
        assert capsys.readouterr().out.splitlines()[-1].endswith(": 0 created, 0 updated, 13 unchanged")
        assert len(fake.annotations) == 3 and len(fake.dashboards) == len(DASHBOARDS)
        storm = next(a for a in fake.annotations.values() if "kind:pfc_storm" in a["tags"])
        assert "h002/mlx5_0:1" in storm["text"] and storm["timeEnd"] > storm["time"]
    finally:
        fake.close()
