"""Each job's communication graph from NCCL's INIT lines: the real nccl-tests#350 log counted by
hand, the connection lines of other NCCL versions and network plugins as issue threads quote them,
binding connections to their communicator by thread, and stage 2 joining the hosts' graphs."""

from __future__ import annotations

import pytest
from helpers.comm_graphs import COMM, INIT_LOG, S, read

from fabricwatch.detectors.incident_state import Incident
from fabricwatch.detectors.jobs import JobAttribution
from fabricwatch.ingest.phases.comm_graph import GraphBuilder
from fabricwatch.ingest.phases.nccl_log import CommInit, Connection, NetDevices, parse_line
from fabricwatch.schemas.messages import CommGraph, DecodeError, Edge, Phase, RootCause, decode, encode


def test_the_real_init_log_gives_rank_0_s_six_connections_through_mlx5_2():
    """By hand: lines 53-65 are rank 0's ring connections on channels 0 and 1, both ways, set up by
    the init thread 101885 before its Init COMPLETE; lines 82 and 86 are the receive side of the
    connections gather's point-to-point calls opened later (conn 1, thread 101890). Every one goes
    through NIC 1 of ``NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_2:1/IB``."""
    (graph,) = [m for m in read(INIT_LOG) if isinstance(m, CommGraph)]
    assert (graph.job, graph.comm, graph.host, graph.nranks) == ("gather", COMM, "n013", 2)
    assert graph.rank_hosts == {0: "n013"}
    assert sorted(graph.edges, key=lambda e: (e.conn, e.side, e.channel)) == [
        Edge(1, 0, 0, 0, "receive", "NET", "mlx5_2"),
        Edge(1, 0, 1, 0, "receive", "NET", "mlx5_2"),
        Edge(0, 1, 0, 0, "send", "NET", "mlx5_2"),
        Edge(0, 1, 1, 0, "send", "NET", "mlx5_2"),
        Edge(1, 0, 0, 1, "receive", "NET", "mlx5_2"),
        Edge(1, 0, 1, 1, "receive", "NET", "mlx5_2"),
    ]
    assert decode(encode(graph)) == graph


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (  # NVIDIA/nccl#707: NCCL 2.7-2.11, no connection index, bus ids in hex
            "10-90-43-152:120890:121560 [0] NCCL INFO Channel 01 : 2[c7000] -> 0[87000] [receive] "
            "via NET/IB/5/GDRDMA",
            Connection("10-90-43-152", 120890, 121560, 1, 0, 2, 0, "receive", "NET", 5),
        ),
        (  # NVIDIA/nccl#1814: an external IB plugin names its own transport
            "hostname-test:984:1257 [4] NCCL INFO Channel 06/0 : 36[4] -> 20[4] [send] via NET/IBext_v8/3",
            Connection("hostname-test", 984, 1257, 6, 0, 36, 20, "send", "NET", 3),
        ),
        (  # src/transport/net.cc since 2.12: PXN relays through rank 1's proxy; NIC 0 still named
            "h:11:12 [0] NCCL INFO Channel 02/1 : 0[0] -> 8[0] [send] via NET/IB/0(1)/GDRDMA/Shared",
            Connection("h", 11, 12, 2, 1, 0, 8, "send", "NET", 0),
        ),
        (  # src/transport/p2p.cc: stays in the host, no side printed
            "h:11:12 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read",
            Connection("h", 11, 12, 0, 0, 0, 1, "", "P2P", None),
        ),
        (  # src/transport/net.cc before 2.7
            "h:11:12 [0] NCCL INFO Ring 03 : 4 -> 5 [send] via NET/IB/2/GDRDMA",
            Connection("h", 11, 12, 3, 0, 4, 5, "send", "NET", 2),
        ),
        (
            "h:11:12 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0> [1]eth1:10.0.0.2<0>",
            NetDevices("h", 11, {0: "eth0", 1: "eth1"}),
        ),
        ("n013:101855:101885 [0] NCCL INFO Ring 00 : 1 -> 0 -> 1", None),
        ("n013:101855:101885 [0] NCCL INFO Channel 00/02 :    0   1", None),
    ],
    ids=[
        "2.7-2.11",
        "ibext-plugin",
        "pxn",
        "p2p",
        "ring-pre-2.7",
        "socket-nics",
        "ring-order",
        "channel-order",
    ],
)
def test_connection_lines_of_other_versions_and_plugins(line, expected):
    assert parse_line(line) == expected


