"""A hot spot fed by one port beside an ECMP collapse is not an incast (issue 33, item 7).

Found on an independent packet-level simulator (ns-3's HPCC RDMA stack, hosts on 25G and the
fabric on 100G): every ECMP collapse brought false incasts at the receiving leaf's host ports, a
fabric link overdriving a slower host link, with fan-in counted as every busy port of the switch.
Our simulator runs every link at one speed, so the slower host link here is one that came up at a
quarter of it: an AllReduce ring feeds each host from one neighbour, at more than that link now
carries, beside a collapse on the other leaf."""

from __future__ import annotations

from helpers.small_fabric import replayed

FAULTS = """\
  - {kind: ecmp_collapse, leaf: leaf00, job: dp, start: 20.3, duration: 90}
  - {kind: speed_downshift, device: h010, factor: 0.25, start: 40.2, duration: 60}
  - {kind: speed_downshift, device: h003, factor: 0.25, start: 70.7, duration: 40}"""


def test_a_host_link_overdriven_by_one_sender_beside_a_collapse_is_no_incast(tmp_path):
    """Before, the queue at h010's leaf port (fed by its ring neighbour alone, the leaf's other
    ports busy with the job) was an incast, every busy port of the leaf a feeder, on seeds 1-3; the
    collapse and both slowed links are the findings."""
    events = replayed(tmp_path, "hot_spots", FAULTS, seed=1, duration=150)
    firing = {(a.kind, a.root.device) for a in events if a.status == "firing"}
    assert firing == {
        ("ecmp_collapse", "leaf00"),
        ("slow_link", "h010/mlx5_0"),
        ("slow_link", "h003/mlx5_0"),
    }
