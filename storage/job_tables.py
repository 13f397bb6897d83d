"""The tables of jobs' records: their phases (``Phase``), their timed collective calls
(``Collectives``), their steps (``Steps``) and their communication graphs (``CommGraph``), sharded
by job."""

from __future__ import annotations

from fabricwatch.storage.schema import DDL


def phases(g: DDL) -> list[str]:
    d = g.d
    cols = [
        f"job {d.lc()}",
        "comm String",
        f"op {d.lc()}",
        f"begin {d.time_ms()}",
        f"end Nullable({d.time_ms()})",
        "begin_ns UInt64",
        "end_ns UInt64",
        "bytes UInt64",
        "hosts Array(String)",
        "root_rank Nullable(Int32)",
        "source String",
    ]
    return g.table(
        "phases",
        cols,
        "ReplacingMergeTree",
        "job, comm, op, begin_ns",
        "toDate(begin)",
        version="end_ns",
        shard_key="cityHash64(job)",
    )


def collective_calls(g: DDL) -> list[str]:
    """Each timed collective call of a job (``Collectives``), with its bandwidths as nccl-tests
    defines them (``schemas/bandwidth.py``): what the job-timeline dashboard plots and job
    metrics are computed over. A call stored twice merges away (ReplacingMergeTree on its
    identity); readers take DISTINCT rows or FINAL."""
    d = g.d
    cols = [
        f"job {d.lc()}",
        "comm String",
        f"op {d.lc()}",
        "rank UInt32",
        "host String",
        f"begin {d.time_ms()}",
        "begin_ns UInt64",
        "dur_ns UInt64",
        "bytes UInt64",
        "size_bucket UInt64",
        "nranks UInt32",
        "algbw Float64",
        "busbw Float64",
        f"source {d.lc()}",
        "upper_bound UInt8",
    ]
    return g.table(
        "collective_calls",
        cols,
        "ReplacingMergeTree",
        "job, comm, op, rank, begin_ns",
        "toDate(begin)",
        shard_key="cityHash64(job)",
    )


def job_steps(g: DDL) -> list[str]:
    """Each training step of each rank of a job (``Steps``): its time and, where the source times
    the step's kernels, the time in collectives and of it the time no compute hid (NULL where the
    source does not say: unknown, not zero). A step stored twice merges away."""
    d = g.d
    cols = [
        f"job {d.lc()}",
        "step UInt64",
        "rank UInt32",
        "host String",
        f"begin {d.time_ms()}",
        "begin_ns UInt64",
        "dur_ns UInt64",
        "coll_ns Nullable(UInt64)",
        "exposed_ns Nullable(UInt64)",
        f"source {d.lc()}",
    ]
    return g.table(
        "job_steps",
        cols,
        "ReplacingMergeTree",
        "job, rank, step, begin_ns",
        "toDate(begin)",
        shard_key="cityHash64(job)",
    )


def comm_graph(g: DDL) -> list[str]:
    """Each job's communication graph (``CommGraph``): its connections as each host reported them,
    and which host each rank is on (from the graphs and the phases). A graph or phase stored twice
    merges away (ReplacingMergeTree on the whole identity); readers take DISTINCT rows."""
    d = g.d
    head = [f"job {d.lc()}", "comm String"]
    edges = g.table(
        "comm_edges",
        [
            *head,
            f"host {d.lc()}",
            "ts_ns UInt64",
            "src_rank UInt32",
            "dst_rank UInt32",
            "channel UInt16",
            "conn UInt16",
            f"side {d.lc()}",
            f"transport {d.lc()}",
            "nic String",
        ],
        "ReplacingMergeTree",
        "job, comm, host, src_rank, dst_rank, channel, conn, side",
        version="ts_ns",
        shard_key="cityHash64(job)",
    )
    ranks = g.table(
        "comm_ranks",
        [*head, "rank UInt32", "host String", "ts_ns UInt64"],
        "ReplacingMergeTree",
        "job, comm, rank",
        version="ts_ns",
        shard_key="cityHash64(job)",
    )
    return edges + ranks


def nic_periods(g: DDL) -> list[str]:
    """Each NIC's traffic period at each judgment of the rhythm detector (``Periods``): with the
    hosts a job's steps or phases ran on, its rhythm over time. ``usual_s`` and ``rate_Bps`` are
    NULL where unknown (no period learned yet). A judgment stored twice merges away."""
    d = g.d
    cols = [
        f"ts {d.time_ms()}",
        "ts_ns UInt64",
        f"device {d.lc()}",
        "period_s Float32",
        "strength Float32",
        "usual_s Nullable(Float32)",
        "rate_Bps Nullable(Float64)",
    ]
    return g.table(
        "nic_periods",
        cols,
        "ReplacingMergeTree",
        "device, ts_ns",
        "toDate(ts)",
        shard_key="cityHash64(device)",
    )


def burst_profiles(g: DDL) -> list[str]:
    """Each burst capture of an interface (``BurstProfile``): per direction its busiest
    millisecond, 99th percentile and mean rate, time near line rate, bursts, and every millisecond's
    rate, with the host and the incident that asked for it (empty: by hand). A capture stored twice
    merges away."""
    d = g.d
    per_direction = [
        f"{x}_{c}"
        for x in ("rx", "tx")
        for c in (
            "peak_Bps Float64",
            "p99_Bps Float64",
            "mean_Bps Float64",
            "hot_s Float32",
            "bursts UInt32",
            "longest_burst_s Float32",
            "per_bin_Bps Array(Float32)",
        )
    ]
    cols = [
        f"ts {d.time_ms()}",
        "start_ns UInt64",
        "host String",
        "netdev String",
        "trigger String",
        "seconds Float32",
        "period_s Float32",
        "achieved_period_s Float32",
        "samples UInt32",
        "unread UInt32",
        "bin_s Float32",
        "line_Bps Float64",
        *per_direction,
        "rx_packets UInt64",
        "tx_packets UInt64",
        "ecn_marked_packets Nullable(UInt64)",
        "cnp_sent Nullable(UInt64)",
        "ecn_per_bin_pps Array(Float32)",
        "ecn_refresh_s Nullable(Float32)",
    ]
    return g.table(
        "burst_profiles",
        cols,
        "ReplacingMergeTree",
        "host, netdev, start_ns",
        "toDate(ts)",
        shard_key="cityHash64(host)",
    )
