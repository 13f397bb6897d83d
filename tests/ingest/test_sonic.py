"""The SONiC collector against a real redis-server holding COUNTERS_DB and CONFIG_DB content in the
shape of sonic-utilities' mock tables: values read exactly, rates equal to the counters' deltas,
slow refreshes read as unknown (never zero), reboots and breakouts, garbage answers."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import redis
from helpers.paths import FIXTURES
from helpers.snapshots import cell
from helpers.waiting import wait_for

from fabricwatch.detectors.rates import RateEngine
from fabricwatch.ingest.lldp.fabric import SiteSettings
from fabricwatch.ingest.simulator.sonic_db import SwitchDb
from fabricwatch.ingest.sonic.phy import PhyReader
from fabricwatch.ingest.sonic.switch import COUNTERS_DB, SonicSwitch, SwitchError
from fabricwatch.ingest.sonic.topology import TopologyWatch
from fabricwatch.local.broker import free_port
from fabricwatch.local.redis_server import redis_server

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed"),
]
FAST = {"PORT": 100, "QUEUE": 100, "PG_DROP": 100, "QUEUE_WATERMARK": 100, "PG_WATERMARK": 100}


@pytest.fixture(scope="module")
def server():
    with redis_server() as url:
        yield url


@pytest.fixture
def db(server):
    switch = SwitchDb(server, ports=4)
    switch.config.flushdb()
    switch.schedule(FAST, pfcwd_ms=100)
    yield switch
    switch.close()


def collector(url: str, said: list[str] | None = None) -> SonicSwitch:
    said = said if said is not None else []
    return SonicSwitch("leaf-1", f"{url}/{COUNTERS_DB}", timeout_s=2, warn=said.append)


def test_port_states_come_from_appl_db_and_a_port_it_does_not_know_is_unknown(server):
    """sonic-utilities' APPL_DB mock ``PORT_TABLE`` (Ethernet0: oper_status down, admin_status up;
    ``tests/fixtures/SOURCES.md``) beside its COUNTERS_DB mock: Ethernet0 reads down and enabled;
    Ethernet4 and Ethernet8, which that APPL_DB does not hold, read unknown, never up. A PORT_TABLE
    entry that is not a hash costs the states of that poll only, said once; the counters go on."""
    load_upstream_counters(server)
    appl = redis.Redis.from_url(server, db=0)
    appl.flushdb()
    for key, fields in json.loads(
        (FIXTURES / "sonic_appl_db_port_table_upstream_mock.json").read_text()
    ).items():
        appl.hset(key, mapping=fields)
    said: list[str] = []
    switch = collector(server, said)
    snap = switch.read(1.0)
    assert cell(snap, "Ethernet0", "oper_down") == 1 and cell(snap, "Ethernet0", "admin_down") == 0
    assert cell(snap, "Ethernet4", "oper_down") is None and cell(snap, "Ethernet8", "admin_down") is None
    appl.delete("PORT_TABLE:Ethernet4")
    appl.set("PORT_TABLE:Ethernet4", "garbage")
    for _ in range(2):
        snap = switch.read(1.0)
        assert (
            "oper_down" not in {c.name for c in snap.counters} and cell(snap, "Ethernet0", "rx_bytes") == 800
        )
    assert sum("APPL_DB unreadable" in s for s in said) == 1
    appl.flushdb()
    appl.close()


def test_speeds_and_optics_come_from_state_db_in_the_vocabularys_units(server):
    """sonic-utilities' STATE_DB mock (``tests/fixtures/SOURCES.md``): Ethernet0's ``PORT_TABLE``
    speed 100000 Mb/s and its module's readings (received power in dBm per lane, bias in mA,
    temperature in degrees C) and thresholds; Ethernet8's 8-lane module. A port STATE_DB does not
    hold reads unknown; a key that is not a hash costs that port's speed and optics only, said
    once; a STATE_DB that does not answer costs every port's, said once; the counters go on."""
    load_upstream_counters(server)
    state = redis.Redis.from_url(server, db=6)
    state.flushdb()
    mock = json.loads((FIXTURES / "sonic_state_db_transceiver_dom_upstream_mock.json").read_text())
    for key, fields in mock.items():
        state.hset(key, mapping=fields)
    said: list[str] = []
    snap = collector(server, said).read(1.0)
    assert cell(snap, "Ethernet0", "link_speed_mbps") == 100_000
    assert cell(snap, "Ethernet0", "optic_rx_power_nw") == 893_902  # rx2power -0.4871 dBm, its weakest
    assert cell(snap, "Ethernet0", "optic_rx_power_low_alarm_nw") == 44_600  # -13.5067 dBm
    assert (
        cell(snap, "Ethernet0", "optic_bias_ua") == 6_750
        and cell(snap, "Ethernet0", "optic_temperature_mc") == 30_926
    )
    assert cell(snap, "Ethernet0", "optic_tx_power_nw") is None  # "N/A" in every lane
    assert (
        cell(snap, "Ethernet8", "optic_rx_power_nw") == 5_100
    )  # rx3power -22.9243 dBm: a lane that receives is lit, its own laser off or not
    assert cell(snap, "Ethernet8", "optic_bias_ua") == 17_476  # past its high alarm, 14.996 mA
    assert cell(snap, "Ethernet4", "link_speed_mbps") is None
    state.delete("PORT_TABLE|Ethernet0")
    state.set("PORT_TABLE|Ethernet0", "garbage")
    switch = collector(server, said)
    for _ in range(2):
        snap = switch.read(1.0)
        assert (
            cell(snap, "Ethernet0", "link_speed_mbps") is None and cell(snap, "Ethernet0", "rx_bytes") == 800
        )
        assert cell(snap, "Ethernet8", "optic_bias_ua") == 17_476  # the other ports' go on
    assert sum("STATE_DB Ethernet0: a key that is not a hash" in s for s in said) == 1
    switch = SonicSwitch("leaf-1", f"{server}/{COUNTERS_DB}", timeout_s=2, warn=said.append)
    switch._phy = PhyReader(redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.5))
    for _ in range(2):
        snap = switch.read(1.0)
        assert (
            "link_speed_mbps" not in {c.name for c in snap.counters}
            and cell(snap, "Ethernet0", "rx_bytes") == 800
        )
    assert sum("STATE_DB unreadable" in s for s in said) == 1
    state.flushdb()
    state.close()


