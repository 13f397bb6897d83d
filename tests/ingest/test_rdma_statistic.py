"""`rdma statistic show` (iproute2 over RDMA netlink) as the host collector reads it: a real
output of four ConnectX-4 Lx links in the text form, the same counters in the pretty and JSON
forms iproute2 prints, bad input costing only itself, and the collector taking the counters of a
device whose sysfs hw_counters it cannot see."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import snapshots
from helpers.paths import FIXTURES

from fabricwatch.cli.main import main
from fabricwatch.ingest.mapping import resolve
from fabricwatch.ingest.nic.parsers import RdmaStatistic, parse_rdma_statistic
from fabricwatch.ingest.nic.poll import CollectStats, NicTarget, poll
from fabricwatch.schemas.messages import Snapshot, decode
from fabricwatch.schemas.trace import TraceReader

SAMPLE = (FIXTURES / "rdma_statistic_show_mlx5_cx4lx_mlnx_ofed.txt").read_text()


def test_the_real_text_output_reads_exactly():
    parsed = parse_rdma_statistic(SAMPLE)
    assert parsed.problems == []
    assert sorted(parsed.links) == [("mlx5_0", 1), ("mlx5_1", 1), ("mlx5_2", 1), ("mlx5_3", 1)]
    first = parsed.links[("mlx5_0", 1)]
    assert (first["out_of_buffer"], first["resp_cqe_error"], first["req_cqe_error"]) == (135, 1009, 22)
    # the same note lists the port's hw_counters files: these 29 and lifespan (a setting)
    assert len(first) == 29 and all(len(c) == 29 for c in parsed.links.values())
    mapped = {resolve("mlx5_hw_counters", name).name for name in first if resolve("mlx5_hw_counters", name)}
    assert {"out_of_buffer", "cnp_sent", "cnp_received", "rx_ecn_marked_packets"} <= mapped


def pretty(stat: RdmaStatistic) -> str:
    """``rdma statistic show -p``: each link, then its counters one per tab-indented line."""
    out = []
    for (dev, port), counters in stat.links.items():
        out += [f"link {dev}/{port}", *(f"\t{name} {value}" for name, value in counters.items())]
    return "\n".join(out) + "\n"


def as_json(stat: RdmaStatistic) -> str:
    """``rdma -j statistic show``: an object per link with ifname, port and the counters."""
    links = [{"ifname": dev, "port": port, **counters} for (dev, port), counters in stat.links.items()]
    return json.dumps(links)


def test_the_pretty_and_json_forms_read_the_same():
    text = parse_rdma_statistic(SAMPLE)
    assert parse_rdma_statistic(pretty(text)) == text
    assert parse_rdma_statistic(as_json(text)) == text


def test_names_with_spaces_as_irdma_gives_them():
    parsed = parse_rdma_statistic("link rocep24s0f0/1 cnpHandled 40 RNR sent 3 Rcvd Out of order packets 7\n")
    assert parsed.links[("rocep24s0f0", 1)] == {
        "cnpHandled": 40,
        "RNR sent": 3,
        "Rcvd Out of order packets": 7,
    }


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("link mlx5_0 out_of_buffer 1\nlink mlx5_1/1 out_of_buffer 2\n", "expected 'link DEV/PORT'"),
        ("link mlx5_1/1 out_of_buffer 2 np_cnp_sent\n", "'np_cnp_sent' has no value"),
        ("link mlx5_1/1 out_of_buffer 2 np_cnp_sent 18446744073709551616\n", "not an unsigned 64-bit"),
        ("link mlx5_1/1 out_of_buffer 2 np_cnp_sent 1 np_cnp_sent 2\n", "appears twice"),
        (
            '[{"ifname": "mlx5_1", "port": 1, "out_of_buffer": 2, "np_cnp_sent": "x"}]',
            "not an unsigned 64-bit",
        ),
        ('[{"ifname": "mlx5_0"}, {"ifname": "mlx5_1", "port": 1, "out_of_buffer": 2}]', "ifname and port"),
    ],
)
def test_a_bad_part_costs_only_itself(text, problem):
    parsed = parse_rdma_statistic(text)
    assert parsed.links[("mlx5_1", 1)]["out_of_buffer"] == 2
    assert "np_cnp_sent" not in parsed.links[("mlx5_1", 1)]
    assert len(parsed.problems) == 1 and problem in parsed.problems[0]


@pytest.mark.parametrize("text", ["", "\n", "Failed to open NETLINK_RDMA socket\n", "[]", "[{"])
def test_output_with_no_link_is_an_error(text):
    with pytest.raises(ValueError, match="rdma statistic output"):
        parse_rdma_statistic(text)


def read_once(sysfs: Path, netlink: RdmaStatistic | None) -> Snapshot:
    (snap,) = poll(
        sysfs,
        [NicTarget("mlx5_0", None)],
        0.1,
        1,
        host="h1",
        ethtool=None,
        warn=lambda _: None,
        stats=CollectStats(),
        rdma_statistic=(lambda: netlink) if netlink is not None else None,
    )
    return snap


def cell(snap: Snapshot, name: str) -> int | None:
    """A counter of the device's one port."""
    return snapshots.cell(snap, snap.ports[0], name)


def test_the_collector_takes_what_sysfs_hides_and_keeps_what_sysfs_has(sysfs):
    hw = sysfs / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "hw_counters"
    from_sysfs = int((hw / "out_of_buffer").read_text())
    netlink = parse_rdma_statistic(SAMPLE)
    assert from_sysfs != 135
    assert cell(read_once(sysfs, netlink), "out_of_buffer") == from_sysfs, "sysfs wins where both read"
    shutil.rmtree(hw)  # a container that sees RDMA netlink but not the hw_counters files
    without = read_once(sysfs, None)
    assert "out_of_buffer" not in {c.name for c in without.counters}
    assert cell(read_once(sysfs, netlink), "out_of_buffer") == 135


def test_a_failing_rdma_tool_is_said_once_and_sysfs_still_flows(sysfs, tmp_path, capsys):
    """The real `rdma` binary on this machine, which has no RDMA netlink: said once, every poll
    tries again, every snapshot goes out."""
    out = tmp_path / "host.trace"
    argv = ["collect", "--sysfs-root", str(sysfs), "--out", str(out), "--interval", "0.1", "--no-ethtool"]
    assert main([*argv, "--count", "3", "--rdma-statistic"]) == 0
    err = capsys.readouterr().err
    assert err.count("rdma statistic:") == 1 and "hw_counters from sysfs only" in err
    with TraceReader(out) as reader:
        assert len([decode(r.value(), Snapshot) for r in reader]) == 3
