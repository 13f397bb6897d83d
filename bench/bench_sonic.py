"""What polling a SONiC switch costs: collector CPU and wall time per poll of a 64-port switch with
8 queues and 8 priority groups per port, out of a real redis-server on loopback.

The switch's COUNTERS_DB and CONFIG_DB are filled as syncd does (``ingest.simulator.sonic_db``, in
the ``redis-server`` that ``local.redis_server`` starts), with every flex counter group at 100 ms,
and advanced between polls. Two ways of reading the same
objects, same run: the collector (one pipelined round trip of HMGETs of the mapped fields, matrix
filled by precomputed positions) and, as the baseline, one HGETALL per object hash, each its own
round trip, parsed through the COUNTERS_DB dump parser into the same snapshot. CPU is this
process's; the Redis server's own time is not counted. Prints JSON lines.

    python bench/bench_sonic.py [--polls 50] [--ports 64]
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import numpy as np
import redis

from fabricwatch.ingest.mapping import build_sonic_snapshot
from fabricwatch.ingest.nic.parsers import parse_sonic_counters_db
from fabricwatch.ingest.sonic.switch import COUNTERS_DB, SonicSwitch

ROOT = Path(__file__).resolve().parent.parent
FAST = {"PORT": 100, "QUEUE": 100, "PG_DROP": 100, "QUEUE_WATERMARK": 100, "PG_WATERMARK": 100}


def cpu_s() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def timed(polls: int, db, read) -> dict:
    """CPU and wall time per call of ``read``, the switch's counters advanced before each."""
    cpu, wall = [], []
    for i in range(polls):
        db.advance({p: {"SAI_PORT_STAT_IF_OUT_OCTETS": 1000 + i} for p in db.port_names})
        c0, w0 = cpu_s(), time.perf_counter()
        read()
        cpu.append(cpu_s() - c0)
        wall.append(time.perf_counter() - w0)
    return {
        "cpu_ms_per_poll": round(float(np.mean(cpu)) * 1000, 2),
        "wall_ms_p50": round(float(np.percentile(wall, 50)) * 1000, 2),
        "wall_ms_p99": round(float(np.percentile(wall, 99)) * 1000, 2),
    }


def hgetall_each(client: redis.Redis) -> None:
    """The baseline: the name maps, then every object's hash, one round trip each."""
    dump = {m: client.hgetall(m) for m in ("COUNTERS_PORT_NAME_MAP", "COUNTERS_QUEUE_NAME_MAP")}
    dump = {m: {k.decode(): v.decode() for k, v in h.items()} for m, h in dump.items()}
    for name_map in list(dump.values()):
        for oid in name_map.values():
            dump[f"COUNTERS:{oid}"] = {
                k.decode(): v.decode() for k, v in client.hgetall(f"COUNTERS:{oid}").items()
            }
    ports, queues = parse_sonic_counters_db(dump)
    build_sonic_snapshot("bench", time.time_ns(), ports, queues)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--polls", type=int, default=50)
    ap.add_argument("--ports", type=int, default=64)
    args = ap.parse_args()
    from fabricwatch.ingest.simulator.sonic_db import SwitchDb
    from fabricwatch.local.redis_server import redis_server

    with redis_server() as url:
        db = SwitchDb(url, ports=args.ports)
        db.schedule(FAST, pfcwd_ms=100)
        switch = SonicSwitch("bench", f"{url}/{COUNTERS_DB}", timeout_s=5, warn=lambda _: None)
        snap = switch.read(0.1)
        values = len(snap.ports) * len(snap.counters)
        sends: list[int] = []
        connection = redis.connection.Connection
        original = connection.send_packed_command
        connection.send_packed_command = lambda self, *a, **k: sends.append(1) or original(self, *a, **k)
        switch.read(0.1)
        round_trips = len(sends)
        connection.send_packed_command = original
        shape = {"ports": args.ports, "queues": 8, "pgs": 8, "values": values}
        ours = timed(args.polls, db, lambda: switch.read(0.1))
        print(json.dumps({"bench": "sonic_poll", **shape, "round_trips": round_trips, **ours}))
        baseline_client = redis.Redis.from_url(url, db=COUNTERS_DB)
        base = timed(max(5, args.polls // 5), db, lambda: hgetall_each(baseline_client))
        objects = args.ports * 17 + 2
        print(json.dumps({"bench": "sonic_poll_hgetall_per_key", **shape, "round_trips": objects, **base}))
        print(
            json.dumps(
                {
                    "bench": "sonic_poll_ratio",
                    "cpu_baseline_over_ours": round(base["cpu_ms_per_poll"] / ours["cpu_ms_per_poll"], 1),
                    "wall_baseline_over_ours": round(base["wall_ms_p50"] / ours["wall_ms_p50"], 1),
                }
            )
        )
        db.close()


if __name__ == "__main__":
    main()
