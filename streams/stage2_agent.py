"""Stage 2 in a worker: ``fabric.symptoms`` in event-time order, anomaly lifecycle events out.

Anomalies are keyed by fingerprint, a hash of kind and root: a redelivered incident has the same
fingerprint, so consumers remove duplicates by it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

import faust

from fabricwatch.schemas import topics
from fabricwatch.schemas.messages import Anomaly, Watermark, encode
from fabricwatch.streams.stages import Keyed

if TYPE_CHECKING:
    from fabricwatch.streams.worker_context import Worker

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 0.5
"""How often stage 2 says how far it has judged (``topics.PROGRESS``): the job stage's lag behind
the fabric's, at most."""


def wire(w: Worker) -> None:
    app, opts = w.app, w.opts
    anomalies = app.topic(topics.ANOMALIES)

    async def publish(fired: list[Anomaly]) -> None:
        for a in fired:
            await anomalies.send(key=a.fingerprint.encode(), value=encode(a))
        w.progress.processed("anomalies", len(fired))

    @app.agent(app.topic(topics.SYMPTOMS))
    async def stage2_agent(stream: faust.StreamT) -> None:
        await w.topology_read()  # a new owner judging a pod's pauses without its links roots them anywhere
        async for events in stream.take_events(opts.batch_max, within=opts.batch_within_s):
            async with w.stage2_lock:
                taken = w.stage2.taken
                for event in events:
                    channel = str(event.message.partition)
                    began = time.thread_time()
                    fired, reason = w.stage2.feed(event.message.value, time.monotonic(), channel)
                    w.progress.core_cpu_s["stage2"] += time.thread_time() - began
                    if reason is not None:
                        await w.dead_letter(event.message, reason)
                    await publish(fired)
                taken = w.stage2.taken - taken
            w.progress.processed("symptoms", taken)  # symptoms and watermarks, not messages
            if change := w.progress.input_age("stage2", events[-1].message.timestamp):
                log.warning("%s", change)

    @app.timer(1.0)
    async def stage2_idle() -> None:
        """Time moves on for incidents when inputs go quiet (see Stage2Worker)."""
        async with w.stage2_lock:
            await publish(w.stage2.advance(time.monotonic()))

    @app.timer(PROGRESS_EVERY_S)
    async def stage2_progress() -> None:
        """How far this stage 2 has judged, once what it published before is on the broker, for
        each symptoms partition it owns and has heard from (``streams/job_worker.py``): one no
        pod's symptoms go to says nothing, ever, and must hold nothing back."""
        heard = w.stage2.channels
        owned = sorted(
            tp.partition
            for tp in app.consumer.assignment()
            if tp.topic == topics.SYMPTOMS and str(tp.partition) in heard
        )
        if not owned:
            return
        async with w.stage2_lock:
            try:
                await asyncio.wait_for(app.producer.flush(), PROGRESS_EVERY_S * 4)
            except TimeoutError:
                return  # a broker away: say nothing rather than hold stage 2 waiting for it
            released = w.stage2.released_ns
            for p in owned:
                source = f"{topics.SYMPTOMS}/{p}"
                await w.send(topics.PROGRESS, Keyed(source.encode(), encode(Watermark(source, released))))
