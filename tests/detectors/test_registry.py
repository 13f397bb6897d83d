"""A detector is one module and one registration: what it declares (``detectors/spec.py``) is all
stage 1, stage 2, the evaluation and the report need. Shown with a toy detector that lives only
here: registered, its incident fires on the demo with its hint and root, the evaluation scores its
kind and the report colours it; and a registry that does not fit together is refused at once."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from helpers.streaming import topology_and_snapshots

import fabricwatch.detectors
from fabricwatch.alerts.config import parse_alerts
from fabricwatch.alerts.receiver import WebhookReceiver
from fabricwatch.alerts.service import AlertService
from fabricwatch.dashboards.charts import kind_colour
from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.detectors.registry import REGISTRY, Registry, RegistryError
from fabricwatch.detectors.spec import Detector, IncidentKind, Poll, SymptomKind
from fabricwatch.detectors.stage1 import Stage1
from fabricwatch.evaluate import rule_kinds
from fabricwatch.replay import replay_trace
from fabricwatch.schemas.messages import Anomaly, RootCause, Snapshot, Symptom, Topology, decode, encode
from fabricwatch.storage.sink import Sink
from fabricwatch.storage.store import Store
from fabricwatch.suite_report import Thresholds


class Busy:
    """Toy: a NIC port sending at more than 30 % of its line rate in this poll."""

    def __init__(self) -> None:
        self._open: set[tuple[str, str]] = set()

    def open(self, device: str) -> bool:
        return any(d == device for d, _ in self._open)

    def update(self, poll: Poll) -> list[Symptom]:
        frame = poll.frame
        tx = frame.port("tx_bytes")
        if tx is None:
            return []
        out = []
        for port, rising in zip(frame.ports, tx > 0.3 * poll.line_Bps, strict=True):
            key = (frame.device, port)
            if bool(rising) != (key in self._open):
                (self._open.add if rising else self._open.discard)(key)
                out.append(Symptom("toy_busy", frame.device, frame.ts_ns, frame.ts_ns, bool(rising), port))
        return out


def _describe(d, incident, group, latest, active) -> None:
    incident.summary = f"toy: {incident.root.device} {incident.root.port} sends at over 30 % of its rate"


TOY_KIND = IncidentKind(
    name="toy_busy_nic",
    title="Toy busy NIC",
    colour="tab:cyan",
    hint="toy hint: nothing to do, it is training",
    describe=_describe,
    delay_bound_s=lambda poll_s, config, severity: 3 * poll_s,
    delay="3 polls",
)


def toy(signals: frozenset[str] | None = frozenset({"tx_bytes"})) -> Detector:
    return Detector(
        name="toy",
        symptoms=(
            SymptomKind("toy_busy", "toy_busy_nic", lambda pl, key, sym: RootCause(sym.device, sym.port)),
        ),
        incidents=(TOY_KIND,),
        device_kinds=frozenset({"nic"}),
        make=lambda config: Busy(),
        signals=signals,
    )


def test_a_registered_toy_detector_fires_with_its_hint_and_root_is_scored_and_coloured(demo_trace):
    assert "toy_busy_nic" not in rule_kinds()
    with REGISTRY.added(toy()):
        anomalies = replay_trace(demo_trace, Pipeline()).anomalies
        assert "toy_busy_nic" in rule_kinds()
        assert kind_colour("toy_busy_nic") == "tab:cyan"
        assert Thresholds.delay_bound_s("toy_busy_nic", 0.5, DetectorConfig()) == 1.5
    fired = [a for a in anomalies if a.kind == "toy_busy_nic" and a.status == "firing"]
    assert fired, sorted({a.kind for a in anomalies})
    assert all(a.hint == TOY_KIND.hint for a in fired)
    assert all("/mlx5_" in a.root.device and a.root.port for a in fired)  # a NIC port, as its rule roots it
    assert all(a.summary.startswith("toy: ") for a in fired)
    without = replay_trace(demo_trace, Pipeline()).anomalies
    assert [(a.kind, a.root, a.status) for a in anomalies if a.kind != "toy_busy_nic"] == [
        (a.kind, a.root, a.status) for a in without
    ]  # the shipped detectors' incidents, unchanged beside it
    assert "toy_busy_nic" not in rule_kinds()  # gone with the registration
    assert kind_colour("toy_busy_nic") == "tab:gray"


def _one_by_one_and_batched(
    registry: Registry, topology: Topology, snaps: list[Snapshot]
) -> tuple[list, list]:
    one, many = Stage1(registry=registry), Stage1(registry=registry)
    one.set_topology(topology)
    many.set_topology(topology)
    expected = [symptoms for _, symptoms in (one.process(s) for s in snaps)]
    got = [
        symptoms for i in range(0, len(snaps), 500) for _, symptoms in many.process_batch(snaps[i : i + 500])
    ]
    return expected, got


def test_the_calm_poll_skip_follows_the_declared_signals_and_a_wrong_declaration_shows(demo_trace):
    """The batch path skips a NIC's poll that shows none of its detectors' declared signals. The
    toy declares what it reads (``tx_bytes``): both paths agree. Declared as reading ``link_downed``, the
    batch path skips the polls on which it would have fired: the disagreement this check exists
    to catch, for every shipped detector as for this one."""
    topology, snaps = topology_and_snapshots(demo_trace)
    snaps = snaps[:3000]
    with REGISTRY.added(toy()):
        expected, got = _one_by_one_and_batched(REGISTRY, topology, snaps)
    assert any(s.kind == "toy_busy" for symptoms in expected for s in symptoms)
    assert got == expected
    with REGISTRY.added(toy(frozenset({"link_downed"}))):
        expected, got = _one_by_one_and_batched(REGISTRY, topology, snaps)
    assert got != expected
    shipped_expected, shipped_got = _one_by_one_and_batched(REGISTRY, topology, snaps)
    assert shipped_got == shipped_expected


def test_a_detector_that_reads_every_poll_stops_its_device_kind_being_skipped():
    with REGISTRY.added(toy(signals=None)):
        assert REGISTRY.calm_signals("nic") is None
    assert REGISTRY.calm_signals("nic") == frozenset(
        {"rx_pfc_frames", "rx_pfc_duration_us", "tx_pfc_duration_us", "pause_storm_warning_events"}
        | {"rx_ecn_marked_packets", "cnp_sent", "cnp_received"}
        | {"rx_crc_errors", "rx_errors", "fec_uncorrectable_blocks"}
        | {"oper_down", "link_downed", "carrier_changes"}
        | {"pg_drops", "rx_prio_discards", "queue_drops", "rx_discards", "tx_discards"}
        | {"out_of_sequence", "packet_seq_err", "implied_nak_seq_err", "local_ack_timeout_err"}
        | {"pcie_stall_read_seconds", "pcie_stall_write_seconds"}
        | {"rx_buffer_passed_thres"}
    )  # the paced detectors' gauges and ever-moving counters (FEC corrected bits) are not among them
    assert REGISTRY.calm_signals("switch") is None  # incast and ECMP read every switch poll


def test_half_declared_detectors_are_refused_with_the_detector_named():
    lost = Detector(name="lost", symptoms=(SymptomKind("lost_cnp", "nowhere", lambda pl, k, s: None),))
    with pytest.raises(RegistryError, match="'lost': symptom 'lost_cnp' joins incident kind 'nowhere'"):
        Registry([*REGISTRY.detectors, lost])
    rootless = Detector(name="rootless", symptoms=(SymptomKind("r", "toy_busy_nic"),), incidents=(TOY_KIND,))
    with pytest.raises(RegistryError, match="'rootless': symptom 'r' makes incidents but has no root rule"):
        Registry([rootless])
    unknown = Detector(
        name="typo",
        device_kinds=frozenset({"nic"}),
        make=lambda c: Busy(),
        signals=frozenset({"cnp_recieved"}),
    )
    unpaced = Detector(name="unpaced", device_kinds=frozenset({"nic"}), make=lambda c: Busy(), records=True)
    with pytest.raises(RegistryError, match="'unpaced': records every poll but is not paced"):
        Registry([unpaced])
    with pytest.raises(RegistryError, match=r"'typo': signals \['cnp_recieved'\] are not counters"):
        Registry([unknown])
    with pytest.raises(RegistryError, match="'toy' is registered twice"):
        Registry([toy(), toy()])
    with pytest.raises(RegistryError):
        REGISTRY.register(Detector(name="pfc_watchdog"))
    assert "pfc_storm" in REGISTRY.incidents  # a refused registration changes nothing


def test_every_declared_detector_is_registered():
    """A module that declares a detector and is left out of ``registry.DETECTORS`` runs nowhere."""
    declared = []
    for info in pkgutil.walk_packages(fabricwatch.detectors.__path__, "fabricwatch.detectors."):
        module = importlib.import_module(info.name)
        declared += [v for v in vars(module).values() if isinstance(v, Detector)]
    assert declared
    assert {id(d) for d in declared} <= {id(d) for d in REGISTRY.detectors}


def test_every_shipped_kind_says_what_a_user_sees():
    from matplotlib.colors import is_color_like

    for kind in REGISTRY.incidents.values():
        assert kind.title and kind.hint and kind.describe
        assert is_color_like(kind.colour), kind.name
    assert rule_kinds() == {
        "pfc_storm",
        "incast",
        "ecmp_collapse",
        "device_silent",
        "link_corruption",
        "link_down",
        "packet_loss",
        "rdma_retransmission",
        "link_degrading",
        "slow_link",
        "nic_host_bound",
        "optics_out_of_range",
        "job_slowdown",
        "job_straggler",
        "job_hang",
        "capacity",
        "microbursts",
        "rhythm",
    }
    assert REGISTRY.kinds(needs_model=True) == {"outlier"}


def test_a_kind_this_build_does_not_know_is_stored_and_delivered(tmp_path):
    """A rolling upgrade: workers of a newer release find a kind this sink and alerter have never
    heard of. Read off the wire as they read it, it is stored and goes out as a webhook."""
    newer = Anomaly(
        fingerprint="f-newer",
        kind="link_flap",
        severity="critical",
        status="firing",
        start_ns=1_800_000_000 * 10**9,
        ts_ns=1_800_000_001 * 10**9,
        root=RootCause("leaf3", "Ethernet12"),
        summary="link leaf3 Ethernet12 went down 5 times in 60 s",
        hint="reseat or replace the optic",
    )
    assert "link_flap" not in REGISTRY.incidents
    wire = decode(encode(newer), Anomaly)
    with Store.open(str(tmp_path / "store")) as store:
        with Sink(store) as sink:
            sink.add(wire)
        assert store.query("SELECT kind, summary FROM anomalies_latest FINAL") == [
            ("link_flap", newer.summary)
        ]
    assert kind_colour("link_flap") == "tab:gray"

    with WebhookReceiver() as rx:
        route = {"receiver": "rx", "group_by": ["kind"], "group_wait": 0, "group_interval": "1s"}
        service = AlertService(
            parse_alerts({"receivers": [{"name": "rx", "url": rx.url}], "route": route}, environ={}),
            wall=False,
        )
        service.ingest(wire, now=1_800_000_001.0)
        service.flush_all(1_800_000_010.0)
        assert service.drain(10)
        service.close()
    [alert] = [a for r in rx.accepted for a in r.body["alerts"]]
    assert alert["labels"]["kind"] == "link_flap" and alert["annotations"]["remediation"] == newer.hint
