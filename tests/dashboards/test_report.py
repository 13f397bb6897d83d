"""``fabricwatch report`` on a store filled by replaying the demo: PNGs that exist, have content and
the promised pixel size (read from the PNG header), anomaly roots charted first, an index linking
every chart, and a time range that narrows what is drawn."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.comm_graphs import stored_gather
from helpers.replayed_store import replay_into_store

from fabricwatch.cli.main import main
from fabricwatch.dashboards.report import write_report
from fabricwatch.local.processes import fabricwatch_command
from fabricwatch.storage.queries import host_pairs, parse_time
from fabricwatch.storage.sink import Sink

pytestmark = pytest.mark.slow  # a replayed store in embedded ClickHouse


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("report")
    store, result = replay_into_store("demo", workdir)
    yield store, result, workdir / "store"
    store.close()


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the IHDR chunk, which the PNG format puts first after the signature."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def test_report_draws_ports_ecmp_and_heatmaps_at_the_promised_size(replayed, tmp_path):
    store, _, _ = replayed
    drawn: list[Path] = []
    paths = write_report(store, tmp_path, max_ports=5, size_px=(1000, 700), on_chart=drawn.append)
    pngs = [p for p in paths if p.suffix == ".png"]
    assert drawn == pngs  # each chart is announced as it is written (a terminal's progress)
    names = [p.name for p in pngs]
    assert paths[-1] == tmp_path / "index.html"
    assert len([n for n in names if n.startswith("port-")]) == 5
    assert {"ecmp-shares.png", "heatmap-utilisation.png", "heatmap-pause.png"} <= set(names)
    for p in pngs:
        assert p.stat().st_size > 20_000, f"{p.name} looks empty"
        assert png_size(p) == (1000, 700), p.name
    # the demo's three incidents in start order: incast victim port, stalled NIC; the ECMP root is a group
    assert names[0] == "port-01-leaf01-Ethernet8.png"
    assert names[1] == "port-02-h002_mlx5_0-1.png"
    index = (tmp_path / "index.html").read_text()
    assert set(re.findall(r'src="([^"]+)"', index)) == set(names)
    for kind in ("incast", "pfc_storm", "ecmp_collapse"):
        assert f"<td>{kind}</td>" in index
    assert "moe-b" in index


def test_a_time_range_narrows_the_report(replayed, tmp_path):
    store, result, _ = replayed
    storm = next(a for a in result.anomalies if a.kind == "pfc_storm" and a.status == "firing")
    start, end = storm.start_ns - 5 * 10**9, storm.start_ns + 10 * 10**9
    paths = write_report(store, tmp_path, start, end, max_ports=3)
    assert paths[0].name == "port-01-h002_mlx5_0-1.png", "only the storm touches this range"
    index = (tmp_path / "index.html").read_text()
    assert "<td>pfc_storm</td>" in index and "<td>incast</td>" not in index


def test_older_data_is_read_from_a_rollup(replayed, tmp_path):
    """Past the raw table's two days only rollups remain; the report draws from them."""
    store, _, _ = replayed
    paths = write_report(store, tmp_path, max_ports=2, resolution="rates_10s", size_px=(800, 600))
    names = [p.name for p in paths]
    assert names[:2] == ["port-01-leaf01-Ethernet8.png", "port-02-h002_mlx5_0-1.png"]
    assert {"ecmp-shares.png", "heatmap-pause.png"} <= set(names)
    assert all(png_size(p) == (800, 600) for p in paths if p.suffix == ".png")
    with pytest.raises(ValueError, match="resolution 'rates_5m'"):
        write_report(store, tmp_path, resolution="rates_5m")


def test_a_range_without_rates_is_an_error(replayed, tmp_path):
    store, _, _ = replayed
    with pytest.raises(ValueError, match="no rates stored between"):
        write_report(store, tmp_path, 10**18, 10**18 + 10**9)


def test_time_arguments():
    assert parse_time(None) is None
    assert parse_time("2026-01-01T00:00:01") == 1_767_225_601 * 10**9
    assert parse_time("2026-01-01T01:00:01+01:00") == 1_767_225_601 * 10**9
    assert parse_time("1767225601000000000") == 1_767_225_601 * 10**9
    with pytest.raises(ValueError, match="looks like seconds"):
        parse_time("1767225601")
    with pytest.raises(ValueError, match="not an ISO 8601"):
        parse_time("yesterday")


def test_cli_report(replayed, tmp_path, capsys):
    _, _, data_dir = replayed
    out = tmp_path / "out"
    assert main(["report", "--data-dir", str(data_dir), "--out", str(out), "--ports", "2"]) == 0
    captured = capsys.readouterr()
    assert "wrote 13 charts" in captured.out, "2 ports, ECMP shares, 2 heatmaps, 4 jobs' timelines and pairs"
    assert "chart 1:" not in captured.err  # progress only on a terminal
    assert len(list(out.glob("*.png"))) == 13 and (out / "index.html").is_file()
    assert main(["report", "--data-dir", str(tmp_path / "nothing"), "--out", str(out)]) == 2
    assert "no store there" in capsys.readouterr().err


def test_each_job_gets_its_timeline_and_a_job_with_a_graph_its_host_pairs(replayed, tmp_path):
    """The demo's jobs each get their collectives drawn over their hosts' leaf ports, the incast's
    root port among them, and their host-pair heat maps; so does a job whose NCCL INIT lines were
    read (the real nccl-tests#350 log and its peer's mirror image), from its stored graph."""
    store, _, _ = replayed
    lo = int(store.query("SELECT min(begin_ns) FROM phases")[0][0])
    with Sink(store) as sink:
        for msg in stored_gather(lo):
            sink.add(msg)
    assert host_pairs(store, "gather") == {("n013", "n014"): 2, ("n014", "n013"): 4}
    names = [p.name for p in write_report(store, tmp_path, max_ports=3, max_jobs=5)]
    assert {"job-gather-timeline.png", "job-gather-host-pairs.png", "job-moe_b-timeline.png"} <= set(names)
    assert "job-moe_b-host-pairs.png" in names, "the simulated jobs' graphs, from their flows"
    index = (tmp_path / "index.html").read_text()
    assert 'src="job-gather-host-pairs.png"' in index


@pytest.mark.processes  # a second process holds the store
def test_a_store_another_process_holds_is_said_in_one_line_with_what_to_do(tmp_path):
    """The sink (or ``run``) keeps its chdb directory locked while it runs; ``report`` on it said
    ``Error initializing EmbeddedServer: . (BAD_ARGUMENTS)`` under a traceback. ``report`` runs as
    its own process, as a user runs it (this one may hold a store of its own)."""
    data = tmp_path / "data"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from fabricwatch.storage.store import Store; s = Store.open({str(data)!r}); "
            "print('open', flush=True); input()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "open"
        report = [*fabricwatch_command(), "report", "--data-dir", str(data), "--out", str(tmp_path / "r")]
        done = subprocess.run(report, capture_output=True, text=True, timeout=120)
    finally:
        holder.communicate("\n", timeout=60)
    said = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr[-2000:]
    assert len(said) == 1 and "is open in another process" in said[0] and str(data) in said[0], said
