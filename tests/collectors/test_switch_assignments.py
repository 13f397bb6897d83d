"""Switch collector replicas share the switches through Kafka's consumer-group protocol on a real
broker (Tansu): each switch is polled by exactly one replica, and a replica killed without a word
(SIGKILL) hands its switches to the others within a minute."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from helpers.waiting import wait_for

from fabricwatch.collectors.switch_assignments import Assignments
from fabricwatch.ingest.sonic.poll import SwitchTarget
from fabricwatch.local.processes import fabricwatch_command

pytestmark = pytest.mark.processes
SWITCHES = [f"leaf{i:02d}" for i in range(8)]
MEMBER = textwrap.dedent(
    """
    import json, sys, time
    from fabricwatch.streams.kafka_io import BrokerSettings
    from fabricwatch.collectors.switch_assignments import Assignments
    member = Assignments(BrokerSettings(bootstrap=sys.argv[1]), print, session_timeout_s=10)
    while True:
        print(json.dumps(sorted(t.name for t in member.current())), flush=True)
        time.sleep(0.5)
    """
)


def test_replicas_split_the_switches_and_a_killed_one_hands_its_share_over(broker, tmp_path):
    config = tmp_path / "site.yaml"
    lines = "\n".join(
        f"    - {{name: {n}, redis: 'redis://10.0.0.{i}:6379/2'}}" for i, n in enumerate(SWITCHES)
    )
    config.write_text(f"sonic:\n  switches:\n{lines}\n")
    published = subprocess.run(
        [
            *fabricwatch_command(),
            "collect",
            "sonic",
            "--config",
            str(config),
            "--broker",
            broker.bootstrap,
            "--publish-switches",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert published.returncode == 0, published.stderr
    assert f"put {len(SWITCHES)} of {len(SWITCHES)} switches" in published.stdout

    said: list[str] = []
    here = Assignments(broker, said.append, session_timeout_s=10)
    other = subprocess.Popen(
        [sys.executable, "-c", MEMBER, broker.bootstrap],
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )
    try:
        theirs: list[str] = []

        def split() -> bool:
            line = other.stdout.readline()
            theirs[:] = json.loads(line) if line.startswith("[") else theirs
            mine = [t.name for t in here.current()]
            return bool(mine) and bool(theirs) and sorted(mine + theirs) == SWITCHES

        assert wait_for(split, 90), (theirs, [t.name for t in here.current()])
        mine = {t.name for t in here.current()}
        assert mine.isdisjoint(theirs)  # each switch polled by exactly one replica
        assert {t.name: t.redis for t in here.current()}[min(mine)].startswith("redis://10.0.0.")

        other.send_signal(signal.SIGKILL)
        other.wait(timeout=10)
        killed = time.monotonic()
        assert wait_for(lambda: [t.name for t in here.current()] == SWITCHES, 60)
        assert time.monotonic() - killed < 60
    finally:
        if other.poll() is None:
            other.kill()
        here.close()
    assert all(isinstance(t, SwitchTarget) for t in here.current())