def load_upstream_counters(server: str) -> dict:
    """sonic-utilities' COUNTERS_DB mock into the server's database 2, and no CONFIG_DB."""
    tables = json.loads((FIXTURES / "sonic_counters_db_upstream_mock.json").read_text())
    client = redis.Redis.from_url(server, db=COUNTERS_DB)
    client.flushdb()
    pipe = client.pipeline(transaction=False)
    for key, value in tables.items():
        if isinstance(value, dict) and value:
            pipe.hset(key, mapping=value)
    pipe.execute()
    redis.Redis.from_url(server, db=4).flushdb()
    return tables


def test_the_upstream_mock_counters_db_reads_exactly(server):
    """sonic-utilities' own COUNTERS_DB mock, loaded as is: Ethernet0's port hash, its queues and
    PGs, and the PFC watchdog's counters come out under their canonical names."""
    tables = load_upstream_counters(server)
    said: list[str] = []
    snap = collector(server, said).read(1.0)
    port, queue, pg = (
        tables["COUNTERS:" + tables[name_map]["Ethernet0:3" if "PORT" not in name_map else "Ethernet0"]]
        for name_map in ("COUNTERS_PORT_NAME_MAP", "COUNTERS_QUEUE_NAME_MAP", "COUNTERS_PG_NAME_MAP")
    )
    assert cell(snap, "Ethernet0", "rx_bytes") == int(port["SAI_PORT_STAT_IF_IN_OCTETS"]) == 800
    assert cell(snap, "Ethernet0", "rx_pfc_frames", 3) == int(port["SAI_PORT_STAT_PFC_3_RX_PKTS"])
    fec = port["SAI_PORT_STAT_IF_IN_FEC_CORRECTABLE_FRAMES"]
    assert cell(snap, "Ethernet0", "fec_corrected_blocks") == int(fec)
    marked = queue["SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS"]
    assert cell(snap, "Ethernet0", "queue_ecn_marked_packets", 3) == int(marked)
    storms = queue["PFC_WD_QUEUE_STATS_DEADLOCK_DETECTED"]
    assert cell(snap, "Ethernet0", "pfcwd_storms_detected", 3) == int(storms)
    drops = pg["SAI_INGRESS_PRIORITY_GROUP_STAT_DROPPED_PACKETS"]
    assert cell(snap, "Ethernet0", "pg_drops", 3) == int(drops)
    assert snap.device_kind == "switch" and snap.ports[:3] == ["Ethernet0", "Ethernet4", "Ethernet8"]
    assert any("defaults" in s for s in said)  # this Redis has no CONFIG_DB: it says what it assumed
    names = {c.name for c in snap.counters}
    assert "tx_pfc_duration_us" not in names  # never in this DB: not asked for again, no empty column


