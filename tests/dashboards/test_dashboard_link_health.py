"""The link-health dashboard on a store filled from a SONiC switch: COUNTERS_DB in a real
redis-server, polled by the switch collector, run through the in-process pipeline into chdb. The
simulator has no FEC, CRC, priority-group watermark or PFC watchdog counters, so the demo's store
cannot show this dashboard (``test_dashboards.py`` checks the others on it)."""

from __future__ import annotations

import shutil
import time

import pytest
from helpers.dashboard_queries import DASHBOARDS, INTERVAL_S, resolve_variables, run_panel, stored_span

from fabricwatch.dashboards.macros import QueryContext, expand
from fabricwatch.detectors.pipeline import Pipeline
from fabricwatch.ingest.simulator.sonic_db import SwitchDb
from fabricwatch.ingest.sonic.switch import COUNTERS_DB, SonicSwitch
from fabricwatch.local.redis_server import redis_server
from fabricwatch.schemas.messages import encode
from fabricwatch.schemas.topics import COUNTERS
from fabricwatch.storage.recorder import PipelineRecorder
from fabricwatch.storage.sink import Sink
from fabricwatch.storage.store import Store

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed"),
]
UID = "fw-link-health"
POLLS = 10
"""Polls of the switch, each after one refresh of its counters: on Ethernet4 5 CRC errors, 2
uncorrectable and 1,000 corrected FEC codewords; on Ethernet8's queue 3 a PFC watchdog storm
(detected once) dropping 500 packets, and 64,000 bytes dropped; on Ethernet12's priority group 3,
7 ingress drops and its watermarks set."""


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with redis_server() as url:
        switch = SwitchDb(url, ports=4)
        groups = ("PORT", "QUEUE", "PG_DROP", "QUEUE_WATERMARK", "PG_WATERMARK")
        switch.schedule(dict.fromkeys(groups, 100), pfcwd_ms=100)
        collector = SonicSwitch("leaf-7", f"{url}/{COUNTERS_DB}", timeout_s=2, warn=lambda _: None)
        filled = Store.open(tmp_path_factory.mktemp("link-health") / "store")
        pipeline = Pipeline()
        recorder = PipelineRecorder(pipeline, Sink(filled))

        def poll() -> None:
            snap = collector.read(0.2)
            recorder.on_anomalies(pipeline.feed(COUNTERS, snap.ts_ns, encode(snap)))

        poll()
        for i in range(POLLS):
            time.sleep(0.2)
            port = {
                "SAI_PORT_STAT_ETHER_STATS_CRC_ALIGN_ERRORS": 5,
                "SAI_PORT_STAT_IF_IN_FEC_NOT_CORRECTABLE_FRAMES": 2,
                "SAI_PORT_STAT_IF_IN_FEC_CORRECTABLE_FRAMES": 1000,
            }
            queue = {
                "PFC_WD_QUEUE_STATS_DEADLOCK_DETECTED": int(i == 0),
                "PFC_WD_QUEUE_STATS_TX_DROPPED_PACKETS": 500,
                "SAI_QUEUE_STAT_DROPPED_BYTES": 64_000,
            }
            pg = {"SAI_INGRESS_PRIORITY_GROUP_STAT_DROPPED_PACKETS": 7}
            switch.advance({"Ethernet4": port, "Ethernet8:3": queue, "pg:Ethernet12:3": pg})
            marks = {
                "SAI_INGRESS_PRIORITY_GROUP_STAT_XOFF_ROOM_WATERMARK_BYTES": 90_000 + i,
                "SAI_INGRESS_PRIORITY_GROUP_STAT_SHARED_WATERMARK_BYTES": 400_000 + i,
            }
            switch.advance({"pg:Ethernet12:3": marks}, set_values=True)
            poll()
        recorder.on_anomalies(pipeline.finish())
        recorder.finish()
        switch.close()
    yield filled
    filled.close()


def panel(store, title_start: str) -> list[tuple]:
    """The rows of the panel whose title starts so, everything selected."""
    title = next(p["title"] for p in DASHBOARDS[UID]["panels"] if p["title"].startswith(title_start))
    return run_panel(store, stored_span(store), UID, title)


@pytest.mark.parametrize("pick_all", [True, False])
def test_every_panel_shows_the_switch(store, pick_all):
    """Each panel lists leaf-7, with "All" selected or the first device and kind; the template
    variables list what the store holds."""
    dash = DASHBOARDS[UID]
    span = stored_span(store)
    chosen, options = resolve_variables(store, dash, span, pick_all=pick_all)
    assert options["device"] == ["leaf-7"] and options["device_kind"] == ["switch"]
    ctx = QueryContext(*span, INTERVAL_S, chosen, options)
    for p in dash["panels"]:
        rows = store.query(expand(p["targets"][0]["rawSql"], ctx))
        assert rows and all("leaf-7" in str(r[:2]) for r in rows), p["title"]


def test_link_errors_are_counted_on_the_port_that_had_them(store):
    errors = panel(store, "Ports with link errors")
    assert [r[:2] for r in errors] == [("leaf-7", "Ethernet4")]
    crc, _, uncorrectable, _, corrected, _ = errors[0][2:]
    assert (crc, uncorrectable, corrected) == pytest.approx((5 * POLLS, 2 * POLLS, 1000 * POLLS))
    lost = panel(store, "Frames lost on the wire")
    assert {r[1] for r in lost} == {"leaf-7:Ethernet4"} and max(r[2] for r in lost) > 0


def test_the_pfc_watchdog_storm_and_its_drops(store):
    (row,) = panel(store, "PFC watchdog: storms")
    assert row[:2] == ("leaf-7", "Ethernet8") and row[2:4] == pytest.approx((1, 500 * POLLS))
    assert {r[1] for r in panel(store, "Packets dropped by the PFC watchdog")} == {"leaf-7:Ethernet8"}


def test_drops_and_priority_group_watermarks(store):
    marks = panel(store, "Ingress priority groups")
    assert {r[1] for r in marks} == {"leaf-7:Ethernet12"}
    assert max(r[2] for r in marks) == 90_000 + POLLS - 1
    assert max(r[3] for r in marks) == 400_000 + POLLS - 1
    drops = panel(store, "Drops: bytes from egress queues")
    assert {r[1] for r in drops} == {"leaf-7:Ethernet8", "leaf-7:Ethernet12"}
    sql = "SELECT sum(queue_dropped_bps * dt_s) / 8, sum(pg_drops_pps * dt_s) FROM rates_raw"
    (counted,) = store.query(sql)
    assert counted == pytest.approx((64_000 * POLLS, 7 * POLLS))


def test_the_link_health_incidents_name_their_port_and_cause(store):
    """Ethernet4's CRC errors are a link corruption incident; Ethernet12's priority group 3
    dropping is packet loss on a lossless class (SONiC's default lossless priorities are 3 and 4)."""
    rows = panel(store, "Link health incidents")
    found = {(r[0], r[1], r[2]): r for r in rows}
    assert ("leaf-7", "Ethernet4", "link_corruption") in found
    loss = found[("leaf-7", "Ethernet12", "packet_loss")]
    assert loss[3] == "critical" and loss[6] == "lossless_class" and loss[7] == ""
