"""Learned outliers: trained on baseline.yaml's healthy traffic, they name the faults of outliers.yaml
that no rule knows, stay quiet on held-out and benign traffic, and never page on one poll."""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from helpers.paths import SCENARIOS

from fabricwatch.cli.main import main
from fabricwatch.detectors.evaluation import incidents_of
from fabricwatch.detectors.outliers import ModelError, OutlierDetector, OutlierModel
from fabricwatch.detectors.outliers.config import OutlierConfig
from fabricwatch.detectors.outliers.features import FEATURES
from fabricwatch.detectors.outliers.forest import Forest
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.detectors.rates import Layout, RateFrame
from fabricwatch.ingest.simulator import load_scenario, simulate
from fabricwatch.ingest.simulator.counters import NIC_TABLE
from fabricwatch.replay import ReplayResult, replay_trace

pytestmark = pytest.mark.slow  # whole scenarios replayed and models trained

TRAIN_MINUTES = 4  # of baseline.yaml's five: the last minute is held out


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("outliers")
    out = {}
    for name, scenario, seed in (
        ("baseline", "baseline", None),
        ("outliers", "outliers", None),
        ("benign", "benign", 99),  # benign.yaml's fabric, look-alikes and a seed of its own
    ):
        out[name] = tmp / f"{name}.trace.gz"
        simulate(load_scenario(SCENARIOS / f"{scenario}.yaml"), out[name], seed=seed)
    return out