def test_each_thread_s_connections_go_to_the_communicator_its_init_names():
    """PyTorch opens several communicators in one process, each on its own init thread: the
    connections printed on a thread belong to the communicator whose Init COMPLETE that thread
    prints next, not to whichever the process initialised last."""
    lines = [
        "h:5:10 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0",
        "h:5:20 [0] NCCL INFO Channel 00/0 : 0[0] -> 3[0] [send] via NET/IB/1",
        "h:5:20 [0] NCCL INFO comm 0xb rank 0 nranks 4 cudaDev 0 busId 1000 commId 0xdd - Init COMPLETE",
        "h:5:10 [0] NCCL INFO comm 0xa rank 0 nranks 2 cudaDev 0 busId 1000 commId 0xaa - Init COMPLETE",
    ]
    graphs = {g.comm: g for g in read("\n".join(lines)) if isinstance(g, CommGraph)}
    assert graphs["0xaa"].edges == [Edge(0, 1, 0, 0, "send", "NET", "0")]
    assert graphs["0xdd"].edges == [Edge(0, 3, 0, 0, "send", "NET", "1")]


def test_a_connection_no_communicator_can_take_is_counted_not_guessed():
    """A late connection joins the process's latest communicator in which its own end is the
    process's rank; one whose end is no rank of the process is left out and counted."""
    builder = GraphBuilder("job", "test", bind_after_s=5)
    builder.init(CommInit("h", 5, "0xa", 0, 2, "0xaa", tid=10), S)
    builder.connection(Connection("h", 5, 30, 0, 1, 1, 0, "receive", "NET", 0), 1 * S)
    builder.connection(Connection("h", 5, 30, 0, 1, 7, 6, "receive", "NET", 0), 1 * S)
    assert builder.due(2 * S) == [], "not bound before it has waited: an init may still follow"
    (graph,) = builder.due(7 * S)
    assert graph.edges == [Edge(1, 0, 0, 1, "receive", "NET", "0")]
    assert builder.stats.unbound == 1


def test_a_graph_is_sent_once_and_then_only_what_is_new():
    builder = GraphBuilder("job", "test")
    builder.connection(Connection("h", 5, 10, 0, 0, 0, 1, "send", "NET", 0), S)
    builder.init(CommInit("h", 5, "0xa", 0, 2, "0xaa", tid=10, ts_ns=3 * S), S)
    (first,) = builder.due(S)
    assert first.ts_ns == 3 * S, "stamped with the init's own time, so replay puts it first"
    assert builder.due(2 * S) == []
    builder.connection(Connection("h", 5, 10, 0, 0, 0, 1, "send", "NET", 0), S)
    builder.connection(Connection("h", 5, 10, 1, 0, 0, 1, "send", "NET", 0), S)
    builder.init(CommInit("h", 5, "0xa", 0, 2, "0xaa", tid=10), S)
    (second,) = builder.due(3 * S)
    assert second.edges == [Edge(0, 1, 1, 0, "send", "NET", "0")]


def two_hosts(jobs: JobAttribution, duplicate: bool = False) -> None:
    """The job of the real log: rank 0 on n013 (its own graph) and rank 1 on n014 (nccl-tests'
    header says so), whose graph is the mirror image: it sends on channels 0 and 1 to rank 0."""
    (n013,) = [m for m in read(INIT_LOG) if isinstance(m, CommGraph)]
    n014 = CommGraph(
        job=n013.job,
        comm=COMM,
        ts_ns=5,
        host="n014",
        edges=[Edge(1, 0, c, 0, "send", "NET", "mlx5_2") for c in (0, 1)]
        + [Edge(0, 1, c, 0, "receive", "NET", "mlx5_2") for c in (0, 1)],
        rank_hosts={1: "n014"},
        nranks=2,
    )
    for g in [n014, n013] + ([n013, n014] if duplicate else []):
        jobs.on_phase(g)


