"""The suite under several seeds (issue 15, class 4): a detector that passes by one seed's luck must
fail the gate under the seed it does not pass, and the report must name that seed."""

from __future__ import annotations

import io

import pytest

from fabricwatch.cli.main import main
from fabricwatch.console import print_seeds
from fabricwatch.detectors.evaluation import Counts
from fabricwatch.evaluate import parse_seeds, rule_kinds
from fabricwatch.suite_report import LabelResult, ScenarioResult, SeedsReport, Thresholds, score_suite


@pytest.mark.parametrize(
    ("text", "seeds"),
    [
        ("1-5", [1, 2, 3, 4, 5]),
        ("7", [7]),
        ("1,3,7", [1, 3, 7]),
        ("1-3,2,9", [1, 2, 3, 9]),
        (" 4 - 5", [4, 5]),
    ],
)
def test_seeds_are_ranges_and_lists(text, seeds):
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize(
    ("text", "problem"), [("1-x", "'1-x' is not a seed"), ("5-1", "ends before it starts")]
)
def test_bad_seeds_are_refused_with_the_part_named(text, problem, capsys):
    with pytest.raises(ValueError, match=problem):
        parse_seeds(text)
    with pytest.raises(SystemExit) as usage:
        main(["evaluate", "--seeds", text, "scenarios/eval/storm_100ms_16h.yaml"])
    assert usage.value.code == 2
    assert problem in capsys.readouterr().err


def _storm_run(seed: int, detected: bool) -> ScenarioResult:
    """One scenario's result with one PFC storm label, found or missed (as a replay would score it)."""
    label = LabelResult(
        kind="pfc_storm", root="h006/mlx5_0:1 prio 3", start_s=17.66, end_s=27.0, detected=detected,
        localised=detected, duplicates=0, found_roots=["h006/mlx5_0:1 prio 3"] if detected else [],
        delay_s=0.2 if detected else None, delay_polls=2.0 if detected else None, delay_bound_s=0.3,
    )  # fmt: skip
    counts = Counts(labels=1, incidents=int(detected), true_incidents=int(detected), detected=int(detected),
                    localised=int(detected))  # fmt: skip
    return ScenarioResult(
        path="storm.yaml", name="storm.yaml", seed=seed, hosts=16, poll_s=0.1, duration_s=30.0,
        benign_only=False, wall_s=1.0, kinds={"pfc_storm": counts}, labels=[label], false_alerts=[],
    )  # fmt: skip


def test_one_failing_seed_fails_the_suite_and_is_named_worst():
    report = SeedsReport(
        {
            1: score_suite([_storm_run(1, True)], rule_kinds(), Thresholds()),
            7: score_suite([_storm_run(7, False)], rule_kinds(), Thresholds()),
        },
        Thresholds(),
        2.0,
    )
    assert not report.passed
    assert report.worst("pfc_storm")[0] == 7
    assert report.mean("pfc_storm")["recall"] == pytest.approx(0.5)
    out = io.StringIO()
    print_seeds(report, out)
    text = out.getvalue()
    assert "FAIL      pfc_storm (fails under seed 7; worst seed 7)" in text
    assert "Failures [seed 7]" in text and "Failures [seed 1]" not in text
    assert "label 17.660-27.000 s h006/mlx5_0:1 prio 3: missed" in text
    assert text.rstrip().endswith("FAIL      suite (1 scenarios x 2 seeds)")
    doc = report.to_json()
    assert doc["seeds"] == [1, 7] and doc["kinds"]["pfc_storm"]["worst_seed"] == 7
    assert [s["seed"] for s in doc["by_seed"]] == [1, 7] and not doc["passed"]


def test_every_seed_passing_passes():
    report = SeedsReport(
        {
            1: score_suite([_storm_run(1, True)], rule_kinds(), Thresholds()),
            2: score_suite([_storm_run(2, True)], rule_kinds(), Thresholds()),
        },
        Thresholds(),
        2.0,
    )
    assert report.passed
    out = io.StringIO()
    print_seeds(report, out)
    assert "PASS      pfc_storm (passes under every seed" in out.getvalue()
