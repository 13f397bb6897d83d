"""Ctrl-C in a real terminal during ``fabricwatch run``: a pseudo-terminal, so that the SIGINT goes
to the whole foreground process group as a person's Ctrl-C does."""

from __future__ import annotations

import os
import pty
import select
import signal
import sys
import time
from pathlib import Path

import pytest

from fabricwatch.local.processes import fabricwatch_command
from fabricwatch.storage.store import Store

pytestmark = pytest.mark.processes  # broker, workers


def children_of(pid: int) -> set[int]:
    """Every process below ``pid`` (from /proc), grandchildren included."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def read_until(fd: int, wanted: bytes, timeout_s: float, seen: bytearray) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and wanted not in seen:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                seen += os.read(fd, 4096)
            except OSError:
                break
    return wanted in seen


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_ctrl_c_stops_run_in_order_within_seconds(tmp_path):
    data, tmp = tmp_path / "data", tmp_path / "tmp"
    tmp.mkdir()
    argv = [*fabricwatch_command(), "run", "--duration", "300", "--speed", "5"]
    argv += ["--data-dir", str(data), "--report", str(tmp_path / "report")]
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session of its own with the pty as its terminal, as in a shell
        os.environ["TMPDIR"] = str(tmp)
        os.execv(argv[0], argv)
    out = bytearray()
    try:
        assert read_until(fd, b"FIRING", 120, out), out.decode(errors="replace")
        below = children_of(pid)
        assert below  # the broker and the worker
        os.write(fd, b"\x03")  # Ctrl-C: SIGINT to the terminal's foreground process group
        pressed = time.monotonic()
        read_until(fd, b"stopped by Ctrl-C", 10, out)
        _, status = os.waitpid(pid, 0)
        took = time.monotonic() - pressed
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        read_until(fd, b"\x00", 0.5, out)
        os.close(fd)
    text = out.decode(errors="replace")
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 130, text
    assert took < 5, f"{took:.1f} s"
    assert "Traceback" not in text and "Exception ignored" not in text, text
    assert text.count("stopped by Ctrl-C") == 1 and f"fabricwatch report --data-dir {data}" in text
    assert "times below are the simulated fabric's" in text  # found: a RESOLVED stamped after the run ended
    assert not [p for p in below if alive(p)]  # no broker or worker left behind
    assert os.listdir(tmp) == []  # nothing left in the temp directory
    with Store.open(data) as store:  # what was stored stays stored, and readable
        assert store.query("SELECT count() FROM rates_raw")[0][0] > 0


def test_ctrl_c_while_replay_waits_on_an_unreachable_webhook_is_one_line(tmp_path, demo_trace):
    """Found: Ctrl-C during `replay --alerts` was a traceback from the delivery's drain."""
    import subprocess

    from fabricwatch.local.broker import free_port

    config = tmp_path / "alerts.yaml"
    config.write_text(
        "alerts:\n"
        f"  receivers: [{{name: ops, url: 'http://127.0.0.1:{free_port()}/hook', give_up_after: 1h}}]\n"
        "  route: {receiver: ops, group_wait: 0s}\n"
    )
    proc = subprocess.Popen(
        [*fabricwatch_command(), "replay", str(demo_trace), "--alerts", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # A sleep is the behaviour here: Ctrl-C pressed some seconds in, when the replay is done and
    # retrying deliveries to nobody (which it says nothing about while it waits).
    time.sleep(8)
    assert proc.poll() is None
    proc.send_signal(signal.SIGINT)
    pressed = time.monotonic()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and time.monotonic() - pressed < 5
    assert "Traceback" not in err and err.strip().endswith("fabricwatch replay: stopped by Ctrl-C"), err