def test_stage_two_joins_the_hosts_graphs_into_host_pairs_once():
    """Each connection counted once whichever end reported it, and graphs that come twice or in
    another order change nothing: n014 -> n013 has channels 0 and 1 of conn 0 and of conn 1."""
    once, twice = JobAttribution(), JobAttribution()
    two_hosts(once)
    two_hosts(twice, duplicate=True)
    expected = {("n013", "n014"): 2, ("n014", "n013"): 4}
    assert once.host_pairs("gather", COMM) == expected
    assert twice.host_pairs("gather", COMM) == expected
    assert once.senders_into("gather", COMM, {"n013"}) == [1]
    assert once.crossing_pairs("gather", COMM, {"n013"}) == 2
    assert once.crossing_pairs("gather", COMM, {"n013", "n014"}) == 0
    assert once.crossing_pairs("gather", "0xother", {"n013"}) is None


def test_a_rank_s_host_may_come_from_a_phase_instead_of_its_own_graph():
    """Only n013 logs its connections (n014's collector is not running); a phase from n014 names
    rank 1's host, and the pairs resolve."""
    jobs = JobAttribution()
    (n013,) = [m for m in read(INIT_LOG) if isinstance(m, CommGraph)]
    jobs.on_phase(n013)
    assert jobs.host_pairs("gather", COMM) == {}, "rank 1's host is not known yet"
    jobs.on_phase(Phase("gather", COMM, "AllGather", 10 * S, rank_hosts={1: "n014"}, end_ns=11 * S))
    assert jobs.host_pairs("gather", COMM) == {("n013", "n014"): 2, ("n014", "n013"): 4}


def test_an_incident_names_the_step_its_collective_began_in():
    jobs = JobAttribution()
    jobs.on_phase(Phase("llm", "dp", "AllReduce", 10 * S, hosts=["a", "b"], end_ns=11 * S, step=41))
    jobs.on_phase(Phase("llm", "dp", "AllReduce", 12 * S, hosts=["a", "b"], end_ns=13 * S, step=42))
    incident = Incident("incast", RootCause(device="leaf0", port="Ethernet1"), "fp", 12 * S, 12 * S)
    jobs.attach(incident, {"a"}, 12 * S)
    assert incident.evidence["step"] == 42 and incident.jobs == ["llm"]


def graph(job: str, comm: str, ring: list[str]) -> CommGraph:
    """One rank per host of ``ring``, each sending to the next over the network (a ring of NCCL)."""
    n = len(ring)
    edges = [Edge(r, (r + 1) % n, 0, 0, "send", "NET", "mlx5_0") for r in range(n)]
    return CommGraph(job=job, comm=comm, ts_ns=S, host=ring[0], edges=edges, rank_hosts=dict(enumerate(ring)))


def test_an_ecmp_collapse_names_the_job_whose_host_pairs_cross_the_switch():
    """Under the collapsed leaf are a, b, c. Job "inside" runs on hosts on both sides of it, but
    its ring only connects a, b and c (x and y talk in another communicator): nothing it sends
    crosses the leaf's uplinks, though its hosts do. Job "across" began earlier, farther from the
    incident, and its ring runs a -> x -> b -> y -> a: four pairs cross. Without graphs "inside"
    came first (it began closest); with them it is left out."""
    under = {"a", "b", "c"}
    jobs = JobAttribution()
    jobs.on_phase(Phase("inside", "c1", "AllReduce", 10 * S, hosts=["a", "b", "c", "x", "y"], end_ns=30 * S))
    jobs.on_phase(Phase("across", "c2", "AllReduce", 5 * S, hosts=["a", "b", "x", "y"], end_ns=30 * S))
    incident = Incident("ecmp_collapse", RootCause(device="leaf0", group="leaf0:up"), "fp", 10 * S, 10 * S)
    jobs.attach(incident, under, 10 * S, cross_from=under)
    assert incident.jobs == ["inside", "across"], "without graphs: the phase that began closest first"
    jobs.on_phase(graph("inside", "c1", ["a", "b", "c"]))
    jobs.on_phase(graph("across", "c2", ["a", "x", "b", "y"]))
    incident = Incident("ecmp_collapse", RootCause(device="leaf0", group="leaf0:up"), "fp", 10 * S, 10 * S)
    matched = jobs.attach(incident, under, 10 * S, cross_from=under)
    assert incident.jobs == ["across"] and jobs.crossing_pairs("across", "c2", under) == 4
    assert [p.job for p in matched] == ["across"]