def test_rates_equal_the_counters_deltas(db):
    sw, engine = collector(db.url), RateEngine()
    engine.update(sw.read(0.1))
    db.advance(
        {
            "Ethernet4": {"SAI_PORT_STAT_IF_OUT_OCTETS": 5_000_000, "SAI_PORT_STAT_PFC_3_RX_PKTS": 1234},
            "Ethernet4:3": {"SAI_QUEUE_STAT_WRED_ECN_MARKED_PACKETS": 777, "SAI_QUEUE_STAT_BYTES": 400_000},
            "pg:Ethernet4:3": {"SAI_INGRESS_PRIORITY_GROUP_STAT_DROPPED_PACKETS": 9},
        }
    )
    db.advance({"Ethernet4:3": {"SAI_QUEUE_STAT_SHARED_WATERMARK_BYTES": 600_000}}, set_values=True)
    snap = sw.read(0.1)
    frame = engine.update(snap)
    row = frame.ports.index("Ethernet4")

    def counted(name: str, index: int | None = None) -> float:
        return frame.values[row, frame.layout.col(name, index)] * frame.dt_s

    assert counted("tx_bytes") == pytest.approx(5_000_000)
    assert counted("rx_pfc_frames", 3) == pytest.approx(1234)
    assert counted("queue_ecn_marked_packets", 3) == pytest.approx(777)
    assert counted("pg_drops", 3) == pytest.approx(9)
    assert frame.values[row, frame.layout.col("queue_watermark_bytes", 3)] == 600_000
    other = frame.ports.index("Ethernet0")
    assert frame.values[other, frame.layout.col("tx_bytes")] == 0.0


def test_a_group_read_faster_than_it_refreshes_is_unknown_never_zero(db):
    """Queues refresh every 10 s (the default), polled every second: polls where they have not
    moved are missing, and the rate engine gives the delta over the whole time since."""
    db.config.flushdb()
    db.schedule({"PORT": 100, "QUEUE": 10_000})
    sw, engine = collector(db.url), RateEngine()
    engine.update(sw.read(1.0))
    port_moves = {"Ethernet0": {"SAI_PORT_STAT_IF_OUT_OCTETS": 10}}
    db.advance({"Ethernet0:3": {"SAI_QUEUE_STAT_BYTES": 1000}, **port_moves})
    first = engine.update(sw.read(1.0))
    db.advance(port_moves)
    flat = sw.read(1.0)
    second = engine.update(flat)
    db.advance({"Ethernet0:3": {"SAI_QUEUE_STAT_BYTES": 3000}, **port_moves})
    third = engine.update(sw.read(1.0))
    col, row = first.layout.col("queue_tx_bytes", 3), first.ports.index("Ethernet0")
    assert cell(flat, "Ethernet0", "queue_tx_bytes", 3) is None  # repeated read: unknown
    assert cell(flat, "Ethernet0", "tx_bytes") == 20  # ports refresh every 100 ms: always read
    assert math.isnan(second.values[row, col])
    assert third.values[row, col] * (third.dt_s + second.dt_s) == pytest.approx(3000)
    assert sw.stats.stale_groups >= 1


def test_a_reboot_is_a_reset_and_new_object_ids_are_followed(db):
    sw, engine = collector(db.url), RateEngine()
    db.advance({"Ethernet0": {"SAI_PORT_STAT_IF_OUT_OCTETS": 10**12}})
    engine.update(sw.read(0.1))
    db.reboot()
    db.advance({"Ethernet0": {"SAI_PORT_STAT_IF_OUT_OCTETS": 1000}})
    frame = engine.update(sw.read(0.1))
    rate = frame.values[frame.ports.index("Ethernet0"), frame.layout.col("tx_bytes")]
    assert rate >= 0 and rate * frame.dt_s == pytest.approx(1000)
    assert engine.stats.port_resets >= 1
    assert sw.stats.map_reads == 2


def test_a_breakout_adds_ports_without_losing_the_others(db):
    sw = collector(db.url)
    assert len(sw.read(0.1).ports) == 4
    db.ports = 6
    db.load()
    assert sw.read(0.1).ports == [f"Ethernet{4 * i}" for i in range(6)]
    assert sw.stats.map_reads == 2


def test_bad_values_cost_only_themselves_and_are_said_once(db):
    said: list[str] = []
    sw = collector(db.url, said)
    sw.read(0.1)
    db.counters.hset("COUNTERS:" + db._oids["Ethernet4"], "SAI_PORT_STAT_IF_OUT_OCTETS", "15,437")
    db.counters.delete("COUNTERS:" + db._oids["Ethernet0:2"])
    db.counters.set("COUNTERS:" + db._oids["Ethernet0:2"], "not a hash")
    for _ in range(3):
        snap = sw.read(0.1)
    assert cell(snap, "Ethernet4", "tx_bytes") is None
    assert cell(snap, "Ethernet0", "tx_bytes") == 0
    assert cell(snap, "Ethernet0", "queue_tx_bytes", 2) is None
    assert cell(snap, "Ethernet0", "queue_tx_bytes", 3) == 0
    assert sw.stats.bad_values == 6
    assert len([s for s in said if "left out" in s]) == 2
    assert any("SAI_PORT_STAT_IF_OUT_OCTETS = '15,437': not a counter" in s for s in said), (
        said
    )  # not b'15,437'


