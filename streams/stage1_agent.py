"""Stage 1 in a worker: ``fabric.counters`` in batches, rates and symptoms out, and the heartbeat
that tells stage 2 which input partitions are read to their end.

A batch amortises Faust's per-event cost over many snapshots; its events are acknowledged only
after its output was handed to the producer, so a crash redelivers, never skips (at-least-once).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import faust

from fabricwatch.schemas import topics

if TYPE_CHECKING:
    from fabricwatch.streams.worker_context import Worker

log = logging.getLogger(__name__)


def wire(w: Worker) -> None:
    app, opts = w.app, w.opts

    @app.agent(app.topic(topics.COUNTERS))
    async def stage1_agent(stream: faust.StreamT) -> None:
        async for events in stream.take_events(opts.batch_max, within=opts.batch_within_s):
            if not w.topology_seen.is_set():
                await _wait(w.topology_seen, opts.topology_wait_s)
            sources = [f"{e.message.topic}/{e.message.partition}" for e in events]
            async with w.stage1_lock:
                began = time.thread_time()
                out = w.stage1.process([e.message.value for e in events], sources)
                w.progress.core_cpu_s["stage1"] += time.thread_time() - began
                for r in out.rejected:
                    await w.dead_letter(events[r.index], r.reason)
                for reason in out.clock_drops:
                    w.progress.dead_letter(reason)
                for k in out.rates:
                    await w.send(topics.RATES, k)
                for k in out.symptoms:
                    await w.send(topics.SYMPTOMS, k)
                for e in events:
                    w.processed[e.message.tp] = e.message.offset
            w.progress.processed("snapshots", len(events) - len(out.rejected))
            w.progress.processed("values", out.values)
            if change := w.progress.input_age("stage1", events[-1].message.timestamp):
                log.warning("%s", change)

    @app.task
    async def stage1_heartbeat() -> None:
        """Tell stage 2 which of our input partitions have nothing left to read (see Stage1Worker)."""
        while True:
            await asyncio.sleep(opts.heartbeat_s)
            owned = [tp for tp in app.consumer.assignment() if tp.topic == topics.COUNTERS]
            if not owned:
                continue
            ends = await app.consumer.highwaters(*owned)
            async with w.stage1_lock:
                caught_up = {
                    f"{tp.topic}/{tp.partition}": w.processed.get(tp, -1) + 1 >= (ends.get(tp) or 0)
                    for tp in owned
                }
                for k in w.stage1.heartbeat(caught_up):
                    await w.send(topics.SYMPTOMS, k)

    @app.on_partitions_revoked.connect
    async def on_revoked(sender: Any, revoked: Any, **kwargs: Any) -> None:
        for tp in revoked:
            w.processed.pop(tp, None)


async def _wait(event: asyncio.Event, timeout_s: float) -> None:
    """Wait for the topology, but not forever: detection without it is degraded, not impossible."""
    try:
        await asyncio.wait_for(event.wait(), timeout_s)
    except TimeoutError:
        event.set()