@pytest.fixture(scope="module")
def model_path(traces, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("model") / "baseline.fwm"
    assert main(["train", "--out", str(path), "--minutes", str(TRAIN_MINUTES), str(traces["baseline"])]) == 0
    return path


@pytest.fixture(scope="module")
def model(model_path) -> OutlierModel:
    return OutlierModel.load(model_path)


def replay(trace: Path, model: OutlierModel) -> ReplayResult:
    return replay_trace(trace, Pipeline(outliers=OutlierDetector(model)))


def firing(result: ReplayResult) -> dict[tuple[str, str], dict]:
    return {(a.root.device, a.root.port): a for a in result.anomalies if a.status == "firing"}


def test_the_rules_name_the_lossy_link_and_the_model_the_slowed_nic(traces, model):
    """The lossy link is a rule's since link corruption has one (issue 34): the model's outlier on
    its NIC and the retransmitting peers join that incident. The slowed NIC is the model's alone."""
    plain = replay_trace(traces["outliers"], Pipeline())
    assert {(a.kind, a.root.device) for a in plain.anomalies if a.status == "firing"} == {
        ("link_corruption", "h009/mlx5_0")
    }

    result = replay(traces["outliers"], model)
    score = result.evaluation()
    assert score.false_alerts == 0
    for kind in ("outlier", "link_corruption"):
        assert score.kinds[kind].recall == score.kinds[kind].localisation == 1.0, kind
        assert score.kinds[kind].precision == 1.0, kind  # the peers that retransmit are the link's echo
    assert max(score.kinds["outlier"].delays_s) <= 3 * 1.0 + 0.5  # persistence: 3 polls of 1 s

    alerts = firing(result)
    lossy = alerts[("h009/mlx5_0", "1")]  # the label's root: found at the right device
    assert lossy.kind == "link_corruption" and lossy.evidence["ends"] == "both"
    *_, last = (a for a in result.anomalies if a.fingerprint == lossy.fingerprint and a.status == "updated")
    assert last.evidence["retransmitting_peers"] == "h001, h017"  # joined as they start retransmitting
    assert "its peers retransmit (h001, h017)" in last.summary
    # The slowed NIC's own counters (ECN 4% of what it receives at half its rate) look like the
    # baseline's congestion victims; the leaf port in front of it queues on a half-idle line,
    # which no healthy port does. Stage 2 roots a host link's outlier at the NIC behind it.
    slowed = alerts[("h010/mlx5_0", "1")]
    assert slowed.kind == "outlier" and slowed.evidence["features"].startswith("queue_delay*idle_tx")
    assert set(alerts) == {("h009/mlx5_0", "1"), ("h010/mlx5_0", "1")}
    assert {lb.root.device for lb in result.pipeline.labels} == {"h009/mlx5_0", "h010/mlx5_0"}
    assert all(i.end_ns < result.last_ns for i in incidents_of(result.anomalies))  # and they resolve


def test_quiet_on_the_held_out_baseline_and_on_benign_traffic(traces, model):
    for name in ("baseline", "benign"):
        result = replay(traces[name], model)
        # Their heavy AllReduces run links hot, their bursts fill queues: findings, labelled, not outliers.
        found = [a for a in result.anomalies if not a.finding]
        assert found == [], (name, [a.summary for a in found])


def test_replay_learns_from_the_first_minutes_of_the_trace_itself(traces, capsys):
    assert main(["replay", str(traces["outliers"]), "--train-minutes", "3", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    events = [e for e in lines if e["type"] == "anomaly"]  # the trace has labels: a score line ends it
    roots = {(e["root"]["device"], e["root"].get("port")) for e in events if e["status"] == "firing"}
    assert {("h009/mlx5_0", "1"), ("h010/mlx5_0", "1")} <= roots


def nic_frame(ts_s: int, rx_errors_per_s: float = 0.0) -> RateFrame:
    """One poll of a NIC carrying a third of 400G, healthy but for its receive errors."""
    layout = Layout.of(tuple(NIC_TABLE.specs))
    values = np.zeros((1, len(layout.counters)))
    for name, rate in (("tx_bytes", 16e9), ("rx_bytes", 16e9), ("tx_packets", 4e6), ("rx_packets", 4e6)):
        values[0, layout.col(name)] = rate
    values[0, layout.col("rx_errors")] = rx_errors_per_s
    return RateFrame("h000/mlx5_0", "nic", ts_s * 10**9, 1.0, ["1"], layout, values)


def test_one_spike_pages_nobody_three_do_and_the_clearing_is_said_once(model):
    detector = OutlierDetector(model, OutlierConfig(persist_polls=3, window_polls=4))
    line = np.array([50e9])
    pattern = [0, 0, 400, 0, 0, 0, 400, 400, 400, 400, 0, 0, 0, 0, 0]
    seen = []
    for t, errors in enumerate(pattern):
        detector.update(nic_frame(t, errors), line, None)
        seen.append([(s.active, s.evidence["features"]) for s in detector.flush()])
    assert seen[:8] == [[]] * 8  # the lone spike at t=2, and the first two of the run, page nobody
    assert all(len(s) == 1 and s[0][0] for s in seen[8:13])  # active from the third, re-emitted each poll
    assert "rx_errors/rx_packets 99 ppm (baseline max 0)" in seen[8][0][1]
    assert [active for active, _ in seen[13]] == [False]  # a whole clean window (t=10..13): cleared
    assert seen[14] == []  # once


def test_save_and_load_give_identical_scores_and_thresholds(model, tmp_path):
    path = tmp_path / "again.fwm"
    model.save(path)
    again = OutlierModel.load(path)
    assert again.thresholds(0.999) == model.thresholds(0.999)
    rng = np.random.default_rng(3)
    for name, m in model.classes.items():
        X = m.prepare(
            np.abs(rng.normal(size=(500, len(FEATURES[("nic" if name == "nic" else "switch")])))) * 4
        )
        (s1, a1), (s2, a2) = m.score(X), again.classes[name].score(X)
        assert np.array_equal(s1, s2) and np.array_equal(a1, a2)


def test_forest_scores_are_scikit_learns_and_survive_the_file():
    from sklearn.ensemble import IsolationForest

    rng = np.random.default_rng(4)
    fitted = IsolationForest(n_estimators=50, max_samples=128, random_state=0).fit(
        rng.normal(size=(2000, 6)).astype(np.float32)
    )
    X = np.abs(rng.normal(size=(300, 6))) * 3
    forest = Forest.of(fitted)
    assert np.allclose(forest(X), -fitted.score_samples(X.astype(np.float32)), rtol=0, atol=1e-12)
    again = Forest.from_arrays(forest.arrays("c"), "c")
    assert np.array_equal(again(X), forest(X))


def rewrite_meta(src: Path, dst: Path, change: Callable[[dict], object]) -> None:
    with zipfile.ZipFile(src) as z:
        meta, forests = json.loads(z.read("meta.json")), z.read("forests.npz")
    change(meta)
    with zipfile.ZipFile(dst, "w") as z:
        z.writestr("meta.json", json.dumps(meta))
        z.writestr("forests.npz", forests)


class _RunsACommand:
    """What a crafted pickle does when loaded: here, touch a file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_crafted_model_file_runs_no_code(model_path, tmp_path):
    marker = tmp_path / "ran"
    payload = pickle.dumps({"nic": _RunsACommand(marker)})
    old = tmp_path / "v1.fwm"  # an earlier build's format: meta.json + forests.pkl
    with zipfile.ZipFile(model_path) as z:
        meta = json.loads(z.read("meta.json"))
    with zipfile.ZipFile(old, "w") as z:
        z.writestr("meta.json", json.dumps(meta | {"format_version": 1}))
        z.writestr("forests.pkl", payload)
    with pytest.raises(ModelError, match=r"format v1.*pickle.*retrain it with `fabricwatch train`"):
        OutlierModel.load(old)
    crafted = tmp_path / "crafted.fwm"  # the current format, its arrays replaced by an object array
    objects = io.BytesIO()
    np.save(objects, np.array([_RunsACommand(marker)], dtype=object), allow_pickle=True)
    with zipfile.ZipFile(crafted, "w") as z:
        z.writestr("meta.json", json.dumps(meta))
        with z.open("forests.npz", "w") as inner, zipfile.ZipFile(inner, "w") as npz:
            npz.writestr("nic/shape.npy", objects.getvalue())
    with pytest.raises(ModelError, match="not a fabricwatch outlier model"):
        OutlierModel.load(crafted)
    for command in (
        ["replay", "x.trace", "--model", str(old)],
        ["evaluate", "x.yaml", "--model", str(crafted)],
    ):
        assert main(command) == 2
    assert not marker.exists()


def test_a_model_whose_meta_nests_100000_deep_is_refused_with_the_reason(tmp_path):
    """Found (issue 33, 8): a RecursionError traceback, not a refusal that says why."""
    deep = tmp_path / "deep.model"
    with zipfile.ZipFile(deep, "w") as z:
        z.writestr("meta.json", "[" * 100_000 + "]" * 100_000)
    with pytest.raises(
        ModelError, match=r"deep\.model: not a fabricwatch outlier model \(meta.json nested too deeply\)"
    ):
        OutlierModel.load(deep)


def test_a_damaged_tree_is_refused_before_it_is_walked(model, tmp_path):
    arrays = model.classes["nic"].forest.arrays("nic")
    nodes = arrays["nic/0/nodes"].copy()
    nodes["left_child"][0] = 10**9
    arrays["nic/0/nodes"] = nodes
    with pytest.raises(ValueError, match="nic tree 0: node 0 has a left_child out of range"):
        Forest.from_arrays(arrays, "nic")


def test_a_model_this_code_cannot_score_is_refused_by_name(model_path, tmp_path):
    bad = tmp_path / "bad.fwm"
    rewrite_meta(model_path, bad, lambda m: m["classes"]["nic"]["features"].__setitem__(0, "rx_gremlins/pkt"))
    with pytest.raises(
        ModelError, match=r"class nic: features this fabricwatch does not compute: rx_gremlins"
    ):
        OutlierModel.load(bad)
    rewrite_meta(model_path, bad, lambda m: m.update(format_version=99))
    with pytest.raises(ModelError, match=r"v99.*retrain it with `fabricwatch train`"):
        OutlierModel.load(bad)
    rewrite_meta(model_path, bad, lambda m: m.update(sklearn_version="0.24.2"))
    with pytest.raises(ModelError, match=r"scikit-learn 0\.24\.2"):
        OutlierModel.load(bad)
    assert main(["replay", str(tmp_path / "missing.trace"), "--model", str(bad)]) == 2