def test_an_unreachable_or_garbage_speaking_switch_fails_its_poll_and_recovers(db):
    sw = collector(db.url)
    sw.read(0.1)
    dead = SonicSwitch("leaf-9", f"redis://127.0.0.1:{free_tcp_port()}/2", timeout_s=0.5, warn=lambda _: None)
    with pytest.raises(SwitchError, match=r"127\.0\.0\.1"):
        dead.read(0.1)
    db.counters.delete("COUNTERS_PORT_NAME_MAP")
    with pytest.raises(SwitchError, match="COUNTERS_PORT_NAME_MAP"):
        sw.read(0.1)
    db.load()
    assert sw.read(0.1).ports
    assert sw.stats.failures == 1


def free_tcp_port() -> int:
    from fabricwatch.local.broker import free_port

    return free_port()


def test_lldp_neighbours_and_port_speeds_are_read_from_appl_db(db):
    """lldp_syncd's LLDP_ENTRY_TABLE as two published examples show it, with portsyncd's speeds:
    the collector reports the switch's links (name from the description when the port id is a
    local alias), and says a switch whose APPL_DB it cannot read once."""
    appl = redis.Redis.from_url(db.url, db=0)
    appl.flushdb()
    for key, entry in json.loads((FIXTURES / "sonic_appl_db_lldp_entries.json").read_text()).items():
        appl.hset(key, mapping=entry)
    appl.hset("PORT_TABLE:Ethernet0", mapping={"speed": "400000", "admin_status": "up"})
    said: list[str] = []
    site = SiteSettings(spines=["spine*", "swi2-*"])
    switches = {"leaf-1": f"{db.url}/{COUNTERS_DB}", "leaf-9": f"redis://127.0.0.1:{free_tcp_port()}/2"}
    watch = TopologyWatch(switches, site, 60, 1, said.append)
    reports: list = []
    assert wait_for(lambda: reports.extend(watch.due()) or (reports and watch.failures), 10)
    again = watch.due()  # nothing changed (and the next read is not due): nothing sent again
    watch.close()
    appl.close()
    (report,) = reports
    assert report.source == "switch:leaf-1"
    assert sorted((link.a_port, link.b_device, link.b_port, link.speed_gbps) for link in report.links) == [
        ("Ethernet0", "spine01", "Ethernet1", 400.0),
        ("Ethernet120", "swi2-wdf4g-1", "Ethernet8", 400.0),
    ]
    assert report.ecmp_groups[0].members == ["Ethernet0", "Ethernet120"]
    assert again == [] and len([s for s in said if s.startswith("leaf-9")]) == 1


def test_a_server_that_answers_garbage_fails_its_poll_and_is_said(db):
    """Something on the switch's Redis port that does not speak RESP (a web server, a wrong port):
    that poll gives nothing, with the reason, and the next poll tries again; no exception escapes."""
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    stop = threading.Event()

    def answer_garbage() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.recv(4096)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            conn.close()

    server = threading.Thread(target=answer_garbage, daemon=True)
    server.start()
    port = listener.getsockname()[1]
    switch = SonicSwitch("leaf-7", f"redis://127.0.0.1:{port}/2", timeout_s=1, warn=lambda _: None)
    try:
        for _ in range(2):
            with pytest.raises(SwitchError, match=r"127\.0\.0\.1"):
                switch.read(0.1)
    finally:
        stop.set()
        server.join(timeout=5)
        listener.close()
    assert switch.stats.failures == 2 and switch.stats.snapshots == 0


def test_a_port_that_goes_down_reads_down_at_the_next_poll(db):
    switch = collector(db.url)
    first = switch.read(1.0)
    assert [cell(first, p, "oper_down") for p in first.ports] == [0, 0, 0, 0]
    db.set_state("Ethernet4", "oper_status", "down")
    db.set_state("Ethernet8", "admin_status", "down")
    second = switch.read(1.0)
    assert [cell(second, p, "oper_down") for p in second.ports] == [0, 1, 0, 0]
    assert [cell(second, p, "admin_down") for p in second.ports] == [0, 0, 1, 0]
