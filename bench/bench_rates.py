"""Decode + rates throughput, in counter values per second on one core; prints JSON lines.

Feeds pre-encoded snapshots (what arrives from Kafka or a trace) of a 64-port switch and of a NIC
through schemas.messages.decode and the RateEngine, for many devices in turn as a stage-1 worker
would see them. Also reports the full stage-1 (rates + detectors) on the same input, one snapshot
at a time (``decode_stage1``) and in batches as the workers run it (``stage1_nic_batch``,
``stage1_switch_batch``: ``Stage1Worker.process``, from message bytes to encoded output messages;
``stage1_switch_marking_batch``: the same switches marking and pausing a little on every queue,
which every switch detector must then read). ``switch_windows_*``: the capacity and microburst
detectors' share of a switch poll, quiet and marking. ``stage1_nic_rhythm_*``: the NIC path with and
without the rhythm detector, on steady traffic and on a job stepping every 6 s, 8 minutes of it
(the detector judges every 30 s and reads every poll).

    python bench/bench_rates.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np

from fabricwatch.blas_threads import limit_blas_threads
from fabricwatch.detectors.config import DetectorConfig
from fabricwatch.detectors.rates import RateEngine
from fabricwatch.detectors.registry import DETECTORS, Registry
from fabricwatch.detectors.spec import Poll, PollStack, StackedRecorder
from fabricwatch.detectors.stage1 import Stage1
from fabricwatch.schemas.messages import CounterSpec, Snapshot, decode, encode
from fabricwatch.streams.stages import STAGE1_CHUNK_VALUES, Stage1Worker

T0 = 1_800_000_000_000_000_000


def switch_counters() -> list[CounterSpec]:
    port = [
        CounterSpec(n)
        for n in ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets", "rx_discards", "tx_discards")
    ]
    prio = [
        CounterSpec(n, index=p)
        for n in ("rx_pfc_frames", "tx_pfc_frames", "rx_pfc_duration_us", "tx_pfc_duration_us")
        for p in range(8)
    ]
    queue = [
        CounterSpec(n, kind=k, index=q)
        for n, k in (
            ("queue_tx_bytes", "counter"),
            ("queue_tx_packets", "counter"),
            ("queue_drops", "counter"),
            ("queue_ecn_marked_packets", "counter"),
            ("queue_occupancy_bytes", "gauge"),
            ("queue_watermark_bytes", "watermark"),
        )
        for q in range(8)
    ]
    return port + prio + queue


def nic_counters() -> list[CounterSpec]:
    names = [
        "tx_bytes",
        "rx_bytes",
        "tx_packets",
        "rx_packets",
        "rx_ecn_marked_packets",
        "cnp_sent",
        "cnp_received",
    ]
    wrap32 = ["out_of_buffer", "out_of_sequence", "packet_seq_err", "local_ack_timeout_err"]
    prio = [CounterSpec(n, index=p) for n in ("rx_pfc_frames", "tx_pfc_frames") for p in range(8)]
    return [CounterSpec(n) for n in names] + [CounterSpec(n, width=32) for n in wrap32] + prio


_TYPICAL_RATE = {
    "tx_bytes": 15e9,
    "rx_bytes": 15e9,
    "tx_packets": 3.6e6,
    "rx_packets": 3.6e6,
    "queue_tx_bytes": 2e9,
    "queue_tx_packets": 5e5,
}
"""Steady traffic at about a third of 400G line rate and no congestion: the common case, in which
detectors are quiet; a benchmark full of random counters would measure symptom formatting."""
_MARKING_RATE = {"queue_ecn_marked_packets": 1000, "rx_pfc_frames": 100, "tx_pfc_frames": 100}
"""The same with a few ECN marks and pauses on every queue and priority, too few to be a fault:
every switch detector then reads the whole poll (``stage1_switch_marking_batch``)."""
_QUEUE_BYTES = 100_000
"""Gauges and watermarks: a queue well below the ECN band."""


def encoded_series(
    kind: str,
    devices: int,
    polls: int,
    nports: int,
    counters: list[CounterSpec],
    marking: bool = False,
    period: int = 0,
) -> list[bytes]:
    """``period``: polls between the starts of a job's steps, each sending for a third of it (a
    rhythm); 0, steady traffic."""
    rng = np.random.default_rng(1)
    base = rng.integers(0, 2**40, size=(devices, nports, len(counters)), dtype=np.uint64)
    base[:, :, [c.kind != "counter" for c in counters]] = _QUEUE_BYTES
    rates = {**_TYPICAL_RATE, **(_MARKING_RATE if marking else {})}
    typical = np.array([rates.get(c.name, 0) for c in counters], dtype=np.uint64)
    step = (rng.uniform(0.5, 1.0, size=(devices, nports, len(counters))) * typical).astype(np.uint64)
    ports = [f"Ethernet{8 * i}" for i in range(nports)] if kind == "switch" else ["1"]
    sent = np.arange(polls + 1, dtype=np.uint64)
    if period:
        on = (np.arange(polls) % period) < max(1, period // 3)
        sent = np.concatenate([[0], np.cumsum(np.where(on, 3, 0))]).astype(np.uint64)
    out = []
    for t in range(polls):
        for d in range(devices):
            values = base[d] + step[d] * sent[t]
            snap = Snapshot(
                device=f"{kind}{d:03d}",
                device_kind=kind,
                ts_ns=T0 + t * 1_000_000_000,
                counters=counters,
                ports=ports,
                values=values.tolist(),
            )
            out.append(encode(snap))
    return out


def measure(label: str, messages: list[bytes], values_per_msg: int, seconds: float, stage1: bool) -> dict:
    runs, elapsed = 0, 0.0
    while elapsed < seconds:
        engine = Stage1() if stage1 else RateEngine()
        step = engine.process if stage1 else engine.update
        start = time.perf_counter()
        for m in messages:
            step(decode(m, Snapshot))
        elapsed += time.perf_counter() - start
        runs += 1
    values = runs * len(messages) * values_per_msg
    return {
        "bench": "decode_rates" if not stage1 else "decode_stage1",
        "device": label,
        "values_per_snapshot": values_per_msg,
        "snapshots_per_s": round(runs * len(messages) / elapsed),
        "values_per_s": round(values / elapsed),
        "us_per_snapshot": round(elapsed / (runs * len(messages)) * 1e6, 1),
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def measure_batch(label: str, messages: list[bytes], seconds: float, batch: int) -> dict:
    """Stage 1 as a worker runs it (``Stage1Worker.process``): a batch of message bytes in, decoded,
    stacked, through the detectors, and out as encoded rates and symptoms messages."""
    runs, elapsed, sent = 0, 0.0, 0
    sources = ["fabric.counters/0"] * batch
    while elapsed < seconds:
        stage = Stage1Worker(DetectorConfig())
        start = time.perf_counter()
        for i in range(0, len(messages), batch):
            out = stage.process(messages[i : i + batch], sources)
            sent += len(out.rates) + len(out.symptoms)
        elapsed += time.perf_counter() - start
        runs += 1
    n = runs * len(messages)
    return {
        "bench": f"stage1_{label}_batch",
        "batch": batch,
        "snapshots_per_s": round(n / elapsed),
        "us_per_snapshot": round(elapsed / n * 1e6, 1),
        "messages_out_per_snapshot": round(sent / n, 4),
    }


def measure_rhythm(label: str, messages: list[bytes], seconds: float, batch: int) -> list[dict]:
    """Stage 1's NIC path with and without the rhythm detector (``traffic_rhythm.py``), in turns
    within the run: its cost as a ratio on this machine, whatever else runs on it."""
    snaps = [decode(m, Snapshot) for m in messages]
    registries = {
        "with": Registry(DETECTORS),
        "without": Registry(tuple(d for d in DETECTORS if d.name != "rhythm")),
    }
    spent: dict[str, list[float]] = {name: [] for name in registries}
    start = time.perf_counter()
    while time.perf_counter() - start < 2 * seconds or len(spent["with"]) < 3:
        for name, registry in registries.items():
            stage = Stage1(DetectorConfig(), registry=registry)
            began = time.perf_counter()
            for i in range(0, len(snaps), batch):
                stage.process_batch(snaps[i : i + batch])
            spent[name].append((time.perf_counter() - began) / len(snaps))
    best = {name: min(times) for name, times in spent.items()}  # the run least disturbed
    return [
        {
            "bench": f"stage1_nic_rhythm_{label}",
            "rhythm_detector": name,
            "runs": len(spent[name]),
            "us_per_snapshot_best": round(best[name] * 1e6, 2),
            "ratio_to_without": round(best[name] / best["without"], 3),
        }
        for name in registries
    ]


def measure_windows(label: str, messages: list[bytes], seconds: float) -> dict:
    """The capacity and microburst detectors on a 64-port switch's polls as a worker's stage 1
    drives them (every poll recorded, the microburst detector reading a chunk's polls at once;
    asked what they say when due): their share of a switch poll, the least disturbed of the runs.
    A quiet switch marks nothing, and the microburst detector only counts its polls as read."""
    stage = Stage1(DetectorConfig())
    polls = []
    for snap in (decode(m, Snapshot) for m in messages):
        line, known = stage.fabric.speeds(snap.device, snap.ports)
        if (frame := stage.rates.update(snap, known)) is not None:
            polls.append(Poll(frame, line, stage.fabric))
    per_chunk = max(1, STAGE1_CHUNK_VALUES // polls[0].frame.values.size)
    chunks = [polls[i : i + per_chunk] for i in range(0, len(polls), per_chunk)]
    windowed = [d for d in DETECTORS if d.name in ("capacity", "microbursts")]
    spent: list[float] = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds or len(spent) < 3:
        detectors = [d.make(stage.config) for d in windowed]  # type: ignore[misc]
        began = time.perf_counter()
        for chunk in chunks:
            stack = PollStack.of([p.frame for p in chunk], [p.line_Bps for p in chunk], stage.fabric)
            for d in detectors:
                stacked = isinstance(d, StackedRecorder)
                readings = d.readings(stack) if stacked else [None] * len(chunk)
                for poll, reading in zip(chunk, readings, strict=True):
                    if stacked:
                        d.record(poll, reading)
                    else:
                        d.record(poll)
                    if d.due(poll.frame.device, poll.frame.ts_ns):
                        d.update(poll)
        spent.append((time.perf_counter() - began) / len(polls))
    return {
        "bench": f"switch_windows_{label}",
        "runs": len(spent),
        "us_per_poll_best": round(min(spent) * 1e6, 1),
    }


def main() -> None:
    limit_blas_threads()  # as the workers run
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--batch", type=int, default=1000, help="snapshots per stage-1 batch (a worker's)")
    parser.add_argument("--rhythm-nics", type=int, default=200, help="NICs of the rhythm benchmark")
    args = parser.parse_args()
    sw, nic = switch_counters(), nic_counters()
    cases = [
        ("switch64", encoded_series("switch", 8, 20, 64, sw), 64 * len(sw)),
        ("nic", encoded_series("nic", 1000, 10, 1, nic), len(nic)),
    ]
    for label, msgs, per in cases:
        for stage1 in (False, True):
            print(json.dumps(measure(label, msgs, per, args.seconds, stage1)), flush=True)
        short = "switch" if label.startswith("switch") else label
        print(json.dumps(measure_batch(short, msgs, args.seconds, args.batch)), flush=True)
    marking = encoded_series("switch", 8, 20, 64, sw, marking=True)
    print(json.dumps(measure_batch("switch_marking", marking, args.seconds, args.batch)), flush=True)
    for label, series in (("quiet", cases[0][1]), ("marking", marking)):
        print(json.dumps(measure_windows(label, series, args.seconds)), flush=True)
    for label, period in (("steady", 0), ("stepping", 6)):  # 8 minutes at 1 s polls
        msgs = encoded_series("nic", args.rhythm_nics, 480, 1, nic, period=period)
        for line in measure_rhythm(label, msgs, args.seconds, args.batch):
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