def test_a_connection_to_a_rank_the_communicator_lacks_is_counted_and_the_rest_sent():
    builder = GraphBuilder("job", "test")
    builder.connection(Connection("h", 5, 10, 0, 0, 0, 9, "send", "NET", 0), S)
    builder.connection(Connection("h", 5, 10, 0, 0, 0, 1, "send", "NET", 0), S)
    builder.init(CommInit("h", 5, "0xa", 0, 2, "0xaa", tid=10), S)
    (graph,) = builder.due(S)
    assert graph.edges == [Edge(0, 1, 0, 0, "send", "NET", "0")] and builder.stats.unbound == 1


def test_a_running_communicator_s_graph_is_sent_again_and_an_ended_one_forgotten():
    """Stage 2 workers that restart re-read only recent phases: while a communicator's collectives
    run, its whole graph is sent again every 5 minutes. A collector runs for months while jobs come
    and go: what it keeps of a communicator goes an hour after the last word of it (the same
    connections printed again are then new, and the NIC list, gone with its process, no longer
    names the NIC)."""
    builder = GraphBuilder("job", "test")
    builder.devices(NetDevices("h", 5, {0: "mlx5_0"}), S)
    seen = Connection("h", 5, 10, 0, 0, 0, 1, "send", "NET", 0)
    builder.connection(seen, S)
    builder.init(CommInit("h", 5, "0xa", 0, 2, "0xaa", tid=10), S)
    whole = [[Edge(0, 1, 0, 0, "send", "NET", "mlx5_0")]]
    assert [g.edges for g in builder.due(2 * S)] == whole
    builder.running({"0xaa"}, 150 * S)
    assert builder.due(200 * S) == [], "within 5 minutes of the last whole graph"
    builder.running({"0xaa"}, 250 * S)
    assert [g.edges for g in builder.due(400 * S)] == whole, "still running after 5 minutes"
    assert builder.due(800 * S) == [], "not heard of since the last whole graph"
    assert builder.due(4000 * S) == [], "an hour after the last word: forgotten"
    builder.connection(seen, 4100 * S)
    builder.init(CommInit("h", 5, "0xa", 0, 2, "0xaa", tid=10), 4100 * S)
    assert [g.edges for g in builder.due(4101 * S)] == [[Edge(0, 1, 0, 0, "send", "NET", "0")]]


@pytest.mark.parametrize(
    "payload",
    [
        b'{"type":"comm_graph","job":"j","comm":"c","ts_ns":5,"host":"h","edges":[[-1,0,0]]}',
        b'{"type":"comm_graph","job":"j","comm":"c","ts_ns":5,"host":"h","edges":[[1,0,70000]]}',
        b'{"type":"comm_graph","job":"j","comm":"c","ts_ns":5,"host":"h","nranks":2,"edges":[[0,2,0]]}',
        b'{"type":"comm_graph","job":"j","comm":"c","ts_ns":0,"host":"h","edges":[]}',
        b'{"type":"phase","job":"j","comm":"c","op":"AllReduce","begin_ns":5,"rank_hosts":{"-3":"h"}}',
    ],
    ids=["negative-rank", "channel-past-uint16", "rank-past-nranks", "no-time", "phase-negative-rank"],
)
def test_a_graph_or_phase_the_store_could_not_hold_is_refused_on_decode(payload):
    """Refused where it comes in (a dead letter, counted), not at the sink's insert, where one bad
    message would fail a batch of good ones."""
    with pytest.raises(DecodeError):
        decode(payload)
