"""`fabricwatch evaluate` on shortened copies of suite scenarios: the report CI gates on, its exit
codes, and how arguments name scenarios."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import yaml
from helpers.paths import FIXTURES, SCENARIOS

from fabricwatch.cli.main import main
from fabricwatch.evaluate import scenario_paths

pytestmark = pytest.mark.slow  # the evaluation suite's scenarios

SUITE = SCENARIOS / "eval"
SHORT = {"incast_100ms_16h": 25, "storm_100ms_16h": 30, "benign_100ms_5min_32h": 40}
"""Suite scenarios cut to their first fault (or first look-alikes), so the tests stay fast."""

KIND_FIELDS = {
    "labels", "incidents", "true_incidents", "duplicates", "detected", "localised", "false_alerts",
    "precision", "recall", "localisation", "delay_s", "delay_polls", "benign_false_alerts",
    "benign_hours", "false_alerts_per_hour", "gated", "passed", "checks",
}  # fmt: skip


@pytest.fixture(scope="module")
def short_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("suite")
    for name, duration in SHORT.items():
        doc = yaml.safe_load((SUITE / f"{name}.yaml").read_text())
        (out / f"{name}.yaml").write_text(yaml.safe_dump({**doc, "duration": duration}))
    (out / "README.txt").write_text("not a scenario")
    return out


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str]:
    rc = main(["evaluate", "--jobs", "2", *map(str, args)])
    return rc, capsys.readouterr().out


@pytest.fixture(scope="module")
def report(short_suite: Path) -> tuple[int, dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["evaluate", "--json", "--jobs", "2", str(short_suite)])
    return rc, json.loads(out.getvalue())


def test_a_directory_means_its_yaml_files_sorted(short_suite):
    assert [p.name for p in scenario_paths([short_suite])] == sorted(f"{n}.yaml" for n in SHORT)


def test_json_report_has_every_documented_field_and_its_verdict_is_the_exit_code(report):
    rc, doc = report
    assert rc == (0 if doc["passed"] else 1)
    assert {
        "passed",
        "gating_rule",
        "thresholds",
        "wall_s",
        "kinds",
        "total",
        "failures",
        "scenarios",
    } <= doc.keys()
    assert {"incast", "pfc_storm"} <= doc["kinds"].keys()
    for kind in doc["kinds"].values():
        assert kind.keys() >= KIND_FIELDS
        assert kind["delay_s"].keys() == kind["delay_polls"].keys() == {"max", "p50", "p95"}
    assert [s["name"] for s in doc["scenarios"]] == sorted(f"{n}.yaml" for n in SHORT)
    benign = next(s for s in doc["scenarios"] if s["name"].startswith("benign"))
    assert benign["benign_only"] and benign["labels"] == []
    assert doc["total"]["benign_hours"] == pytest.approx(40 / 3600)
    storm = next(s for s in doc["scenarios"] if s["name"].startswith("storm"))
    (label,) = storm["labels"]
    assert label["root"] == "h006/mlx5_0:1 prio 3" and label["start_s"] == 17.66
    assert label["delay_bound_s"] == pytest.approx(0.2 + 0.1)  # detection time + one 100 ms poll


def test_a_threshold_that_fails_exits_1_and_names_the_missed_label(short_suite, tmp_path, capsys):
    config = tmp_path / "deaf.yaml"
    config.write_text(  # a band no queue reaches, and marks at line rate (no band) made deaf too
        "detectors:\n  incast: {ecn_kmin_bytes: 1000000000000, ecn_kmax_bytes: 2000000000000,"
        " line_rate_marks: 1.0}\n"
    )
    rc, out = run(capsys, "--config", config, short_suite / "incast_100ms_16h.yaml")
    assert rc == 1
    assert "FAIL      incast" in out
    assert (
        "incast recall [incast_100ms_16h.yaml]: label 12.370-19.570 s leaf00:Ethernet24 prio 3: missed" in out
    )


@pytest.mark.parametrize(
    "args",
    [
        ["no-such-scenario.yaml"],
        ["--config", "no-such-config.yaml", str(SUITE / "storm_100ms_16h.yaml")],
        [str(FIXTURES)],
    ],
    ids=["missing scenario", "missing config", "directory without scenarios"],
)
def test_usage_and_configuration_errors_exit_2(args, capsys):
    assert main(["evaluate", *args]) == 2
    assert "fabricwatch evaluate:" in capsys.readouterr().err


def test_an_invalid_scenario_exits_2_before_anything_runs(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("duration: 10\nfaults: [{kind: pfc_storm, root: h999, start: 1, duration: 2}]\n")
    assert main(["evaluate", str(SUITE / "storm_100ms_16h.yaml"), str(bad)]) == 2
    assert "faults[0].root: unknown host 'h999'" in capsys.readouterr().err


def test_seeds_run_the_suite_under_each_seed_and_report_mean_and_worst(short_suite):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(
            ["evaluate", "--json", "--jobs", "2", "--seeds", "1-2", str(short_suite / "storm_100ms_16h.yaml")]
        )
    doc = json.loads(out.getvalue())
    assert rc == (0 if doc["passed"] else 1)
    assert doc["seeds"] == [1, 2]
    assert [[s["seed"] for s in run["scenarios"]] for run in doc["by_seed"]] == [[1], [2]]
    storm = doc["kinds"]["pfc_storm"]
    assert storm["worst_seed"] in (1, 2) and storm["worst"].keys() >= KIND_FIELDS
    assert storm["mean"]["recall"] == pytest.approx(
        sum(run["kinds"]["pfc_storm"]["recall"] for run in doc["by_seed"]) / 2
    )
