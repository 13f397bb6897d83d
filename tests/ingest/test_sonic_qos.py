"""A SONiC switch's ECN marking curves read from a real redis-server's CONFIG_DB, as sonic-utilities'
own mock tables hold them, carried in the switch's topology report to the incast detector."""

from __future__ import annotations

import json
import shutil

import pytest
import redis
from helpers.paths import FIXTURES
from helpers.waiting import wait_for

from fabricwatch.ingest.lldp.fabric import SiteSettings
from fabricwatch.ingest.sonic.qos import read_queue_profiles
from fabricwatch.ingest.sonic.switch import CONFIG_DB
from fabricwatch.ingest.sonic.topology import TopologyWatch
from fabricwatch.local.redis_server import redis_server

pytestmark = [
    pytest.mark.processes,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed"),
]
FIXTURE = FIXTURES / "sonic_config_db_wred_queues_upstream_mock.json"


@pytest.fixture(scope="module")
def server():
    with redis_server() as url:
        yield url


@pytest.fixture
def config_db(server):
    client = redis.Redis.from_url(server, db=CONFIG_DB)
    client.flushdb()
    for key, entry in json.loads(FIXTURE.read_text()).items():
        client.hset(key, mapping=entry)
    yield client
    client.close()


def test_the_lossless_queues_get_the_wred_profile_they_name(config_db):
    profiles = read_queue_profiles(config_db, "leaf-1")
    cells = {(p.port, p.queue) for p in profiles}
    assert ("Ethernet0", 3) in cells and ("Ethernet0", 4) in cells and ("Ethernet0", 0) not in cells
    assert len(cells) == len(profiles) == 2 * len({p.port for p in profiles}) > 2
    assert {(p.ecn_kmin_bytes, p.ecn_kmax_bytes, p.ecn_pmax) for p in profiles} == {(1048576, 2097152, 0.05)}


def test_ranges_port_lists_old_references_drop_only_and_broken_profiles(config_db):
    """What `config qos reload` and older images write: a queue range over a port list, a
    ``[WRED_PROFILE|name]`` reference; a drop-only profile marks nothing; a profile without its
    thresholds is named once and costs only the queues that use it."""
    config_db.flushdb()
    config_db.hset(
        "WRED_PROFILE|SHALLOW",
        mapping={
            "ecn": "ecn_all",
            "green_min_threshold": "51200",
            "green_max_threshold": "409600",
            "green_drop_probability": "20",
        },
    )
    config_db.hset(
        "WRED_PROFILE|DROPS",
        mapping={"ecn": "ecn_none", "green_min_threshold": "1", "green_max_threshold": "2"},
    )
    config_db.hset("WRED_PROFILE|BROKEN", mapping={"ecn": "ecn_all", "green_min_threshold": "51200"})
    config_db.hset("QUEUE|Ethernet0,Ethernet4|3-4", mapping={"wred_profile": "[WRED_PROFILE|SHALLOW]"})
    config_db.hset("QUEUE|Ethernet8|3", mapping={"wred_profile": "DROPS"})
    config_db.hset("QUEUE|Ethernet12|3", mapping={"wred_profile": "BROKEN"})
    config_db.hset("QUEUE|Ethernet16|x", mapping={"wred_profile": "SHALLOW"})
    said: list[str] = []
    profiles = read_queue_profiles(config_db, "leaf-1", said.append)
    assert sorted((p.port, p.queue, p.ecn_kmin_bytes, p.ecn_kmax_bytes, p.ecn_pmax) for p in profiles) == [
        ("Ethernet0", 3, 51200, 409600, 0.2),
        ("Ethernet0", 4, 51200, 409600, 0.2),
        ("Ethernet4", 3, 51200, 409600, 0.2),
        ("Ethernet4", 4, 51200, 409600, 0.2),
    ]
    assert len(said) == 2
    assert "WRED_PROFILE|BROKEN: no green_max_threshold" in said[0]
    assert "QUEUE|Ethernet16|x" in said[1]


def test_the_switch_s_topology_report_carries_its_profiles(config_db, server):
    appl = redis.Redis.from_url(server, db=0)
    appl.flushdb()
    appl.hset(
        "LLDP_ENTRY_TABLE:Ethernet0",
        mapping={
            "lldp_rem_sys_name": "spine01",
            "lldp_rem_port_id": "Ethernet1",
            "lldp_rem_port_id_subtype": "5",
        },
    )
    watch = TopologyWatch({"leaf-1": f"{server}/2"}, SiteSettings(), 60, 1, print)
    reports: list = []
    assert wait_for(lambda: reports.extend(watch.due()) or reports, 10)
    watch.close()
    appl.close()
    (report,) = reports
    assert {p.device for p in report.queue_profiles} == {"leaf-1"}
    assert ("Ethernet0", 3, 1048576) in {(p.port, p.queue, p.ecn_kmin_bytes) for p in report.queue_profiles}
