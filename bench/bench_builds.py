"""Stage 1 of this build beside another on the same snapshots, in alternating rounds: the ratio a
change is judged by on a shared, noisy machine.

``--baseline DIR`` is another build, installed with ``pip install --no-deps --target DIR`` from
its checkout (issue 37 measured against its start, 5675fdf). Each build runs in its own process
(``series_child.py``) on the same series, the ones ``bench_rates.py`` times: eight 64-port switches
whose every queue marks and pauses a little (``marking``), the same switches quiet (``quiet``), a
thousand NICs (``nic``). Per series and round, a JSON line per build: CPU time per snapshot, the
best and the median of ``--repeats`` passes. Then, with a baseline, one line per series: the ratio
of this build to the baseline, from each build's best over all rounds.

With ``--instructions`` (valgrind installed) each build's instructions per snapshot are counted
too: seven passes less one, so that start-up and imports cancel, with a fixed hash seed. Counts
move by 2-3 % from run to run where CPU time moves by 10-30 % here (and by more when a
neighbour loads the machine); they weigh a numpy call on 5,504 values by its instructions, not
its memory traffic, so they are a second figure, not the only one.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_rates import encoded_series, nic_counters, switch_counters

from fabricwatch.schemas.messages import Snapshot, decode

CHILD = Path(__file__).with_name("series_child.py")


def series(nics: int, nic_polls: int) -> dict[str, list[tuple]]:
    """``bench_rates.py``'s series as plain data, which every build can encode."""
    sw = switch_counters()
    made = {
        "marking": encoded_series("switch", 8, 20, 64, sw, marking=True),
        "quiet": encoded_series("switch", 8, 20, 64, sw),
        "nic": encoded_series("nic", nics, nic_polls, 1, nic_counters()),
    }
    out = {}
    for name, messages in made.items():
        snaps = [decode(m, Snapshot) for m in messages]
        out[name] = [
            (
                s.device,
                s.device_kind,
                s.ts_ns,
                [(c.name, c.index, c.kind, c.width, c.scale) for c in s.counters],
                s.ports,
                s.matrix()[0].tolist(),
            )
            for s in snaps
        ]
    return out


def child_env(build: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if build:
        env["PYTHONPATH"] = build
    return env


def cpu(build: str | None, path: str, name: str, repeats: int, batch: int) -> dict:
    done = subprocess.run(
        [sys.executable, str(CHILD), path, name, str(repeats), str(batch)],
        env=child_env(build),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        sys.exit(f"{CHILD.name} for {build or 'this build'} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def instructions(build: str | None, path: str, name: str, batch: int, snapshots: int) -> int:
    """Instructions per snapshot: seven passes less one, under valgrind's cachegrind. A run's
    count moves by some 40 M instructions from run to run whatever the fixed hash seed (start-up),
    which over six passes of the 160 switch snapshots is 2-3 % of a snapshot's count."""

    def counted(repeats: int) -> int:
        cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
        cmd += [sys.executable, str(CHILD), path, name, str(repeats), str(batch)]
        env = child_env(build) | {"PYTHONHASHSEED": "0"}  # the same dict and set orders every run
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
        if done.returncode or found is None:
            sys.exit(f"valgrind on {build or 'this build'} failed:\n{done.stderr[-3000:]}")
        return int(found.group(1).replace(",", ""))

    return round((counted(7) - counted(1)) / (6 * snapshots))


def timed(builds: list[str | None], path: str, name: str, args: argparse.Namespace) -> dict:
    """Each build's best CPU time per snapshot over its rounds (a line per build and round), the
    builds in turn within each round."""
    best = dict.fromkeys(builds, float("inf"))
    for round_ in range(args.rounds):
        for build in builds:
            got = cpu(build, path, name, args.repeats, args.batch)
            line = {"bench": "stage1_build_cpu", "series": name, "round": round_, "build": got["build"]}
            line |= {"cpu_us_best": round(min(got["cpu_us"]), 1)}
            line |= {"cpu_us_median": round(statistics.median(got["cpu_us"]), 1)}
            print(json.dumps(line), flush=True)
            best[build] = min(best[build], min(got["cpu_us"]))
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", help="another build's `pip install --target` directory")
    parser.add_argument("--series", default="marking,quiet,nic")
    parser.add_argument("--rounds", type=int, default=2, help="rounds, each build in turn")
    parser.add_argument("--repeats", type=int, default=15, help="passes per build and round")
    parser.add_argument("--batch", type=int, default=1000, help="snapshots per stage-1 batch (a worker's)")
    parser.add_argument("--nics", type=int, default=1000)
    parser.add_argument("--nic-polls", type=int, default=10)
    parser.add_argument("--instructions", action="store_true", help="count instructions too (valgrind)")
    args = parser.parse_args()
    if args.instructions and shutil.which("valgrind") is None:
        sys.exit("--instructions needs valgrind (apt-get install valgrind)")
    names = args.series.split(",")
    builds: list[str | None] = [args.baseline, None] if args.baseline else [None]
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "series.pkl")
        made = series(args.nics, args.nic_polls)
        with open(path, "wb") as f:
            pickle.dump({n: made[n] for n in names}, f)
        for name in names:
            best = timed(builds, path, name, args)
            ratio: dict = {"bench": "stage1_build_ratio", "series": name}
            if args.baseline:
                ratio["cpu_ratio"] = round(best[None] / best[args.baseline], 3)
            if args.instructions:
                counts = {b: instructions(b, path, name, args.batch, len(made[name])) for b in builds}
                ratio["instructions_per_snapshot"] = counts[None]
                if args.baseline:
                    ratio["baseline_instructions_per_snapshot"] = counts[args.baseline]
                    ratio["instructions_ratio"] = round(counts[None] / counts[args.baseline], 3)
            if len(ratio) > 2:  # a baseline or counts to report
                print(json.dumps(ratio), flush=True)


if __name__ == "__main__":
    main()
